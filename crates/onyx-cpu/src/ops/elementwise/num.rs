//! Scalar traits the elementwise, reduce and softmax kernels are generic over.
//!
//! [`Num`] covers every plain numeric element type computed natively (f32, f64 and the eight
//! integer types; f16/bf16 are widened to f32 by the callers). Integer arithmetic wraps, as it
//! does in ONNX Runtime. [`Real`] adds the transcendental functions of f32 and f64.

use std::ops::{Add, Div, Mul, Neg, Sub};

use half::slice::HalfFloatSliceExt;
use onyx_core::Element;

/// A numeric element type computed natively: f32, f64 or an integer type.
pub trait Num: Element + Default + PartialOrd {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// The smallest value (−∞ for floats): what a max-reduction over nothing gives.
    const LOWEST: Self;
    /// The largest value (+∞ for floats): what a min-reduction over nothing gives.
    const HIGHEST: Self;
    /// True for f32 and f64.
    const IS_FLOAT: bool;
    /// Wrapping (integers) or IEEE (floats) addition.
    fn add(self, o: Self) -> Self;
    /// Wrapping (integers) or IEEE (floats) subtraction.
    fn sub(self, o: Self) -> Self;
    /// Wrapping (integers) or IEEE (floats) multiplication.
    fn mul(self, o: Self) -> Self;
    /// Absolute value (wrapping: `abs(i8::MIN) == i8::MIN`).
    fn abs(self) -> Self;
    /// Negation (wrapping).
    fn neg(self) -> Self;
    /// −1, 0 or 1 (NaN stays NaN).
    fn sign(self) -> Self;
    /// True for a float NaN.
    fn is_nan(self) -> bool;
    /// The value as f64 (large 64-bit integers round).
    fn to_f64(self) -> f64;
    /// A value from f64: floats round, integers truncate toward zero the way ONNX Runtime's
    /// casts do on x86-64 (see [`f64_to_i32`]).
    fn from_f64(v: f64) -> Self;
    /// The larger of two values (ignores NaN: callers track NaN themselves).
    #[inline]
    fn max_of(self, o: Self) -> Self {
        if o > self {
            o
        } else {
            self
        }
    }
    /// The smaller of two values (ignores NaN: callers track NaN themselves).
    #[inline]
    fn min_of(self, o: Self) -> Self {
        if o < self {
            o
        } else {
            self
        }
    }
}

/// f64 to i32 as x86-64's `cvttsd2si` does: truncation toward zero, and `i32::MIN` (the
/// "integer indefinite" value) for NaN and values out of range. This is what ONNX Runtime's
/// casts give on x86-64; 8- and 16-bit targets take the low bits of this result.
#[inline]
pub fn f64_to_i32(v: f64) -> i32 {
    if v > -2_147_483_649.0 && v < 2_147_483_648.0 {
        v as i32
    } else {
        i32::MIN
    }
}

/// f64 to i64 like [`f64_to_i32`]: truncation, `i64::MIN` for NaN and values out of range.
#[inline]
pub fn f64_to_i64(v: f64) -> i64 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v) {
        v as i64
    } else {
        i64::MIN
    }
}

/// f64 to u64: truncation for values in range, otherwise the bits of [`f64_to_i64`].
#[inline]
pub fn f64_to_u64(v: f64) -> u64 {
    if (9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&v) {
        v as u64
    } else {
        f64_to_i64(v) as u64
    }
}

macro_rules! num_int {
    ($t:ty, signed: $signed:tt, from_f64: $conv:expr) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const IS_FLOAT: bool = false;
            #[inline]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn abs(self) -> Self {
                num_int!(@abs $signed, self)
            }
            #[inline]
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline]
            fn sign(self) -> Self {
                num_int!(@sign $signed, self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                false
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                $conv(v)
            }
        }
    };
    (@abs true, $x:expr) => { $x.wrapping_abs() };
    (@abs false, $x:expr) => { $x };
    (@sign true, $x:expr) => { $x.signum() };
    (@sign false, $x:expr) => { if $x > 0 { 1 } else { 0 } };
}

num_int!(i8, signed: true, from_f64: (|v| f64_to_i32(v) as i8));
num_int!(i16, signed: true, from_f64: (|v| f64_to_i32(v) as i16));
num_int!(i32, signed: true, from_f64: f64_to_i32);
num_int!(i64, signed: true, from_f64: f64_to_i64);
num_int!(u8, signed: false, from_f64: (|v| f64_to_i32(v) as u8));
num_int!(u16, signed: false, from_f64: (|v| f64_to_i32(v) as u16));
num_int!(u32, signed: false, from_f64: (|v| f64_to_i64(v) as u32));
num_int!(u64, signed: false, from_f64: f64_to_u64);

