//! Casts between f32/f16 and the float8 types (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), and
//! between f32/f16 and f64, on the elements' bits as the CPU EP computes them: round to
//! nearest even; without saturation an overflow gives NaN (E4M3FN, the FNUZ types) or
//! infinity (E5M2); E8M0 rounds by Cast's `round_mode`; f64 narrows directly (no double
//! rounding through f32).

use onyx_core::{DataType, Error, Result};

use super::CAST_LIB;

/// A float8 format with a sign bit: mantissa bits, bias, largest finite code, infinity code
/// (if any), NaN code, and whether it lacks negative zero (FNUZ).
struct Format {
    man: u32,
    bias: i32,
    max_code: u32,
    inf: Option<u32>,
    nan: u32,
    uz: bool,
}

fn format(dtype: DataType) -> Option<Format> {
    let f = |man, bias, max_code, inf, nan, uz| Format { man, bias, max_code, inf, nan, uz };
    Some(match dtype {
        DataType::Float8E4M3FN => f(3, 7, 0x7E, None, 0x7F, false),
        DataType::Float8E4M3FNUZ => f(3, 8, 0x7F, None, 0x80, true),
        DataType::Float8E5M2 => f(2, 15, 0x7B, Some(0x7C), 0x7E, false),
        DataType::Float8E5M2FNUZ => f(2, 16, 0x7F, None, 0x80, true),
        _ => return None,
    })
}

/// E8M0's rounding of values that are not powers of two (Cast's `round_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum RoundMode {
    Up,
    Down,
    Nearest,
}

impl RoundMode {
    /// The mode named by a `round_mode` attribute.
    pub(super) fn parse(s: &str) -> Option<RoundMode> {
        Some(match s {
            "up" => RoundMode::Up,
            "down" => RoundMode::Down,
            "nearest" => RoundMode::Nearest,
            _ => return None,
        })
    }
}

/// Whether this module converts `from` to `to`.
pub(super) fn converts(from: DataType, to: DataType) -> bool {
    let base = |t: DataType| matches!(t, DataType::Float | DataType::Float16);
    let small = |t: DataType| format(t).is_some() || t == DataType::Float8E8M0 || t == DataType::Double;
    (base(from) && small(to)) || (small(from) && base(to))
}

/// WGSL constants and codecs of a float8 format.
fn format_lib(f: &Format, saturate: bool) -> String {
    format!(
        "const MAN: u32 = {man}u;
const BIAS: i32 = {bias};
const MAXC: u32 = {max}u;
const HAS_INF: bool = {has_inf};
const INFC: u32 = {inf}u;
const NANC: u32 = {nan}u;
const UZ: bool = {uz};
const SAT: bool = {saturate};
// The value of a non-negative finite code (exact in f32).
fn f8_value(c: u32) -> f32 {{
    let e = c >> MAN;
    let m = c & ((1u << MAN) - 1u);
    if (e == 0u) {{ return ldexp(f32(m), 1 - BIAS - i32(MAN)); }}
    return ldexp(f32(m | (1u << MAN)), i32(e) - BIAS - i32(MAN));
}}
fn f8_to_f32(c: u32) -> u32 {{
    if (UZ && c == 0x80u) {{ return 0x7fc00000u; }}
    let a = c & 0x7fu;
    var bits = bitcast<u32>(f8_value(min(a, MAXC)));
    if (HAS_INF && a == INFC) {{ bits = 0x7f800000u; }} else if (a > MAXC) {{ bits = 0x7fc00000u; }}
    return select(bits, bits | 0x80000000u, (c & 0x80u) != 0u);
}}
fn f32_to_f8(x: u32) -> u32 {{
    let sign = select(0u, 0x80u, (x >> 31u) == 1u);
    let nan = select(NANC | sign, NANC, UZ);
    if ((x & 0x7fffffffu) > 0x7f800000u) {{ return nan; }}
    var over = nan;
    if (SAT) {{ over = MAXC | sign; }} else if (HAS_INF) {{ over = INFC | sign; }}
    if ((x & 0x7fffffffu) == 0x7f800000u) {{ return over; }}
    let a = abs(bitcast<f32>(x));
    let top = f8_value(MAXC);
    var code = 0u;
    if (a > top) {{
        let mid = top + (top - f8_value(MAXC - 1u)) * 0.5;
        if (SAT || a < mid || (a == mid && (MAXC % 2u) == 0u)) {{ code = MAXC; }} else {{ return over; }}
    }} else {{
        // The largest code whose value is not above a, then the nearer of it and the next
        // (ties to the even code). The differences are exact in f32.
        var lo = 0u;
        var hi = MAXC;
        while (lo < hi) {{
            let m = (lo + hi + 1u) / 2u;
            if (f8_value(m) <= a) {{ lo = m; }} else {{ hi = m - 1u; }}
        }}
        code = lo;
        let vl = f8_value(lo);
        if (lo < MAXC && a != vl) {{
            let dl = a - vl;
            let dh = f8_value(lo + 1u) - a;
            if (dh < dl || (dh == dl && (lo % 2u) == 1u)) {{ code = lo + 1u; }}
        }}
    }}
    if (code == 0u && UZ) {{ return 0u; }}
    return code | sign;
}}
",
        man = f.man,
        bias = f.bias,
        max = f.max_code,
        has_inf = f.inf.is_some(),
        inf = f.inf.unwrap_or(0),
        nan = f.nan,
        uz = f.uz,
    )
}

