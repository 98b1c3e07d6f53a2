//! Cast and CastLike between every numeric type, bool and string.
//!
//! Conversions follow ONNX Runtime on x86-64: float to integer truncates toward zero, and NaN,
//! infinities and out-of-range values give the "integer indefinite" value of a 32-bit (8-, 16-
//! and 32-bit targets) or 64-bit conversion, truncated to the target's bits; integers convert
//! to narrower integers by keeping the low bits; anything to bool is "not zero" (NaN is true).
//! Floats print as C's `%.8g` ("NaN", "INF", "-INF" for the special values), integers in
//! decimal and bools as "1"/"0". Strings parse like C's `strtod` (floats: leading spaces, the
//! longest numeric prefix, hex, "inf"/"nan" in any case) and `strtoll`/`strtoull` (integers and
//! bools: base 10, the longest digit prefix; out-of-range values are errors). The float8,
//! float4 and packed 2- and 4-bit integer types convert as the ONNX reference does (see
//! [`small`]), with the `saturate` and `round_mode` attributes.

pub(crate) mod small;

use half::{bf16, f16};
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::elementwise::num::{Half, Num};
use super::elementwise::{bool_out, dispatch_int, map_chunks};
use super::util;
use crate::Registry;
use small::RoundMode;

/// Registers Cast and CastLike.
pub fn register(r: &mut Registry) {
    r.add("Cast", build_cast);
    r.add("CastLike", build_cast);
}

/// An element in a form every target type converts from without double rounding.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Repr {
    Float(f64),
    Int(i64),
    Uint(u64),
    Bool(bool),
}

impl Repr {
    fn is_true(self) -> bool {
        match self {
            Repr::Float(f) => f != 0.0,
            Repr::Int(i) => i != 0,
            Repr::Uint(u) => u != 0,
            Repr::Bool(b) => b,
        }
    }
}

/// A numeric element type made from a [`Repr`].
trait FromRepr: Copy + Default + Send + Sync + onyx_core::Element {
    fn from_repr(r: Repr) -> Self;
}

macro_rules! from_repr_int {
    ($($t:ty),*) => {$(
        impl FromRepr for $t {
            #[inline]
            fn from_repr(r: Repr) -> Self {
                match r {
                    Repr::Float(f) => <$t as Num>::from_f64(f),
                    Repr::Int(i) => i as $t,
                    Repr::Uint(u) => u as $t,
                    Repr::Bool(b) => b as $t,
                }
            }
        }
    )*};
}
from_repr_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! from_repr_float {
    ($t:ty, $from_f64:expr) => {
        impl FromRepr for $t {
            #[inline]
            fn from_repr(r: Repr) -> Self {
                match r {
                    Repr::Float(f) => ($from_f64)(f),
                    Repr::Int(i) => ($from_f64)(i as f64),
                    Repr::Uint(u) => ($from_f64)(u as f64),
                    Repr::Bool(b) => ($from_f64)(f64::from(u8::from(b))),
                }
            }
        }
    };
}
from_repr_float!(f64, (|v: f64| v));
from_repr_float!(f16, f16::from_f64);
from_repr_float!(bf16, bf16::from_f64);

impl FromRepr for f32 {
    #[inline]
    fn from_repr(r: Repr) -> Self {
        // Integers round once, straight to f32.
        match r {
            Repr::Float(f) => f as f32,
            Repr::Int(i) => i as f32,
            Repr::Uint(u) => u as f32,
            Repr::Bool(b) => f32::from(u8::from(b)),
        }
    }
}

/// A numeric element type read as a [`Repr`].
trait ToRepr: Copy + Sync + onyx_core::Element {
    fn to_repr(self) -> Repr;
}

macro_rules! to_repr {
    ($variant:ident as $wide:ty: $($t:ty),*) => {$(
        impl ToRepr for $t {
            #[inline]
            fn to_repr(self) -> Repr {
                Repr::$variant(<$wide>::from(self))
            }
        }
    )*};
}
to_repr!(Float as f64: f32, f64, f16, bf16);
to_repr!(Int as i64: i8, i16, i32, i64);
to_repr!(Uint as u64: u8, u16, u32, u64);

