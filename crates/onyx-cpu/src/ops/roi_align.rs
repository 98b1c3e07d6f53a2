//! RoiAlign (opsets 10, 16): pools each region of interest of a `[N, C, H, W]` feature map to
//! `[output_height, output_width]` by bilinear sampling on a regular grid in every bin
//! (`sampling_ratio` points per side, or ⌈bin size⌉ when 0), then averaging (`avg`) or taking
//! the largest weighted corner value (`max`, as ONNX Runtime and ONNX's reference do).
//! `half_pixel` coordinates (the default from opset 16) shift the ROI by −0.5 pixel; the older
//! `output_half_pixel` keeps it and makes bins at least one pixel. Computed in f64.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("RoiAlign", build_roi_align);
}

/// A RoiAlign node with its attributes decoded.
struct RoiAlign {
    half_pixel: bool,
    max: bool,
    out_h: usize,
    out_w: usize,
    sampling: usize,
    scale: f64,
    at: Location,
}

fn build_roi_align(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let default_mode = if ctx.since_version >= 16 { "half_pixel" } else { "output_half_pixel" };
    let half_pixel = match node.string_or("coordinate_transformation_mode", default_mode)?.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(Error::attribute(
                &at,
                "coordinate_transformation_mode",
                "half_pixel or output_half_pixel",
                other,
            ))
        }
    };
    let max = match node.string_or("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(Error::attribute(&at, "mode", "avg or max", other)),
    };
    let size = |name: &str, default: i64, min: i64| -> Result<usize> {
        let v = node.int_or(name, default)?;
        if v < min {
            return Err(Error::attribute(&at, name, format!("a value >= {min}"), v.to_string()));
        }
        Ok(v as usize)
    };
    let scale = node.float_or("spatial_scale", 1.0)? as f64;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(Error::attribute(&at, "spatial_scale", "a positive value", scale.to_string()));
    }
    Ok(Box::new(RoiAlign {
        half_pixel,
        max,
        out_h: size("output_height", 1, 1)?,
        out_w: size("output_width", 1, 1)?,
        sampling: size("sampling_ratio", 0, 0)?,
        scale,
        at,
    }))
}

/// The four corners (flat offsets in one `H x W` plane) and weights of a bilinear sample, or
/// `None` for a sample outside the map.
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Option<[(usize, f64); 4]> {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return None;
    }
    let corner = |v: f64, n: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let lo = v as usize;
        if lo >= n - 1 {
            (n - 1, n - 1, 0.0)
        } else {
            (lo, lo + 1, v - lo as f64)
        }
    };
    let (y0, y1, ly) = corner(y, h);
    let (x0, x1, lx) = corner(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some([(y0 * w + x0, hy * hx), (y0 * w + x1, hy * lx), (y1 * w + x0, ly * hx), (y1 * w + x1, ly * lx)])
}

impl RoiAlign {
    /// One output bin of one channel plane.
    fn bin(
        &self,
        plane: &[f64],
        (h, w): (usize, usize),
        start: (f64, f64),
        size: (f64, f64),
        grid: (usize, usize),
    ) -> f64 {
        let mut acc: Option<f64> = None;
        let mut sum = 0.0;
        for iy in 0..grid.0 {
            let y = start.0 + (iy as f64 + 0.5) * size.0 / grid.0 as f64;
            for ix in 0..grid.1 {
                let x = start.1 + (ix as f64 + 0.5) * size.1 / grid.1 as f64;
                let corners = bilinear(y, x, h, w);
                if self.max {
                    let v = corners
                        .map_or(0.0, |c| c.iter().map(|&(p, wt)| wt * plane[p]).fold(f64::NEG_INFINITY, f64::max));
                    acc = Some(acc.map_or(v, |a| a.max(v)));
                } else if let Some(c) = corners {
                    sum += c.iter().map(|&(p, wt)| wt * plane[p]).sum::<f64>();
                }
            }
        }
        if self.max {
            acc.unwrap_or(0.0)
        } else {
            sum / (grid.0 * grid.1).max(1) as f64
        }
    }
}

