//! libjpeg's accurate integer inverse DCT (`jpeg_idct_islow`: 13-bit constants, two extra bits
//! kept between the column and row passes) with its output range limiting, so that every
//! sample matches libjpeg-turbo's.

/// `FIX(x)`: `x` in 13-bit fixed point.
const F0_298: i64 = 2446;
const F0_390: i64 = 3196;
const F0_541: i64 = 4433;
const F0_765: i64 = 6270;
const F0_899: i64 = 7373;
const F1_175: i64 = 9633;
const F1_501: i64 = 12299;
const F1_847: i64 = 15137;
const F1_961: i64 = 16069;
const F2_053: i64 = 16819;
const F2_562: i64 = 20995;
const F3_072: i64 = 25172;
const CONST_BITS: u32 = 13;
const PASS1_BITS: u32 = 2;

/// `x / 2^n` rounded half up (libjpeg's `DESCALE`).
fn descale(x: i64, n: u32) -> i64 {
    (x + (1 << (n - 1))) >> n
}

/// libjpeg's post-IDCT range limit of a sample `v` centred on 0: clamps to 0..=255 for
/// |v| < 512 and wraps beyond, as its 1024-entry table does.
fn range_limit(v: i64) -> u8 {
    match (v & 1023) as usize {
        i @ 0..128 => (i + 128) as u8,
        128..512 => 255,
        512..896 => 0,
        i => (i - 896) as u8,
    }
}

/// One 1-D pass over `x` (8 values, already dequantized or from pass 1): the even and odd
/// parts of the islow butterfly, returned before descaling.
fn butterfly(x: [i64; 8]) -> [i64; 8] {
    let z1 = (x[2] + x[6]) * F0_541;
    let tmp2 = z1 - x[6] * F1_847;
    let tmp3 = z1 + x[2] * F0_765;
    let tmp0 = (x[0] + x[4]) << CONST_BITS;
    let tmp1 = (x[0] - x[4]) << CONST_BITS;
    let (tmp10, tmp13, tmp11, tmp12) = (tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2);

    let (t0, t1, t2, t3) = (x[7], x[5], x[3], x[1]);
    let z5 = (t0 + t1 + t2 + t3) * F1_175;
    let z1 = -(t0 + t3) * F0_899;
    let z2 = -(t1 + t2) * F2_562;
    let z3 = -(t0 + t2) * F1_961 + z5;
    let z4 = -(t1 + t3) * F0_390 + z5;
    let t0 = t0 * F0_298 + z1 + z3;
    let t1 = t1 * F2_053 + z2 + z4;
    let t2 = t2 * F3_072 + z2 + z3;
    let t3 = t3 * F1_501 + z1 + z4;
    [tmp10 + t3, tmp11 + t2, tmp12 + t1, tmp13 + t0, tmp13 - t0, tmp12 - t1, tmp11 - t2, tmp10 - t3]
}

/// Dequantizes `coefs` (natural order) by `quant` and writes the 8x8 samples to `out`, rows
/// `stride` apart.
pub(super) fn islow(coefs: &[i16; 64], quant: &[u16; 64], out: &mut [u8], stride: usize) {
    // Pass 1: columns, into a workspace of C `int`s (libjpeg keeps PASS1_BITS more bits).
    let mut ws = [0i32; 64];
    for c in 0..8 {
        let x: [i64; 8] = std::array::from_fn(|r| coefs[r * 8 + c] as i64 * quant[r * 8 + c] as i64);
        let y = butterfly(x);
        for r in 0..8 {
            ws[r * 8 + c] = descale(y[r], CONST_BITS - PASS1_BITS) as i32;
        }
    }
    // Pass 2: rows, descaled by the pass-1 bits and the 8 of the 2-D transform's scale.
    for r in 0..8 {
        let x: [i64; 8] = std::array::from_fn(|c| ws[r * 8 + c] as i64);
        let y = butterfly(x);
        let row = &mut out[r * stride..r * stride + 8];
        for (o, v) in row.iter_mut().zip(y) {
            *o = range_limit(descale(v, CONST_BITS + PASS1_BITS + 3));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::test_support::Rng;

    /// The IDCT of `coefs` in f64 from its definition (JPEG's orthonormal DCT-III, level shift
    /// 128): the islow result rounds this to within one level.
    fn reference(coefs: &[i16; 64], quant: &[u16; 64]) -> Vec<f64> {
        let c = |k: usize| if k == 0 { std::f64::consts::FRAC_1_SQRT_2 } else { 1.0 };
        let cos = |x: usize, u: usize| (((2 * x + 1) * u) as f64 * std::f64::consts::PI / 16.0).cos();
        (0..64)
            .map(|i| {
                let (y, x) = (i / 8, i % 8);
                let mut s = 0.0;
                for v in 0..8 {
                    for u in 0..8 {
                        let f = coefs[v * 8 + u] as f64 * quant[v * 8 + u] as f64;
                        s += c(u) * c(v) * f * cos(x, u) * cos(y, v);
                    }
                }
                (s / 4.0 + 128.0).clamp(0.0, 255.0)
            })
            .collect()
    }

    #[test]
    fn matches_the_exact_transform_within_one_level() {
        let mut rng = Rng::new(77);
        for case in 0..200 {
            // Few large coefficients (a DC term and a handful of AC ones), as in real blocks.
            let mut coefs = [0i16; 64];
            coefs[0] = rng.range(0, 200) as i16 - 100;
            for _ in 0..(case % 12) {
                coefs[rng.range(1, 64) as usize] = rng.range(0, 41) as i16 - 20;
            }
            let quant: [u16; 64] = std::array::from_fn(|_| rng.range(1, 12) as u16);
            let mut out = [0u8; 80];
            islow(&coefs, &quant, &mut out, 10);
            let want = reference(&coefs, &quant);
            for (i, w) in want.iter().enumerate() {
                let got = out[(i / 8) * 10 + i % 8] as f64;
                assert!((got - w).abs() <= 1.0, "case {case} sample {i}: {got} vs {w}");
            }
        }
    }

    #[test]
    fn range_limit_clamps_and_wraps_like_libjpeg() {
        assert_eq!(
            [-600, -513, -512, -129, -128, 0, 127, 128, 511, 512, 700].map(range_limit),
            [255, 255, 0, 0, 0, 128, 255, 255, 255, 0, 0]
        );
    }
}
