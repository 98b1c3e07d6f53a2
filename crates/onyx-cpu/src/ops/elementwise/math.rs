//! Scalar math that Rust's standard library lacks (the error function) and f32 versions of
//! `exp` and `tanh` written without branches or library calls, so that loops over them
//! vectorize (the library's `expf` and `tanhf` are scalar calls, 5–20x slower).

use std::f64::consts::FRAC_2_SQRT_PI;

/// erf(x)/x as a polynomial in x² on [0, 1]: a relative-error least-squares fit on Chebyshev
/// nodes, done for this crate with numpy against Python's `math.erf` (error 2e-10; ~1.7e-7
/// once evaluated in f32). Its constant term is the fit's, which 2/√π rounds to in f32.
#[allow(clippy::approx_constant)]
const ERF_SMALL: [f32; 7] =
    [1.128_379_1, -0.376_126_26, 0.112_835_82, -0.026_853_692, 0.005_188_099_6, -0.000_800_819_3, 7.847_262e-5];

/// ln(erfc(x)) as a polynomial in x − [`ERFC_LOG_CENTER`] on [1, 3.93], fitted the same way
/// (error 2e-8): erf = 1 − e^P needs no division (erfc below 0.16 there, so P's error shrinks
/// 6x in erf; ~1e-7 once evaluated in f32).
const ERFC_LOG: [f32; 9] = [
    -7.541_539_7,
    -5.258_373_7,
    -0.942_231_9,
    -0.011_302_205,
    0.002_273_290_2,
    -0.000_444_118_37,
    8.205_725e-5,
    -1.394_197_4e-5,
    1.641_272_9e-6,
];

/// Where [`ERFC_LOG`] is centred (keeps its powers small in f32).
const ERFC_LOG_CENTER: f32 = 2.45;

/// exp(r) = 1 + r + r²·P(r) on [−ln2/2, ln2/2]: a relative-error fit done for this crate with
/// numpy against mpmath (approximation error 3e-9, ~1 ulp once evaluated in f32).
const EXP_POLY: [f32; 5] = [0.499_999_94, 0.166_665_21, 0.041_668_39, 0.008_368_714, 0.001_381_443_6];

/// tanh(x) = x + x³·P(x²) on [0, 0.625]: a relative-error fit done the same way (error 4.4e-9).
const TANH_POLY: [f32; 5] = [-0.333_332_8, 0.133_314_43, -0.053_739_738, 0.020_639_15, -0.005_705_045_5];

/// e^x in f32 within ~2 ulp of the correctly rounded result, subnormal results included.
/// Cody–Waite reduction x = n·ln2 + r, a polynomial for e^r, and 2^n applied in two halves so
/// that every intermediate scale is a normal number.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // 1.5·2^23: adding it rounds to an integer (to nearest even) and leaves n in the low bits.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4; // 355/512: few bits, so n·LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Beyond these bounds e^x is 0 or ∞ in f32; NaN passes through clamp.
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * std::f32::consts::LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let (r2, c) = (r * r, &EXP_POLY);
    // P(r) by Estrin's scheme (see `estrin7`): the latency of e^x is most of a loop's.
    let p = 1.0 + r + r2 * ((c[0] + c[1] * r) + (c[2] + c[3] * r) * r2 + c[4] * (r2 * r2));
    // Wrapping integer ops: no overflow is possible (|n| ≤ 150), and checked ones would keep
    // the loop from vectorizing in builds with overflow checks.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32);
    let half = ni >> 1;
    let scale = |e: i32| f32::from_bits((e.wrapping_add(127) as u32) << 23);
    p * scale(half) * scale(ni.wrapping_sub(half))
}

/// tanh in f32 within ~2 ulp: a polynomial below 0.625, 1 − 2/(e^{2|x|} + 1) above.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let a2 = a * a;
    let small = a + a * a2 * poly(&TANH_POLY, a2);
    let large = 1.0 - 2.0 / (exp_f32(2.0 * a) + 1.0);
    let r = if a < 0.625 { small } else { large };
    // copysign keeps NaN (the large branch is NaN for NaN inputs).
    r.copysign(x)
}

/// Horner evaluation of a polynomial with coefficients in increasing order.
#[inline(always)]
fn poly(c: &[f32], x: f32) -> f32 {
    c.iter().rev().fold(0.0, |acc, &k| acc * x + k)
}

/// A polynomial of degree 6 (coefficients in increasing order) by Estrin's scheme: pairs,
/// then pairs of pairs with x² and x⁴, a dependency chain of 4 steps rather than Horner's 12,
/// so that a vectorized loop over it is not bound by latency.
#[inline(always)]
fn estrin7(c: &[f32; 7], x: f32) -> f32 {
    let (x2, pairs) = (x * x, [c[0] + c[1] * x, c[2] + c[3] * x, c[4] + c[5] * x]);
    (pairs[0] + pairs[1] * x2) + (pairs[2] + c[6] * x2) * (x2 * x2)
}

/// A polynomial of degree 8 by Estrin's scheme (as [`estrin7`]).
#[inline(always)]
fn estrin9(c: &[f32; 9], x: f32) -> f32 {
    let x2 = x * x;
    let x4 = x2 * x2;
    let pairs = [c[0] + c[1] * x, c[2] + c[3] * x, c[4] + c[5] * x, c[6] + c[7] * x];
    ((pairs[0] + pairs[1] * x2) + (pairs[2] + pairs[3] * x2) * x4) + c[8] * (x4 * x4)
}