/// How values become the small float types (Cast's `saturate` and `round_mode`).
#[derive(Clone, Copy, Debug)]
struct SmallOpts {
    saturate: bool,
    round: RoundMode,
}

/// Converts elements (read through `to_repr`) to type `to`.
fn convert<S: Copy + Sync>(
    src: &[S],
    to_repr: impl Fn(S) -> Repr + Sync,
    to: DataType,
    shape: Vec<usize>,
    opts: SmallOpts,
) -> Result<Value> {
    fn typed<S: Copy + Sync, D: FromRepr>(
        src: &[S],
        to_repr: impl Fn(S) -> Repr + Sync,
        shape: Vec<usize>,
    ) -> Result<Value> {
        util::out(
            shape,
            map_chunks(src, |s, d| {
                for (o, &x) in d.iter_mut().zip(s) {
                    *o = D::from_repr(to_repr(x));
                }
            }),
        )
    }
    match to {
        DataType::Float => typed::<S, f32>(src, to_repr, shape),
        DataType::Double => typed::<S, f64>(src, to_repr, shape),
        DataType::Float16 => typed::<S, f16>(src, to_repr, shape),
        DataType::BFloat16 => typed::<S, bf16>(src, to_repr, shape),
        DataType::Bool => bool_out(
            shape,
            map_chunks(src, |s, d| {
                for (o, &x) in d.iter_mut().zip(s) {
                    *o = u8::from(to_repr(x).is_true());
                }
            }),
        ),
        DataType::String => {
            let text: Vec<String> = src.iter().map(|&x| repr_to_string(to_repr(x))).collect();
            Tensor::from_strings(shape, text).map(Value::Tensor)
        }
        other if small::is_small(other) => {
            let t = if small::int_range(other).is_some() {
                let ints: Vec<i64> = src
                    .iter()
                    .map(|&x| match to_repr(x) {
                        Repr::Float(f) if f.is_finite() => f.trunc() as i64,
                        Repr::Float(_) => 0,
                        Repr::Int(i) => i,
                        Repr::Uint(u) => u as i64,
                        Repr::Bool(b) => i64::from(b),
                    })
                    .collect();
                small::from_ints(other, shape, &ints)?
            } else {
                let values: Vec<f64> = src
                    .iter()
                    .map(|&x| match to_repr(x) {
                        Repr::Float(f) => f,
                        Repr::Int(i) => i as f64,
                        Repr::Uint(u) => u as f64,
                        Repr::Bool(b) => f64::from(u8::from(b)),
                    })
                    .collect();
                // Saturation applies to the float8 types; float4 always saturates.
                small::from_f64s(other, shape, &values, opts.saturate, opts.round)?
            };
            Ok(Value::Tensor(t))
        }
        other => dispatch_int!(other, D => typed::<S, D>(src, to_repr, shape),
            _ => Err(Error::Unsupported(format!("Cast to {other}")))),
    }
}

/// Widens halves to f32 or narrows f32 to halves with the vectorized slice conversions.
fn half_fast_path(x: &TensorView<'_>, to: DataType) -> Result<Option<Value>> {
    fn widen<H: Half>(src: &[H], shape: Vec<usize>) -> Result<Value> {
        util::out(shape, map_chunks(src, |s, d| H::widen(s, d)))
    }
    fn narrow<H: Half + Default>(src: &[f32], shape: Vec<usize>) -> Result<Value> {
        util::out(shape, map_chunks(src, |s, d: &mut [H]| H::narrow(s, d)))
    }
    let shape = x.shape().to_vec();
    Ok(Some(match (x.dtype(), to) {
        (DataType::Float16, DataType::Float) => widen(x.as_slice::<f16>()?, shape)?,
        (DataType::BFloat16, DataType::Float) => widen(x.as_slice::<bf16>()?, shape)?,
        (DataType::Float, DataType::Float16) => narrow::<f16>(x.as_slice::<f32>()?, shape)?,
        (DataType::Float, DataType::BFloat16) => narrow::<bf16>(x.as_slice::<f32>()?, shape)?,
        _ => return Ok(None),
    }))
}

