//! From coefficients to pixels as libjpeg-turbo's default decompression makes them: each
//! component's blocks through the islow IDCT, subsampled components upsampled by its "fancy"
//! triangle filters (box replication where libjpeg uses it), YCbCr to RGB in its fixed point.

use super::{idct, ColorSpace, Component, Frame};

/// A component's samples at its own resolution, rows `stride` apart.
struct Plane {
    samples: Vec<u8>,
    stride: usize,
    width: usize,
    height: usize,
}

impl Plane {
    fn row(&self, y: usize) -> &[u8] {
        &self.samples[y * self.stride..y * self.stride + self.width]
    }
}

/// The inverse DCT of every block of `comp`, cropped to `(width, height)` samples.
fn inverse_dct(comp: &Component, (width, height): (usize, usize)) -> Result<Plane, String> {
    let quant = comp.quant.as_ref().ok_or_else(|| format!("component {} has no quantization table", comp.id))?;
    let stride = comp.blocks_w * 8;
    let mut samples = vec![0u8; stride * comp.blocks_h * 8];
    for (i, block) in comp.coefs.iter().enumerate() {
        let (bx, by) = (i % comp.blocks_w, i / comp.blocks_w);
        idct::islow(block, quant, &mut samples[by * 8 * stride + bx * 8..], stride);
    }
    Ok(Plane { samples, stride, width, height })
}

/// `(3 a + b + bias) >> shift`: the triangle filter's tap pair.
fn tri(a: u32, b: u32, bias: u32, shift: u32) -> u8 {
    ((3 * a + b + bias) >> shift) as u8
}

/// Upsamples `p` by `(hf, vf)` to `(width, height)` as libjpeg's upsampler picks for those
/// factors: triangle filters for 2x1, 1x2 and 2x2 (2x1 and 2x2 on planes wider than 2), box
/// replication for other integer factors.
fn upsample(p: &Plane, (hf, vf): (usize, usize), (width, height): (usize, usize)) -> Vec<u8> {
    let mut out = Vec::with_capacity(width * height);
    let near = |y: usize, down: bool| if down { (y + 1).min(p.height - 1) } else { y.saturating_sub(1) };
    for oy in 0..height {
        let (y, down) = (oy / vf, oy % vf == 1);
        let row = p.row(y);
        let last = p.width - 1;
        match (hf, vf) {
            (1, 1) => out.extend_from_slice(&row[..width]),
            (2, 1) if p.width > 2 => out.extend((0..width).map(|ox| {
                let (x, right) = (ox / 2, ox % 2 == 1);
                let other = if right { row[(x + 1).min(last)] } else { row[x.saturating_sub(1)] };
                tri(row[x].into(), other.into(), if right { 2 } else { 1 }, 2)
            })),
            (1, 2) => {
                let other = p.row(near(y, down));
                out.extend((0..width).map(|x| tri(row[x].into(), other[x].into(), if down { 2 } else { 1 }, 2)));
            }
            (2, 2) if p.width > 2 => {
                let other = p.row(near(y, down));
                let sum = |x: usize| 3 * u32::from(row[x]) + u32::from(other[x]);
                out.extend((0..width).map(|ox| {
                    let (x, right) = (ox / 2, ox % 2 == 1);
                    let neighbour = if right { sum((x + 1).min(last)) } else { sum(x.saturating_sub(1)) };
                    tri(sum(x), neighbour, if right { 7 } else { 8 }, 4)
                }))
            }
            _ => out.extend((0..width).map(|ox| row[ox / hf])),
        }
    }
    out
}

/// libjpeg's YCbCr to RGB conversion of one pixel (16-bit fixed point, `FIX(x) = x 2^16 + 0.5`
/// truncated, its rounding of each term).
fn ycc_to_rgb(y: u8, cb: u8, cr: u8) -> [u8; 3] {
    const HALF: i32 = 1 << 15;
    let (y, cb, cr) = (i32::from(y), i32::from(cb) - 128, i32::from(cr) - 128);
    let clamp = |v: i32| v.clamp(0, 255) as u8;
    [
        clamp(y + ((91881 * cr + HALF) >> 16)),
        clamp(y + ((-22554 * cb + HALF - 46802 * cr) >> 16)),
        clamp(y + ((116130 * cb + HALF) >> 16)),
    ]
}