/// The error function in f32 (relative error within a few ulp): a polynomial below 1,
/// 1 − e^P(x) up to 3.93, ±1 beyond. Both polynomials are computed and one selected, so that
/// loops over it vectorize.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    let small = a * estrin7(&ERF_SMALL, a * a);
    // Clamped so that the unused branch stays finite.
    let ac = a.clamp(1.0, 3.93);
    let large = 1.0 - exp_f32(estrin9(&ERFC_LOG, ac - ERFC_LOG_CENTER));
    let r = if a < 1.0 {
        small
    } else if a < 3.93 {
        large
    } else {
        1.0
    };
    if a.is_nan() {
        x
    } else {
        r.copysign(x)
    }
}

/// The error function in f64 (relative error ~1e-15): a series with positive terms below 3,
/// the continued fraction of erfc from 3 to 6, and ±1 beyond.
pub fn erf_f64(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() || a == 0.0 {
        return x;
    }
    let r = if a < 3.0 {
        erf_series(a)
    } else if a < 6.0 {
        1.0 - erfc_continued_fraction(a)
    } else {
        1.0
    };
    r.copysign(x)
}

/// erf(a) = 2/√π · e^{−a²} · Σ 2ⁿ a^{2n+1} / (1·3·…·(2n+1)), for 0 < a < 3.
fn erf_series(a: f64) -> f64 {
    let a2 = a * a;
    let mut term = a;
    let mut sum = a;
    for n in 1..200 {
        term *= 2.0 * a2 / f64::from(2 * n + 1);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    FRAC_2_SQRT_PI * (-a2).exp() * sum
}

/// erfc(a) = e^{−a²}/√π · 1/(a + ½/(a + 1/(a + 3/2/(a + …)))), for a ≥ 3 (50 terms suffice).
fn erfc_continued_fraction(a: f64) -> f64 {
    let mut t = a;
    for n in (1..=50).rev() {
        t = a + f64::from(n) * 0.5 / t;
    }
    (-a * a).exp() / std::f64::consts::PI.sqrt() / t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf values from mpmath (30 digits), rounded to f64.
    const ERF_TABLE: &[(f64, f64)] = &[
        (1e-8, 1.1283791670955126e-08),
        (0.1, 0.1124629160182849),
        (0.5, 0.5204998778130465),
        (0.84375, 0.7672256612323416),
        (1.0, 0.8427007929497149),
        (1.7, 0.9837904585907745),
        (2.5, 0.999593047982555),
        (3.0, 0.9999779095030014),
        (3.5, 0.9999992569016276),
        (4.2, 0.9999999971445058),
        (6.5, 1.0),
    ];

    #[test]
    fn erf_matches_reference_values() {
        for &(x, want) in ERF_TABLE {
            for (arg, sign) in [(x, 1.0), (-x, -1.0)] {
                let got64 = erf_f64(arg);
                assert!((got64 - sign * want).abs() <= 2e-15 * want, "erf_f64({arg}) = {got64}, want {}", sign * want);
                let got32 = erf_f32(arg as f32) as f64;
                assert!((got32 - sign * want).abs() <= 3e-7 * want, "erf_f32({arg}) = {got32}, want {}", sign * want);
            }
        }
        assert!(erf_f32(f32::NAN).is_nan() && erf_f64(f64::NAN).is_nan());
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
        assert!(erf_f64(-0.0).is_sign_negative());
    }

    /// Distance in units in the last place between two f32 (of the same sign).
    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        ((a.to_bits() as i64 - b32.to_bits() as i64).abs()) as f64
    }

    #[test]
    fn fast_exp_and_tanh_are_within_two_ulp() {
        let mut x = -110.0f32;
        while x < 95.0 {
            let (e, want) = (exp_f32(x), (x as f64).exp());
            if want > f32::MAX as f64 {
                assert_eq!(e, f32::INFINITY, "exp({x})");
            } else if want >= f32::MIN_POSITIVE as f64 {
                assert!(ulps(e, want) <= 2.0, "exp({x}) = {e}, want {want}");
            } else {
                // Subnormal results: one rounding of the exact value.
                assert!((e as f64 - want).abs() <= 1.5e-45, "exp({x}) = {e}, want {want}");
            }
            let (t, want) = (tanh_f32(x), (x as f64).tanh());
            assert!(ulps(t, want) <= 2.0, "tanh({x}) = {t}, want {want}");
            x += 0.0173;
        }
        for x in [1e-30f32, -3e-8, 0.624_99, 0.625, -0.625_01] {
            assert!(ulps(tanh_f32(x), (x as f64).tanh()) <= 2.0, "tanh({x})");
            assert!(ulps(exp_f32(x), (x as f64).exp()) <= 2.0, "exp({x})");
        }
        assert!(exp_f32(f32::NAN).is_nan() && tanh_f32(f32::NAN).is_nan());
        assert_eq!((exp_f32(f32::INFINITY), exp_f32(f32::NEG_INFINITY)), (f32::INFINITY, 0.0));
        assert_eq!((tanh_f32(f32::INFINITY), tanh_f32(f32::NEG_INFINITY)), (1.0, -1.0));
        assert!(tanh_f32(-0.0).is_sign_negative());
    }

    #[test]
    fn erf_f32_agrees_with_f64_on_a_dense_grid() {
        let mut x = -5.0f64;
        while x < 5.0 {
            let (a, b) = (erf_f32(x as f32) as f64, erf_f64((x as f32) as f64));
            assert!((a - b).abs() <= 2.5e-7 * b.abs().max(1e-30), "x={x}: {a} vs {b}");
            x += 0.001_37;
        }
    }
}
