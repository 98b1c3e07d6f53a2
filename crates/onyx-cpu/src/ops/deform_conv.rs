//! DeformConv (opset 19), 2-D: a convolution whose every kernel tap reads the input at its
//! regular position plus a learned fractional offset (bilinear sampling, zero outside the
//! image), optionally scaled by a mask. Offsets `[N, offset_group · kH · kW · 2, oH, oW]` hold
//! (dy, dx) per tap; the mask `[N, offset_group · kH · kW, oH, oW]` one factor per tap. Input
//! channels are split into `group` convolution groups and `offset_group` offset groups.
//! Computed in f64.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("DeformConv", build_deform_conv);
}

/// A DeformConv node with its attributes decoded.
struct DeformConv {
    strides: [usize; 2],
    dilations: [usize; 2],
    /// Top, left, bottom, right.
    pads: [usize; 4],
    group: usize,
    offset_group: usize,
    kernel: Option<[usize; 2]>,
    at: Location,
}

fn pair<const N: usize>(ctx: &NodeContext<'_>, name: &str, default: usize, min: i64) -> Result<[usize; N]> {
    let at = ctx.node.location();
    match ctx.node.get_ints(name)? {
        None => Ok([default; N]),
        Some(v) if v.len() == N && v.iter().all(|&x| x >= min) => {
            let mut out = [0; N];
            out.iter_mut().zip(v).for_each(|(o, &x)| *o = x as usize);
            Ok(out)
        }
        Some(v) => Err(Error::attribute(&at, name, format!("{N} values >= {min} (2-D only)"), format!("{v:?}"))),
    }
}

fn build_deform_conv(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let count = |name: &str| -> Result<usize> {
        let v = ctx.node.int_or(name, 1)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| Error::attribute(&at, name, "a value >= 1", v.to_string()))
    };
    let kernel = match ctx.node.get_ints("kernel_shape")? {
        None => None,
        Some(_) => Some(pair::<2>(ctx, "kernel_shape", 1, 1)?),
    };
    Ok(Box::new(DeformConv {
        strides: pair(ctx, "strides", 1, 1)?,
        dilations: pair(ctx, "dilations", 1, 1)?,
        pads: pair(ctx, "pads", 0, 0)?,
        group: count("group")?,
        offset_group: count("offset_group")?,
        kernel,
        at,
    }))
}

/// Bilinear sample of an `h x w` plane at (y, x), zero outside.
fn sample(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let at = |r: f64, c: f64| -> f64 {
        if r < 0.0 || c < 0.0 || r >= h as f64 || c >= w as f64 {
            0.0
        } else {
            plane[r as usize * w + c as usize]
        }
    };
    at(y0, x0) * (1.0 - ly) * (1.0 - lx)
        + at(y0, x0 + 1.0) * (1.0 - ly) * lx
        + at(y0 + 1.0, x0) * ly * (1.0 - lx)
        + at(y0 + 1.0, x0 + 1.0) * ly * lx
}

/// The shapes of one call.
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
}

impl DeformConv {
    fn dims(
        &self,
        x: &[usize],
        wt: &[usize],
        off: &[usize],
        mask: Option<&[usize]>,
        bias: Option<&[usize]>,
    ) -> Result<Dims> {
        let at = &self.at;
        if x.len() != 4 || wt.len() != 4 {
            return Err(Error::node(at, format!("only 2-D DeformConv is supported: X {x:?}, W {wt:?}")));
        }
        let (n, c, h, w) = (x[0], x[1], x[2], x[3]);
        let (oc, kh, kw) = (wt[0], wt[2], wt[3]);
        if self.kernel.is_some_and(|k| k != [kh, kw]) {
            return Err(Error::input(at, 1, format!("weights with kernel_shape {:?}", self.kernel), format!("{wt:?}")));
        }
        if wt[1] * self.group != c || oc % self.group != 0 || c % self.offset_group != 0 {
            return Err(Error::input(
                at,
                1,
                format!(
                    "[M, C / group, kH, kW] with C = {c}, group = {}, offset_group = {}",
                    self.group, self.offset_group
                ),
                format!("{wt:?}"),
            ));
        }
        let (sh, sw) = (self.strides[0], self.strides[1]);
        let span_h = self.dilations[0] * kh.saturating_sub(1) + 1;
        let span_w = self.dilations[1] * kw.saturating_sub(1) + 1;
        let (ph, pw) = (h + self.pads[0] + self.pads[2], w + self.pads[1] + self.pads[3]);
        if kh == 0 || kw == 0 || ph < span_h || pw < span_w {
            return Err(Error::node(
                at,
                format!("a kernel of {kh}x{kw} (dilated {span_h}x{span_w}) does not fit the padded input {ph}x{pw}"),
            ));
        }
        let (oh, ow) = ((ph - span_h) / sh + 1, (pw - span_w) / sw + 1);
        let taps = self.offset_group * kh * kw;
        if off != [n, taps * 2, oh, ow] {
            return Err(Error::input(
                at,
                2,
                format!("offsets of shape {:?}", [n, taps * 2, oh, ow]),
                format!("{off:?}"),
            ));
        }
        if let Some(m) = mask {
            if m != [n, taps, oh, ow] {
                return Err(Error::input(at, 4, format!("a mask of shape {:?}", [n, taps, oh, ow]), format!("{m:?}")));
            }
        }
        if bias.is_some_and(|b| b != [oc]) {
            return Err(Error::input(at, 3, format!("a bias of shape [{oc}]"), format!("{:?}", bias.unwrap_or(&[]))));
        }
        Ok(Dims { n, c, h, w, oc, kh, kw, oh, ow })
    }