/// Float to integer without the [`Repr`] detour (the common f32 → int64 cast of index math).
fn float_to_int_fast_path(x: &TensorView<'_>, to: DataType) -> Result<Option<Value>> {
    fn typed<S: Copy + Sync + Into<f64>, D: Num>(src: &[S], shape: Vec<usize>) -> Result<Value> {
        util::out(
            shape,
            map_chunks(src, |s, d| {
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = D::from_f64(v.into());
                }
            }),
        )
    }
    let shape = x.shape().to_vec();
    Ok(Some(match (x.dtype(), to) {
        (DataType::Float, DataType::Int64) => typed::<f32, i64>(x.as_slice()?, shape)?,
        (DataType::Float, DataType::Int32) => typed::<f32, i32>(x.as_slice()?, shape)?,
        (DataType::Double, DataType::Int64) => typed::<f64, i64>(x.as_slice()?, shape)?,
        (DataType::Double, DataType::Int32) => typed::<f64, i32>(x.as_slice()?, shape)?,
        _ => return Ok(None),
    }))
}

/// Casts a tensor view to `to`.
fn cast_view(x: &TensorView<'_>, to: DataType, opts: SmallOpts) -> Result<Value> {
    if let Some(v) = half_fast_path(x, to)? {
        return Ok(v);
    }
    if let Some(v) = float_to_int_fast_path(x, to)? {
        return Ok(v);
    }
    let shape = x.shape().to_vec();
    match x.dtype() {
        DataType::Bool => convert(x.bytes()?, |b| Repr::Bool(b != 0), to, shape, opts),
        DataType::String => {
            let parsed: Vec<Repr> = x.strings()?.iter().map(|s| parse_for(s, to)).collect::<Result<_>>()?;
            convert(&parsed, |r| r, to, shape, opts)
        }
        from if small::is_small(from) => {
            let values = small::to_f64s(x)?;
            let int = small::int_range(from).is_some();
            convert(&values, |v| if int { Repr::Int(v as i64) } else { Repr::Float(v) }, to, shape, opts)
        }
        from => crate::dispatch_numeric!(from, S => convert(x.as_slice::<S>()?, ToRepr::to_repr, to, shape, opts),
            _ => Err(Error::Unsupported(format!("Cast from {from}")))),
    }
}

/// The element types Cast handles.
fn supported(t: DataType) -> bool {
    small::is_small(t)
        || t == DataType::Bool
        || t == DataType::String
        || t.is_integer() && t.bit_width() >= 8
        || matches!(t, DataType::Float | DataType::Double | DataType::Float16 | DataType::BFloat16)
}

/// Cast (target from the `to` attribute) or CastLike (target from input 1's type).
struct Cast {
    /// `None` for CastLike.
    to: Option<DataType>,
    opts: SmallOpts,
    at: Location,
}

fn build_cast(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let saturate = node.int_or("saturate", 1)?;
    if saturate != 0 && saturate != 1 {
        return Err(Error::attribute(&at, "saturate", "0 or 1", saturate.to_string()));
    }
    let to = if node.op_type == "CastLike" {
        None
    } else {
        let code =
            node.get_int("to")?.ok_or_else(|| Error::attribute(&at, "to", "a data type code", "no attribute"))?;
        let to = i32::try_from(code)
            .ok()
            .and_then(DataType::from_onnx)
            .ok_or_else(|| Error::attribute(&at, "to", "an ONNX data type code", code.to_string()))?;
        if !supported(to) {
            return Err(Error::Unsupported(format!("{at} (Cast to {to} is not implemented)")));
        }
        Some(to)
    };
    let round = node.string_or("round_mode", "up")?;
    let round =
        RoundMode::parse(&round).ok_or_else(|| Error::attribute(&at, "round_mode", "up, down or nearest", round))?;
    Ok(Box::new(Cast { to, opts: SmallOpts { saturate: saturate != 0, round }, at }))
}