/// The frame's pixels: `[height][width][channels]`, 1 channel for gray, else RGB.
pub(super) fn pixels(frame: &Frame, color: ColorSpace) -> Result<(Vec<u8>, usize), String> {
    let full = (frame.width, frame.height);
    let mut planes = Vec::with_capacity(frame.comps.len());
    for (i, comp) in frame.comps.iter().enumerate() {
        let (hf, vf) = (frame.max_h / comp.h, frame.max_v / comp.v);
        if hf * comp.h != frame.max_h || vf * comp.v != frame.max_v {
            return Err(format!("component {} is subsampled by a fraction", comp.id));
        }
        let plane = inverse_dct(comp, frame.sampled_size(i))?;
        planes.push(if (hf, vf) == (1, 1) { plane.samples_cropped(full) } else { upsample(&plane, (hf, vf), full) });
    }
    Ok(match color {
        ColorSpace::Gray => (planes.swap_remove(0), 1),
        ColorSpace::Rgb => ((0..full.0 * full.1).flat_map(|i| [planes[0][i], planes[1][i], planes[2][i]]).collect(), 3),
        ColorSpace::YCbCr => {
            ((0..full.0 * full.1).flat_map(|i| ycc_to_rgb(planes[0][i], planes[1][i], planes[2][i])).collect(), 3)
        }
    })
}

impl Plane {
    /// The plane's first `height` rows of `width` samples, packed.
    fn samples_cropped(&self, (width, height): (usize, usize)) -> Vec<u8> {
        (0..height).flat_map(|y| self.row(y)[..width].iter().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plane(width: usize, height: usize, samples: Vec<u8>) -> Plane {
        Plane { samples, stride: width, width, height }
    }

    #[test]
    fn two_by_two_triangle_filter_matches_libjpeg_sums() {
        // 3x2 samples upsampled to 6x4 (and cropped to 5x3).
        let p = plane(3, 2, vec![10, 50, 90, 30, 70, 250]);
        let out = upsample(&p, (2, 2), (5, 3));
        // Row 0 pairs with itself above: column sums 4x; row 1 of the output pairs row 0 with row 1.
        let s0 = [40u32, 200, 360];
        let s1 = [3 * 10 + 30, 3 * 50 + 70, 3 * 90 + 250];
        let f = |s: [u32; 3]| {
            [
                (4 * s[0] + 8) >> 4,
                (3 * s[0] + s[1] + 7) >> 4,
                (3 * s[1] + s[0] + 8) >> 4,
                (3 * s[1] + s[2] + 7) >> 4,
                (3 * s[2] + s[1] + 8) >> 4,
            ]
            .map(|v| v as u8)
        };
        assert_eq!(&out[..5], &f(s0));
        assert_eq!(&out[5..10], &f(s1));
        let s2 = [3 * 30 + 10, 3 * 70 + 50, 3 * 250 + 90];
        assert_eq!(&out[10..15], &f(s2));
    }

    #[test]
    fn other_factors_filter_or_replicate() {
        let p = plane(3, 2, vec![10, 50, 90, 30, 70, 250]);
        // 2x1: first and last columns keep their value.
        assert_eq!(upsample(&p, (2, 1), (6, 1)), [10, 20, 40, 60, 80, 90]);
        // 1x2: rows 1 and 2 of the output mix rows 0 and 1 of the input.
        assert_eq!(upsample(&p, (1, 2), (3, 4))[3..9], [15, 55, 130, 25, 65, 210]);
        // A plane 2 wide is replicated, as are factors other than 2.
        assert_eq!(upsample(&plane(2, 1, vec![0, 100]), (2, 1), (4, 1)), [0, 0, 100, 100]);
        assert_eq!(upsample(&p, (3, 1), (7, 1)), [10, 10, 10, 50, 50, 50, 90]);
    }

    #[test]
    fn ycc_conversion_is_libjpegs() {
        assert_eq!(ycc_to_rgb(128, 128, 128), [128, 128, 128]);
        // Differs from the plain rounded formula where libjpeg's term rounding does.
        for (y, cb, cr) in [(17u8, 200u8, 33u8), (240, 3, 250), (90, 129, 127)] {
            let [r, g, b] = ycc_to_rgb(y, cb, cr);
            let (yf, cbf, crf) = (y as f64, cb as f64 - 128.0, cr as f64 - 128.0);
            let want = [yf + 1.402 * crf, yf - 0.34414 * cbf - 0.71414 * crf, yf + 1.772 * cbf];
            for (got, w) in [r, g, b].iter().zip(want) {
                assert!((*got as f64 - w.clamp(0.0, 255.0)).abs() <= 1.0, "{y} {cb} {cr}: {got} vs {w}");
            }
        }
    }
}