/// f32 or f64: the float types computed natively.
pub trait Real:
    Num + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    /// A value from f32 (attributes are f32).
    fn from_f32(v: f32) -> Self;
    /// The value as f32 (rounds for f64).
    fn to_f32(self) -> f32;
    /// e^x.
    fn exp(self) -> Self;
    /// e^x − 1, accurate near 0.
    fn exp_m1(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// ln(1 + x), accurate near 0.
    fn ln_1p(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// x^y.
    fn powf(self, y: Self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Arcsine.
    fn asin(self) -> Self;
    /// Arccosine.
    fn acos(self) -> Self;
    /// Arctangent.
    fn atan(self) -> Self;
    /// Hyperbolic sine.
    fn sinh(self) -> Self;
    /// Hyperbolic cosine.
    fn cosh(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Inverse hyperbolic sine.
    fn asinh(self) -> Self;
    /// Inverse hyperbolic cosine.
    fn acosh(self) -> Self;
    /// Inverse hyperbolic tangent.
    fn atanh(self) -> Self;
    /// Largest integer not above x.
    fn floor(self) -> Self;
    /// Smallest integer not below x.
    fn ceil(self) -> Self;
    /// Rounds to the nearest integer, halves to even.
    fn round_even(self) -> Self;
    /// Truncates toward zero.
    fn trunc(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// C's `fmod`: x − trunc(x / y)·y, with the sign of x.
    fn fmod(self, y: Self) -> Self;
    /// True for ±∞.
    fn is_infinite(self) -> bool;
    /// True for values with the sign bit clear (+0, +∞, positive NaN included).
    fn is_sign_positive(self) -> bool;
}

macro_rules! num_float {
    ($t:ident, $erf:path, $exp:path, $tanh:path) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = $t::NEG_INFINITY;
            const HIGHEST: Self = $t::INFINITY;
            const IS_FLOAT: bool = true;
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    // ±0 stays as it is, NaN stays NaN.
                    self
                }
            }
            #[inline]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }

        impl Real for $t {
            #[inline]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline]
            fn exp_m1(self) -> Self {
                $t::exp_m1(self)
            }
            #[inline]
            fn ln(self) -> Self {
                $t::ln(self)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                $t::ln_1p(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline]
            fn powf(self, y: Self) -> Self {
                $t::powf(self, y)
            }
            #[inline]
            fn sin(self) -> Self {
                $t::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                $t::cos(self)
            }
            #[inline]
            fn tan(self) -> Self {
                $t::tan(self)
            }
            #[inline]
            fn asin(self) -> Self {
                $t::asin(self)
            }
            #[inline]
            fn acos(self) -> Self {
                $t::acos(self)
            }
            #[inline]
            fn atan(self) -> Self {
                $t::atan(self)
            }
            #[inline]
            fn sinh(self) -> Self {
                $t::sinh(self)
            }
            #[inline]
            fn cosh(self) -> Self {
                $t::cosh(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline]
            fn asinh(self) -> Self {
                $t::asinh(self)
            }
            #[inline]
            fn acosh(self) -> Self {
                $t::acosh(self)
            }
            #[inline]
            fn atanh(self) -> Self {
                $t::atanh(self)
            }
            #[inline]
            fn floor(self) -> Self {
                $t::floor(self)
            }
            #[inline]
            fn ceil(self) -> Self {
                $t::ceil(self)
            }
            #[inline]
            fn round_even(self) -> Self {
                $t::round_ties_even(self)
            }
            #[inline]
            fn trunc(self) -> Self {
                $t::trunc(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline]
            fn fmod(self, y: Self) -> Self {
                self % y
            }
            #[inline]
            fn is_infinite(self) -> bool {
                $t::is_infinite(self)
            }
            #[inline]
            fn is_sign_positive(self) -> bool {
                $t::is_sign_positive(self)
            }
        }
    };
}

// f32 uses the vectorizable exp and tanh of `math`; f64 the standard library's.
num_float!(f32, super::math::erf_f32, super::math::exp_f32, super::math::tanh_f32);
num_float!(f64, super::math::erf_f64, f64::exp, f64::tanh);

/// f16 or bf16: stored in 16 bits, computed in f32.
pub trait Half: Element {
    /// Widens `src` into `dst` (of equal length).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Narrows `src` into `dst` (of equal length), rounding to nearest even.
    fn narrow(src: &[f32], dst: &mut [Self]);
}

macro_rules! half_impl {
    ($t:ty) => {
        impl Half for $t {
            fn widen(src: &[Self], dst: &mut [f32]) {
                src.convert_to_f32_slice(dst);
            }
            fn narrow(src: &[f32], dst: &mut [Self]) {
                dst.convert_from_f32_slice(src);
            }
        }
    };
}

half_impl!(half::f16);
half_impl!(half::bf16);

/// An integer type: the operations only integers have.
pub trait Int: Num + Eq + Ord {
    /// Number of bits.
    const BITS: u32;
    /// Division truncating toward zero, wrapping `MIN / -1` (the divisor must not be 0).
    fn div_trunc(self, o: Self) -> Self;
    /// Remainder with the sign of the dividend, like C's `%` (the divisor must not be 0).
    fn rem_trunc(self, o: Self) -> Self;
    /// `self / count`, truncating toward zero; through f64 when `count` does not fit `Self`
    /// (so that a count of 256 uint8 values never becomes a division by 0).
    fn div_count(self, count: usize) -> Self {
        let n = Self::from_f64(count as f64);
        if n != Self::ZERO && n.to_f64() == count as f64 {
            self.div_trunc(n)
        } else {
            Self::from_f64((self.to_f64() / count as f64).trunc())
        }
    }
    /// Remainder with the sign of the divisor, like Python's `%` (the divisor must not be 0).
    fn rem_floor(self, o: Self) -> Self {
        let r = self.rem_trunc(o);
        if r != Self::ZERO && ((r < Self::ZERO) != (o < Self::ZERO)) {
            r.add(o)
        } else {
            r
        }
    }
    /// Bitwise and.
    fn and(self, o: Self) -> Self;
    /// Bitwise or.
    fn or(self, o: Self) -> Self;
    /// Bitwise exclusive or.
    fn xor(self, o: Self) -> Self;
    /// Bitwise not.
    fn not(self) -> Self;
    /// Left shift by `o` bits; 0 when `o` is negative or not below the bit width.
    fn shl(self, o: Self) -> Self;
    /// Right shift by `o` bits (arithmetic for signed types); 0 when `o` is out of range.
    fn shr(self, o: Self) -> Self;
}

macro_rules! int_impl {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline]
            fn div_trunc(self, o: Self) -> Self {
                self.wrapping_div(o)
            }
            #[inline]
            fn rem_trunc(self, o: Self) -> Self {
                self.wrapping_rem(o)
            }
            #[inline]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline]
            fn or(self, o: Self) -> Self {
                self | o
            }
            #[inline]
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline]
            fn not(self) -> Self {
                !self
            }
            #[inline]
            fn shl(self, o: Self) -> Self {
                u32::try_from(o).ok().and_then(|s| self.checked_shl(s)).unwrap_or(0)
            }
            #[inline]
            fn shr(self, o: Self) -> Self {
                u32::try_from(o).ok().and_then(|s| self.checked_shr(s)).unwrap_or(0)
            }
        }
    )*};
}