impl Kernel for Cast {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let to = match self.to {
            Some(to) => to,
            None => util::input(inputs, 1, at)?.dtype(),
        };
        if !supported(x.dtype()) || !supported(to) {
            return Err(Error::Unsupported(format!("{at} (Cast from {} to {to} is not implemented)", x.dtype())));
        }
        if x.dtype() == to {
            // Nothing to convert: share an owned input, copy a borrowed one.
            return Ok(vec![inputs
                .first()
                .copied()
                .flatten()
                .map(|v| v.to_value())
                .unwrap_or(Value::Tensor(x.to_tensor()))]);
        }
        Ok(vec![cast_view(&x, to, self.opts).map_err(|e| e.at(at))?])
    }
}

/// The text of one element: `%.8g` for floats, decimal integers, "1"/"0" for bools.
fn repr_to_string(r: Repr) -> String {
    match r {
        Repr::Float(f) => format_g8(f),
        Repr::Int(i) => i.to_string(),
        Repr::Uint(u) => u.to_string(),
        Repr::Bool(b) => if b { "1" } else { "0" }.to_string(),
    }
}

/// C's `%.8g` ("NaN", "INF" and "-INF" for the special values, as ONNX Runtime prints them).
fn format_g8(v: f64) -> String {
    const PRECISION: i32 = 8;
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "INF" } else { "-INF" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Rounded to PRECISION significant digits first: that decides the exponent.
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exp.abs())
    } else {
        trim_zeros(&format!("{:.*}", (PRECISION - 1 - exp) as usize, v)).to_string()
    }
}

/// Drops trailing zeros of a decimal fraction, and the point if nothing follows it.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Parses a string for a cast to `to`: as a float for float targets, as an integer otherwise.
fn parse_for(s: &str, to: DataType) -> Result<Repr> {
    let bad = |what: &str| Error::InvalidArgument(format!("cannot cast the string \"{s}\" to {to}: {what}"));
    match to {
        t if t.is_float() => parse_float_prefix(s).map(Repr::Float).ok_or_else(|| bad("not a number")),
        DataType::Int2 | DataType::Int4 | DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            match parse_int_prefix(s) {
                Some((neg, m)) => signed_from(neg, m).map(Repr::Int).ok_or_else(|| bad("out of the range of int64")),
                None => Err(bad("not an integer")),
            }
        }
        DataType::Bool
        | DataType::Uint2
        | DataType::Uint4
        | DataType::Uint8
        | DataType::Uint16
        | DataType::Uint32
        | DataType::Uint64 => match parse_int_prefix(s) {
            Some((neg, m)) => Ok(Repr::Uint(if neg { m.wrapping_neg() } else { m })),
            None => Err(bad("not an integer")),
        },
        _ => Err(bad("no such conversion")),
    }
}

/// The i64 with sign `neg` and magnitude `m`, if it fits.
fn signed_from(neg: bool, m: u64) -> Option<i64> {
    if neg {
        0i64.checked_sub_unsigned(m)
    } else {
        i64::try_from(m).ok()
    }
}