impl Kernel for RoiAlign {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let rois = util::input(inputs, 1, at)?;
        let idx = util::input(inputs, 2, at)?;
        let s = x.shape();
        if s.len() != 4 || compute_type(x.dtype()).is_none() {
            return Err(Error::input(at, 0, "a float [N, C, H, W] tensor", format!("{} {s:?}", x.dtype())));
        }
        let r = rois.shape().first().copied().unwrap_or(0);
        if rois.shape() != [r, 4] || rois.dtype() != x.dtype() {
            return Err(Error::input(
                at,
                1,
                format!("{} rois of shape [R, 4]", x.dtype()),
                format!("{} {:?}", rois.dtype(), rois.shape()),
            ));
        }
        if idx.shape() != [r] {
            return Err(Error::input(at, 2, format!("batch indices of shape [{r}]"), format!("{:?}", idx.shape())));
        }
        let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
        let batch: Vec<usize> = util::to_i64(&idx)?
            .into_iter()
            .map(|b| {
                usize::try_from(b)
                    .ok()
                    .filter(|&b| b < n)
                    .ok_or_else(|| Error::input(at, 2, format!("batch indices in 0..{n}"), b.to_string()))
            })
            .collect::<Result<_>>()?;
        let data = float_slice::<f64>(&x)?;
        let boxes = float_slice::<f64>(&rois)?;
        let (oh, ow) = (self.out_h, self.out_w);
        let mut out = Vec::with_capacity(r * c * oh * ow);
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        for (k, &b) in batch.iter().enumerate() {
            let bx: Vec<f64> = boxes[k * 4..k * 4 + 4].iter().map(|&v| v * self.scale - offset).collect();
            let (mut rh, mut rw) = (bx[3] - bx[1], bx[2] - bx[0]);
            if !self.half_pixel {
                rh = rh.max(1.0);
                rw = rw.max(1.0);
            }
            let size = (rh / oh as f64, rw / ow as f64);
            let grid_side = |extent: f64, bins: usize| {
                if self.sampling > 0 {
                    self.sampling
                } else {
                    (extent / bins as f64).ceil().max(0.0) as usize
                }
            };
            let grid = (grid_side(rh, oh), grid_side(rw, ow));
            for ch in 0..c {
                let plane = &data[(b * c + ch) * h * w..][..h * w];
                for ph in 0..oh {
                    for pw in 0..ow {
                        let start = (bx[1] + ph as f64 * size.0, bx[0] + pw as f64 * size.1);
                        out.push(if h == 0 || w == 0 { 0.0 } else { self.bin(plane, (h, w), start, size, grid) });
                    }
                }
            }
        }
        Ok(vec![float_output(x.dtype(), vec![r, c, oh, ow], out)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats, tensor};
    use crate::ops::matmul::test_support::{build, node, run, string};
    use onyx_core::ir::AttrValue;

    fn roi_align(
        attrs: Vec<(&str, AttrValue)>,
        x: (&[usize], Vec<f32>),
        rois: Vec<f32>,
        idx: Vec<i64>,
    ) -> Result<onyx_core::Tensor> {
        let k = build(build_roi_align, &node("RoiAlign", &["x", "r", "b"], 1, attrs), 16)?;
        let nr = idx.len();
        run(k.as_ref(), &[Some(tensor(x.0, x.1)), Some(tensor(&[nr, 4], rois)), Some(tensor(&[nr], idx))], 1)?
            .remove(0)
            .into_tensor()
    }

    #[test]
    fn roi_align_averages_bilinear_samples() {
        // On a linear ramp f(y, x) = 10 y + x, bilinear sampling is exact inside the map, so the
        // average over a bin is f at the bin's centre.
        let (h, w) = (7usize, 9usize);
        let ramp: Vec<f32> =
            (0..2 * h * w).map(|i| ((i % (h * w)) / w * 10 + i % w) as f32 + (i / (h * w)) as f32 * 100.0).collect();
        let attrs = vec![
            ("output_height", AttrValue::Int(2)),
            ("output_width", AttrValue::Int(3)),
            ("sampling_ratio", AttrValue::Int(2)),
        ];
        let rois = vec![1.5f32, 1.5, 7.5, 5.5, 2.0, 1.0, 5.0, 3.0];
        let y = roi_align(attrs, (&[1, 2, h, w], ramp), rois.clone(), vec![0, 0]).unwrap();
        assert_eq!(y.shape(), &[2, 2, 2, 3]);
        let mut want = vec![];
        for r in 0..2 {
            let b: Vec<f64> = rois[r * 4..r * 4 + 4].iter().map(|&v| v as f64 - 0.5).collect();
            let (bh, bw) = ((b[3] - b[1]) / 2.0, (b[2] - b[0]) / 3.0);
            for ch in 0..2 {
                for ph in 0..2 {
                    for pw in 0..3 {
                        let cy = b[1] + (ph as f64 + 0.5) * bh;
                        let cx = b[0] + (pw as f64 + 0.5) * bw;
                        want.push(10.0 * cy + cx + ch as f64 * 100.0);
                    }
                }
            }
        }
        assert_close(&floats(&y), &want, 1e-5, 1e-5, "ramp");
        // Max mode takes the largest weighted corner: on a constant map that is the largest
        // bilinear weight of any sample.
        let attrs = vec![
            ("mode", string("max")),
            ("sampling_ratio", AttrValue::Int(1)),
            ("coordinate_transformation_mode", string("output_half_pixel")),
        ];
        let y = roi_align(attrs, (&[1, 1, 4, 4], vec![2.0; 16]), vec![1.0, 1.0, 2.0, 2.0], vec![0]).unwrap();
        // One sample at (1.5, 1.5): every corner weight is 0.25.
        assert_close(&floats(&y), &[0.5], 1e-6, 0.0, "max");
    }

    #[test]
    fn invalid_roi_aligns_are_errors() {
        let e = roi_align(vec![], (&[1, 1, 2, 2], vec![1.0; 4]), vec![0.0; 4], vec![1]).unwrap_err().to_string();
        assert!(e.contains("input 2") && e.contains("0..1"), "{e}");
        assert!(roi_align(vec![("mode", string("min"))], (&[1, 1, 2, 2], vec![1.0; 4]), vec![0.0; 4], vec![0]).is_err());
        assert!(roi_align(
            vec![("output_height", AttrValue::Int(0))],
            (&[1, 1, 2, 2], vec![1.0; 4]),
            vec![0.0; 4],
            vec![0]
        )
        .is_err());
    }
}