int_impl!(i8, i16, i32, i64, u8, u16, u32, u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_to_int_follows_onnx_runtime_on_x86() {
        // (input, i8, u8, i16, u16, i32, u32, i64, u64) as ONNX Runtime 1.x gives them.
        type Case = (f64, i8, u8, i16, u16, i32, u32, i64, u64);
        let cases: &[Case] = &[
            (300.7, 44, 44, 300, 300, 300, 300, 300, 300),
            (-300.7, -44, 212, -300, 65236, -300, 4294966996, -300, 18446744073709551316),
            (-2.5, -2, 254, -2, 65534, -2, 4294967294, -2, 18446744073709551614),
            (255.9, -1, 255, 255, 255, 255, 255, 255, 255),
            (1e10, 0, 0, 0, 0, i32::MIN, 1410065408, 10_000_000_000, 10_000_000_000),
            (f64::NAN, 0, 0, 0, 0, i32::MIN, 0, i64::MIN, 1 << 63),
            (1.5e19, 0, 0, 0, 0, i32::MIN, 0, i64::MIN, 15_000_000_000_000_000_000),
        ];
        for &(v, a, b, c, d, e, f, g, h) in cases {
            assert_eq!((i8::from_f64(v), u8::from_f64(v), i16::from_f64(v), u16::from_f64(v)), (a, b, c, d), "{v}");
            assert_eq!((i32::from_f64(v), u32::from_f64(v), i64::from_f64(v), u64::from_f64(v)), (e, f, g, h), "{v}");
        }
    }

    #[test]
    fn integer_arithmetic_wraps() {
        assert_eq!(Num::abs(i8::MIN), i8::MIN);
        assert_eq!(Num::neg(i32::MIN), i32::MIN);
        assert_eq!(Num::add(u8::MAX, 3), 2);
        assert_eq!(Num::mul(i16::MAX, 2), -2);
        assert_eq!(Num::sign(-7i64), -1);
        assert_eq!(Num::sign(7u32), 1);
        assert_eq!(Num::sign(0u32), 0);
        assert!(Num::sign(f32::NAN).is_nan());
        assert_eq!(Num::sign(-3.5f64), -1.0);
    }

    #[test]
    fn integer_division_and_remainders() {
        // (a, b, a / b, C remainder, Python remainder)
        let cases: &[(i32, i32, i32, i32, i32)] = &[
            (-7, 3, -2, -1, 2),
            (7, -3, -2, 1, -2),
            (-7, -3, 2, -1, -1),
            (7, 3, 2, 1, 1),
            (i32::MIN, -1, i32::MIN, 0, 0),
        ];
        for &(a, b, q, r, m) in cases {
            assert_eq!((a.div_trunc(b), a.rem_trunc(b), a.rem_floor(b)), (q, r, m), "{a} / {b}");
        }
        assert_eq!(7u8.rem_floor(3), 1);
        assert_eq!((1u8.shl(7), 1u8.shl(8), 255u8.shr(9), 200u16.shr(3)), (128, 0, 0, 25));
        assert_eq!(Int::not(0i16), -1);
        assert_eq!((100u8.div_count(256), (-7i8).div_count(2), 200u8.div_count(3)), (0, -3, 66));
        assert_eq!(i64::MAX.div_count(1), i64::MAX);
    }
}