/// C's whitespace (what `strtod` and `strtoll` skip).
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Splits an optional sign off: (negative, rest).
fn split_sign(s: &str) -> (bool, &str) {
    match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

/// `strtoull`-style: spaces, a sign, then the longest run of decimal digits (at least one).
/// Returns (negative, magnitude); `None` without digits or when the magnitude overflows u64.
fn parse_int_prefix(s: &str) -> Option<(bool, u64)> {
    let (neg, rest) = split_sign(s.trim_start_matches(is_c_space));
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    rest[..digits].parse::<u64>().ok().map(|m| (neg, m))
}

/// `strtod`-style: spaces, a sign, then "inf"/"infinity"/"nan" (any case), a hex float or
/// the longest decimal float prefix. `None` when no number starts the string.
fn parse_float_prefix(s: &str) -> Option<f64> {
    let (neg, rest) = split_sign(s.trim_start_matches(is_c_space));
    let lower = rest.get(..3).map(str::to_ascii_lowercase);
    let magnitude = match lower.as_deref() {
        Some("inf") => f64::INFINITY,
        Some("nan") => f64::NAN,
        _ if rest.len() > 2 && (rest.starts_with("0x") || rest.starts_with("0X")) => {
            parse_hex_float(&rest[2..]).unwrap_or(0.0)
        }
        _ => rest[..decimal_prefix_len(rest)?].parse::<f64>().ok()?,
    };
    Some(if neg { -magnitude } else { magnitude })
}

/// Length of the longest prefix of `s` that is a decimal float: digits, an optional fraction
/// and an optional exponent, with at least one mantissa digit.
fn decimal_prefix_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits_from = |i: usize| b[i.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits_from(0);
    let mut end = int;
    let mut frac = 0;
    if b.get(end) == Some(&b'.') {
        frac = digits_from(end + 1);
        end += 1 + frac;
    }
    if int + frac == 0 {
        return None;
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
        let exp = digits_from(end + 1 + sign);
        if exp > 0 {
            end += 1 + sign + exp;
        }
    }
    Some(end)
}

/// A hex float after its "0x": hex digits, an optional fraction and an optional binary
/// exponent `p[+-]digits`. `None` without digits.
fn parse_hex_float(s: &str) -> Option<f64> {
    let mut value = 0f64;
    let mut scale = 0i32;
    let mut seen = false;
    let mut chars = s.chars().peekable();
    while let Some(d) = chars.peek().and_then(|c| c.to_digit(16)) {
        value = value * 16.0 + f64::from(d);
        seen = true;
        chars.next();
    }
    if chars.peek() == Some(&'.') {
        chars.next();
        while let Some(d) = chars.peek().and_then(|c| c.to_digit(16)) {
            value = value * 16.0 + f64::from(d);
            scale -= 4;
            seen = true;
            chars.next();
        }
    }
    if !seen {
        return None;
    }
    if matches!(chars.peek(), Some('p' | 'P')) {
        let tail: String = chars.skip(1).collect();
        let (neg, digits) = split_sign(&tail);
        let n = digits.bytes().take_while(u8::is_ascii_digit).count();
        if let Ok(e) = digits[..n].parse::<i32>() {
            scale = scale.saturating_add(if neg { -e } else { e });
        }
    }
    Some(value * 2f64.powi(scale))
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::testing::*;
    use super::*;

    fn cast(x: &Tensor, to: DataType) -> Result<Tensor> {
        run("Cast", 21, vec![attr_i("to", to.onnx_code() as i64)], &[x])
    }

    fn strings(t: &Tensor) -> Vec<String> {
        t.view().unwrap().strings().unwrap().to_vec()
    }

    fn string_tensor(v: &[&str]) -> Tensor {
        Tensor::from_strings(vec![v.len()], v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    #[test]
    fn float_to_integers_as_onnx_runtime() {
        // Inputs and outputs taken from ONNX Runtime 1.x on x86-64.
        let x = tensor(&[11], vec![300.7f32, -300.7, 1e10, -1e10, f32::NAN, 2.5, -2.5, 127.9, -128.9, 255.9, 65535.9]);
        let cases: &[(DataType, &[i64])] = &[
            (DataType::Int8, &[44, -44, 0, 0, 0, 2, -2, 127, -128, -1, -1]),
            (DataType::Uint8, &[44, 212, 0, 0, 0, 2, 254, 127, 128, 255, 255]),
            (DataType::Int16, &[300, -300, 0, 0, 0, 2, -2, 127, -128, 255, -1]),
            (DataType::Uint16, &[300, 65236, 0, 0, 0, 2, 65534, 127, 65408, 255, 65535]),
            (
                DataType::Int32,
                &[300, -300, i32::MIN as i64, i32::MIN as i64, i32::MIN as i64, 2, -2, 127, -128, 255, 65535],
            ),
            (DataType::Int64, &[300, -300, 10_000_000_000, -10_000_000_000, i64::MIN, 2, -2, 127, -128, 255, 65535]),
        ];
        for &(to, want) in cases {
            let y = cast(&x, to).unwrap();
            assert_eq!((y.dtype(), ints(&y)), (to, want.to_vec()), "{to}");
        }
        let y = cast(&x, DataType::Uint64).unwrap();
        assert_eq!(y.as_slice::<u64>().unwrap()[..2], [300, 18446744073709551316]);
        let y = cast(&tensor(&[2], vec![-300.7f64, 3e9]), DataType::Uint32).unwrap();
        assert_eq!(y.as_slice::<u32>().unwrap(), [4294966996, 3_000_000_000]);
        let b = cast(&x, DataType::Bool).unwrap();
        assert!(bool_values(&b).iter().all(|&v| v));
        let z = cast(&tensor(&[2], vec![0.0f32, -0.0]), DataType::Bool).unwrap();
        assert_eq!(bool_values(&z), [false, false]);
    }

    #[test]
    fn integers_wrap_and_round() {
        let x = tensor(&[5], vec![300i64, -1, -129, 70000, (1 << 31) + 5]);
        let cases: &[(DataType, &[i64])] = &[
            (DataType::Int8, &[44, -1, 127, 112, 5]),
            (DataType::Uint8, &[44, 255, 127, 112, 5]),
            (DataType::Int16, &[300, -1, -129, 4464, 5]),
            (DataType::Uint32, &[300, 4294967295, 4294967167, 70000, 2147483653]),
            (DataType::Int32, &[300, -1, -129, 70000, -2147483643]),
        ];
        for &(to, want) in cases {
            assert_eq!(ints(&cast(&x, to).unwrap()), want.to_vec(), "{to}");
        }
        let h = cast(&x, DataType::Float16).unwrap();
        assert_eq!(floats(&h), vec![300.0, -1.0, -129.0, f64::INFINITY, f64::INFINITY]);
        // i64 to f32 rounds once (2^53 + 1 is not a double, but rounds correctly to f32).
        let big = tensor(&[2], vec![(1i64 << 53) + 1, i64::MAX]);
        assert_eq!(cast(&big, DataType::Float).unwrap().as_slice::<f32>().unwrap(), [9007199254740992.0, 9.223372e18]);
        let u = tensor(&[1], vec![u64::MAX]);
        assert_eq!(cast(&u, DataType::Double).unwrap().as_slice::<f64>().unwrap(), [18446744073709551615.0]);
        assert_eq!(ints(&cast(&u, DataType::Int64).unwrap()), vec![-1]);
        let b = bools(&[3], &[true, false, true]);
        assert_eq!(floats(&cast(&b, DataType::BFloat16).unwrap()), vec![1.0, 0.0, 1.0]);
        assert_eq!(ints(&cast(&b, DataType::Uint16).unwrap()), vec![1, 0, 1]);
        assert_eq!(bool_values(&cast(&tensor(&[3], vec![0u32, 7, 256]), DataType::Bool).unwrap()), [false, true, true]);
    }

    #[test]
    fn floats_round_between_float_types() {
        let mut rng = fastrand::Rng::with_seed(9);
        let x = random_f32(&mut rng, 70_003, -70_000.0, 70_000.0);
        let t = tensor(&[70_003], x.clone());
        let h = cast(&t, DataType::Float16).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| half::f16::from_f32(v).to_f64()).collect();
        assert_eq!(floats(&h), want);
        let back = cast(&h, DataType::Float).unwrap();
        assert_eq!(floats(&back), want);
        let b = cast(&t, DataType::BFloat16).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| half::bf16::from_f32(v).to_f64()).collect();
        assert_eq!(floats(&b), want);
        let d = cast(&b, DataType::Double).unwrap();
        assert_eq!(d.as_slice::<f64>().unwrap(), &want[..]);
        let h2 = cast(&d, DataType::Float16).unwrap();
        let want: Vec<f64> = want.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect();
        assert_eq!(floats(&h2), want);
    }

    #[test]
    fn numbers_to_strings_as_onnx_runtime() {
        let x = tensor(
            &[10],
            vec![0.1f32, 1.0, -2.5, 1e20, 1e-7, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 123456789.0, 3.0e-45],
        );
        let want = ["0.1", "1", "-2.5", "1e+20", "1e-07", "NaN", "INF", "-INF", "1.2345679e+08", "2.8025969e-45"];
        assert_eq!(strings(&cast(&x, DataType::String).unwrap()), want);
        let d = tensor(&[4], vec![0.1f64, 123_456_789.123_456_79, 0.0001, 12345678.0]);
        assert_eq!(strings(&cast(&d, DataType::String).unwrap()), ["0.1", "1.2345679e+08", "0.0001", "12345678"]);
        let i = tensor(&[3], vec![1i64, -5, 300]);
        assert_eq!(strings(&cast(&i, DataType::String).unwrap()), ["1", "-5", "300"]);
        assert_eq!(strings(&cast(&bools(&[2], &[true, false]), DataType::String).unwrap()), ["1", "0"]);
        let h = tensor(&[2], vec![half::f16::from_f32(1.5), half::f16::from_f32(-0.0)]);
        assert_eq!(strings(&cast(&h, DataType::String).unwrap()), ["1.5", "-0"]);
    }

    #[test]
    fn strings_parse_as_onnx_runtime() {
        let s = string_tensor(&[
            "1.5",
            " 2",
            "3e2",
            "-inf",
            "INF",
            "NaN",
            "0x10",
            "1e40",
            " 7 ",
            "+4",
            "12abc",
            ".5e1x",
            "+Infinity",
        ]);
        let f = cast(&s, DataType::Float).unwrap();
        let want = [
            1.5,
            2.0,
            300.0,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NAN,
            16.0,
            f64::INFINITY,
            7.0,
            4.0,
            12.0,
            5.0,
            f64::INFINITY,
        ];
        assert_close(&floats(&f), &want, 0.0, 0.0, "string to float");
        let d = cast(&s, DataType::Double).unwrap();
        assert_eq!(d.as_slice::<f64>().unwrap()[7], 1e40);
        let i = string_tensor(&["100.5", "12abc", "99999999999", "-3", "  42", "+7", "1e3", "0x1f"]);
        assert_eq!(ints(&cast(&i, DataType::Int64).unwrap()), vec![100, 12, 99999999999, -3, 42, 7, 1, 0]);
        assert_eq!(ints(&cast(&i, DataType::Int32).unwrap()), vec![100, 12, 1215752191, -3, 42, 7, 1, 0]);
        assert_eq!(ints(&cast(&i, DataType::Uint8).unwrap()), vec![100, 12, 255, 253, 42, 7, 1, 0]);
        assert_eq!(bool_values(&cast(&i, DataType::Bool).unwrap()), [true, true, true, true, true, true, true, false]);
        let edge = string_tensor(&["-9223372036854775808", "18446744073709551615"]);
        assert_eq!(cast(&edge, DataType::Uint64).unwrap().as_slice::<u64>().unwrap(), [1 << 63, u64::MAX]);
        let min = string_tensor(&["-9223372036854775808"]);
        assert_eq!(ints(&cast(&min, DataType::Int64).unwrap()), vec![i64::MIN]);
    }

    #[test]
    fn unparsable_strings_and_bad_types_are_errors() {
        for (text, to) in
            [("abc", DataType::Float), ("", DataType::Int32), ("true", DataType::Bool), ("-", DataType::Double)]
        {
            let err = cast(&string_tensor(&[text]), to).unwrap_err().to_string();
            assert!(err.contains("Cast node 'n'") && err.contains(&format!("\"{text}\"")), "{err}");
        }
        let err = cast(&string_tensor(&["9223372036854775808"]), DataType::Int64).unwrap_err().to_string();
        assert!(err.contains("range"), "{err}");
        assert!(cast(&string_tensor(&["99999999999999999999"]), DataType::Uint64).is_err());
        let err = build("Cast", 19, vec![attr_i("to", 14)]).err().unwrap().to_string();
        assert!(err.contains("complex64"), "{err}");
        let err = build("Cast", 24, vec![attr_i("to", 24), attr_s("round_mode", "even")]).err().unwrap().to_string();
        assert!(err.contains("round_mode"), "{err}");
        assert!(build("Cast", 13, vec![attr_i("to", 99)]).err().unwrap().to_string().contains("'to'"));
        assert!(build("Cast", 13, vec![]).err().unwrap().to_string().contains("'to'"));
        let c64 = Tensor::zeros(DataType::Complex64, vec![4]).unwrap();
        assert!(matches!(cast(&c64, DataType::Float), Err(Error::Unsupported(_))));
    }

    #[test]
    fn small_types_convert_as_the_onnx_reference() {
        // float -> float8e4m3fn (saturate = 1 and 0) -> float, float16 -> int4 -> int8.
        let x = tensor(&[5], vec![0.3f32, -500.0, 1.0625, f32::INFINITY, 17.0]);
        let y = cast(&x, DataType::Float8E4M3FN).unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[42, 254, 56, 126, 88]);
        let back = cast(&y, DataType::Float).unwrap();
        assert_eq!(back.as_slice::<f32>().unwrap(), &[0.3125, -448.0, 1.0, 448.0, 16.0]);
        let y = run(
            "Cast",
            21,
            vec![attr_i("to", DataType::Float8E4M3FN.onnx_code() as i64), attr_i("saturate", 0)],
            &[&x],
        )
        .unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[42, 255, 56, 127, 88]);
        let h = tensor(&[3], vec![half::f16::from_f32(-7.9), half::f16::from_f32(9.0), half::f16::from_f32(2.5)]);
        let y = cast(&h, DataType::Int4).unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[0x99, 0x02]);
        assert_eq!(ints(&cast(&y, DataType::Int8).unwrap()), vec![-7, -7, 2]);
        let s = string_tensor(&["1.5", "-3"]);
        let y = cast(&s, DataType::Float4E2M1).unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[0xD3]);
        let y = cast(&cast(&tensor(&[2], vec![3i64, 300]), DataType::Float8E8M0).unwrap(), DataType::Double).unwrap();
        assert_eq!(y.as_slice::<f64>().unwrap(), &[4.0, 512.0]);
    }

    #[test]
    fn cast_like_takes_the_second_input_type() {
        let x = tensor(&[3], vec![1.9f64, -0.5, 7.0]);
        let like = tensor(&[1], vec![0i16]);
        let y = run("CastLike", 21, vec![], &[&x, &like]).unwrap();
        assert_eq!((y.dtype(), ints(&y)), (DataType::Int16, vec![1, 0, 7]));
        let same = run("CastLike", 21, vec![], &[&x, &x]).unwrap();
        assert_eq!(same.as_slice::<f64>().unwrap(), x.as_slice::<f64>().unwrap());
        assert!(run_opt("CastLike", 21, vec![], &[Some(&x), None]).unwrap_err().to_string().contains("input 1"));
    }

    #[test]
    fn g8_formatting_edges() {
        let cases = [
            (1e-5, "1e-05"),
            (0.0001234, "0.0001234"),
            (99999999.0, "99999999"),
            (999999999.0, "1e+09"),
            (123.456, "123.456"),
            (-1.0e100, "-1e+100"),
            (1.0 / 3.0, "0.33333333"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g8(v), want, "{v}");
        }
    }
}