    fn compute(
        &self,
        x: &TensorView<'_>,
        wt: &TensorView<'_>,
        off: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        mask: Option<&TensorView<'_>>,
    ) -> Result<Value> {
        let at = &self.at;
        for (i, t) in [(0, Some(x)), (1, Some(wt)), (2, Some(off)), (3, bias), (4, mask)] {
            if let Some(t) = t {
                if compute_type(t.dtype()).is_none() || t.dtype() != x.dtype() {
                    return Err(Error::input(
                        at,
                        i,
                        format!("a float tensor of the input's type {}", x.dtype()),
                        t.dtype().name(),
                    ));
                }
            }
        }
        let d = self.dims(x.shape(), wt.shape(), off.shape(), mask.map(|m| m.shape()), bias.map(|b| b.shape()))?;
        let (xs, ws, os) = (float_slice::<f64>(x)?, float_slice::<f64>(wt)?, float_slice::<f64>(off)?);
        let ms = mask.map(float_slice::<f64>).transpose()?;
        let bs = bias.map(float_slice::<f64>).transpose()?;
        let (k, opix) = (d.kh * d.kw, d.oh * d.ow);
        let (cg, ocg, cog) = (d.c / self.group, d.oc / self.group, d.c / self.offset_group);
        let mut out = vec![0.0; d.n * d.oc * opix];
        for b in 0..d.n {
            // Sampled columns [c, k, oh*ow] for this batch entry, then a plain product per group.
            let mut cols = vec![0.0; d.c * k * opix];
            for ch in 0..d.c {
                let g = ch / cog;
                let plane = &xs[(b * d.c + ch) * d.h * d.w..][..d.h * d.w];
                for t in 0..k {
                    let (i, j) = (t / d.kw, t % d.kw);
                    let tap = g * k + t;
                    for p in 0..opix {
                        let (oy, ox) = (p / d.ow, p % d.ow);
                        let dy = os[((b * self.offset_group * k + tap) * 2) * opix + p];
                        let dx = os[((b * self.offset_group * k + tap) * 2 + 1) * opix + p];
                        let y = (oy * self.strides[0] + i * self.dilations[0]) as f64 - self.pads[0] as f64 + dy;
                        let xx = (ox * self.strides[1] + j * self.dilations[1]) as f64 - self.pads[1] as f64 + dx;
                        let m = ms.as_ref().map_or(1.0, |m| m[(b * self.offset_group * k + tap) * opix + p]);
                        cols[(ch * k + t) * opix + p] = m * sample(plane, d.h, d.w, y, xx);
                    }
                }
            }
            for o in 0..d.oc {
                let g = o / ocg;
                let dst = &mut out[(b * d.oc + o) * opix..][..opix];
                dst.iter_mut().for_each(|v| *v = bs.as_ref().map_or(0.0, |bs| bs[o]));
                for ci in 0..cg {
                    for t in 0..k {
                        let wv = ws[(o * cg + ci) * k + t];
                        let col = &cols[((g * cg + ci) * k + t) * opix..][..opix];
                        dst.iter_mut().zip(col).for_each(|(v, &c)| *v += wv * c);
                    }
                }
            }
        }
        float_output(x.dtype(), vec![d.n, d.oc, d.oh, d.ow], out)
    }
}

impl Kernel for DeformConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let w = util::input(inputs, 1, at)?;
        let off = util::input(inputs, 2, at)?;
        let bias = util::opt_input(inputs, 3, at)?;
        let mask = util::opt_input(inputs, 4, at)?;
        Ok(vec![self.compute(&x, &w, &off, bias.as_ref(), mask.as_ref()).map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests;