/// WGSL codecs of float8e8m0 (a biased power-of-two exponent).
fn e8m0_lib(saturate: bool, round: RoundMode) -> String {
    let up = match round {
        RoundMode::Down => "false",
        RoundMode::Up => "(bits & 0x7fffffu) != 0u",
        RoundMode::Nearest => {
            "(bits & 0x400000u) != 0u && ((bits & 0x200000u) != 0u || (bits & 0x1fffffu) != 0u || e > 0u)"
        }
    };
    format!(
        "fn e8m0_to_f32(c: u32) -> u32 {{
    if (c == 0xffu) {{ return 0x7fc00000u; }}
    if (c == 0u) {{ return 0x00400000u; }}
    return c << 23u;
}}
fn f32_to_e8m0(bits: u32) -> u32 {{
    let e = (bits >> 23u) & 0xffu;
    if (e == 0xffu) {{ return 0xffu; }}
    var up = {up};
    if ({saturate} && e == 0xfeu) {{ up = false; }}
    return e + select(0u, 1u, up);
}}
"
    )
}

/// WGSL conversions between f64 (`vec2<u32>`, low and high words) and f32 or f16 bits.
const F64_LIB: &str = "
// (hi:lo) >> shift rounded to nearest even (shift in 1..63, result below 2^32).
fn round_shift(lo: u32, hi: u32, shift: u32) -> u32 {
    let q = shr64(lo, hi, shift).x;
    let half = shr64(lo, hi, shift - 1u).x & 1u;
    let up = half == 1u && (low_bits(lo, hi, shift - 1u) || (q & 1u) == 1u);
    return q + select(0u, 1u, up);
}
// The magnitude of f64 `v` in a float format of `man` mantissa bits, exponent bias `bias`
// and all-ones exponent field `emax`, without the sign.
fn f64_to_small(v: vec2<u32>, man: u32, bias: i32, emax: u32) -> u32 {
    let e = (v.y >> 20u) & 0x7ffu;
    let mhi = v.y & 0xfffffu;
    if (e == 0x7ffu) {
        if ((mhi | v.x) != 0u) { return (emax << man) | (1u << (man - 1u)); }
        return emax << man;
    }
    if (e == 0u) { return 0u; }
    let te = i32(e) - 1023 + bias;
    if (te >= i32(emax)) { return emax << man; }
    let sig = mhi | 0x100000u;
    if (te >= 1) { return (u32(te - 1) << man) + round_shift(v.x, sig, 52u - man); }
    let shift = 52u - man + u32(1 - te);
    if (shift > 63u) { return 0u; }
    return round_shift(v.x, sig, shift);
}
fn f32_to_f64(b: u32) -> vec2<u32> {
    let s = b & 0x80000000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if (e == 0xffu) { return vec2<u32>(m << 29u, s | 0x7ff00000u | (m >> 3u)); }
    if (e == 0u) {
        if (m == 0u) { return vec2<u32>(0u, s); }
        let msb = 31u - countLeadingZeros(m);
        let w = shl64(m ^ (1u << msb), 0u, 52u - msb);
        return vec2<u32>(w.x, s | ((msb + 874u) << 20u) | w.y);
    }
    return vec2<u32>(m << 29u, s | ((e + 896u) << 20u) | (m >> 3u));
}
";

/// The `fetch` of a cast this module converts (see [`converts`]).
pub(super) fn code(from: DataType, to: DataType, saturate: bool, round: RoundMode) -> Result<String> {
    let unsupported = || Error::Unsupported(format!("wgpu: Cast from {from} to {to}"));
    // The source as f32 bits `f` (or `v`, its f64 words, for a double source).
    let (lib, read) = match from {
        DataType::Float => (String::new(), "let f = v;"),
        DataType::Float16 => (String::new(), "let f = f16_to_f32(v);"),
        DataType::Double => (F64_LIB.to_string(), ""),
        DataType::Float8E8M0 => (e8m0_lib(saturate, round), "let f = e8m0_to_f32(v);"),
        other => (format_lib(&format(other).ok_or_else(unsupported)?, saturate), "let f = f8_to_f32(v);"),
    };
    let (lib2, write) = match (from, to) {
        (DataType::Double, DataType::Float) => {
            (String::new(), "return (v.y & 0x80000000u) | f64_to_small(v, 23u, 127, 255u);")
        }
        (DataType::Double, DataType::Float16) => {
            (String::new(), "return ((v.y >> 16u) & 0x8000u) | f64_to_small(v, 10u, 15, 31u);")
        }
        (_, DataType::Float) => (String::new(), "return f;"),
        (_, DataType::Float16) => (String::new(), "return f32_to_f16(f);"),
        (_, DataType::Double) => (F64_LIB.to_string(), "return f32_to_f64(f);"),
        (_, DataType::Float8E8M0) => (e8m0_lib(saturate, round), "return f32_to_e8m0(f);"),
        (_, other) => (format_lib(&format(other).ok_or_else(unsupported)?, saturate), "return f32_to_f8(f);"),
    };
    Ok(format!(
        "{CAST_LIB}{lib}{lib2}
fn fetch(e: u32) -> E {{
    let v = load_x(e);
    {read}
    {write}
}}
"
    ))
}
