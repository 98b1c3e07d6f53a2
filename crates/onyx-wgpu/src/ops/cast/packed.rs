//! Casts to and from the packed sub-byte types (int4, uint4, int2, uint2, float4e2m1), stored
//! on the GPU as on the host: two or four elements per byte, the first in the low bits.
//!
//! As the CPU EP: packed integers widen by sign or zero extension; casts to them truncate
//! toward zero and keep the low bits (NaN and infinities give 0, magnitudes of 2^63 or more
//! saturate as Rust's `as i64` does); float4e2m1 decodes exactly and encodes to nearest even,
//! always saturating, with NaN becoming -0. A cast to a packed type writes one output word
//! (8 or 16 elements) per invocation; a cast from one reads its element's bits from its word.

use onyx_core::DataType;

use super::{read_source, write_target, CAST_LIB};

/// What a packed type holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Signed,
    Unsigned,
    Float4,
}

/// Bits per element and kind of a packed type.
fn packed(dtype: DataType) -> Option<(u32, Kind)> {
    Some(match dtype {
        DataType::Int4 => (4, Kind::Signed),
        DataType::Uint4 => (4, Kind::Unsigned),
        DataType::Int2 => (2, Kind::Signed),
        DataType::Uint2 => (2, Kind::Unsigned),
        DataType::Float4E2M1 => (4, Kind::Float4),
        _ => return None,
    })
}

/// Whether `dtype` is a packed sub-byte type.
pub(super) fn is_packed(dtype: DataType) -> bool {
    packed(dtype).is_some()
}

/// Elements per 32-bit word of a packed type.
pub(super) fn per_word(dtype: DataType) -> Option<u32> {
    packed(dtype).map(|(bits, _)| 32 / bits)
}

/// Whether this module casts `from` to `to`: one side packed, the other a type `plain` accepts.
pub(super) fn converts(from: DataType, to: DataType, plain: impl Fn(DataType) -> bool) -> bool {
    (is_packed(from) && plain(to)) || (plain(from) && is_packed(to))
}

/// WGSL float4e2m1 codecs (sign bit 0x8, codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6).
const FP4_LIB: &str = "
fn fp4_to_f32(c: u32) -> u32 {
    var t = array<f32, 8>(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
    return bitcast<u32>(t[c & 7u]) | ((c & 8u) << 28u);
}
fn f32_to_fp4(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) { return 8u; }
    let a = bitcast<f32>(b & 0x7fffffffu);
    var c = 0u;
    if (a > 0.25) { c = 1u; }
    if (a >= 0.75) { c = 2u; }
    if (a > 1.25) { c = 3u; }
    if (a >= 1.75) { c = 4u; }
    if (a > 2.5) { c = 5u; }
    if (a >= 3.5) { c = 6u; }
    if (a > 5.0) { c = 7u; }
    return c | ((b >> 28u) & 8u);
}
";

/// The `fetch` of a cast from packed `from` to a plain `to`: element `e` from its word.
fn unpack_code(from: DataType, to: DataType) -> String {
    let Some((bits, kind)) = packed(from) else { return String::new() };
    let per = 32 / bits;
    let mask = (1u32 << bits) - 1;
    let source = match kind {
        Kind::Float4 => "let f = fp4_to_f32(c);".to_string(),
        Kind::Unsigned => "let i = vec2<u32>(c, 0u);".to_string(),
        Kind::Signed => format!(
            "let neg = (c >> {}u) == 1u;
    let i = vec2<u32>(select(c, c | ~{mask}u, neg), select(0u, 0xffffffffu, neg));",
            bits - 1
        ),
    };
    format!(
        "{CAST_LIB}{FP4_LIB}
fn fetch(e: u32) -> E {{
    let c = (load_x(e / {per}u) >> ((e % {per}u) * {bits}u)) & {mask}u;
    {source}
    {}
}}
",
        write_target(kind == Kind::Float4, to)
    )
}

/// The `fetch` of a cast from a plain `from` to packed `to`: output word `w` from the
/// `32 / bits` elements it holds (`p[3]` elements in all).
fn pack_code(from: DataType, to: DataType) -> String {
    let Some((bits, kind)) = packed(to) else { return String::new() };
    let per = 32 / bits;
    let mask = (1u32 << bits) - 1;
    let float_source = matches!(from, DataType::Float | DataType::Float16 | DataType::BFloat16);
    let convert = match (kind, float_source) {
        (Kind::Float4, true) => "return f32_to_fp4(f);",
        (Kind::Float4, false) => "return f32_to_fp4(i64_to_float(i, 24u, 64u));",
        (_, true) => {
            "if ((f & 0x7f800000u) == 0x7f800000u) { return 0u; }
    if (((f >> 23u) & 0xffu) >= 190u) { return select(0xffffffffu, 0u, (f >> 31u) == 1u); }
    return f32_to_i64(f).x;"
        }
        (_, false) => "return i.x;",
    };
    format!(
        "{CAST_LIB}{FP4_LIB}
fn code_of(e: u32) -> u32 {{
    let v = load_x(e);
    {}
    {convert}
}}
fn fetch(w: u32) -> E {{
    var r = 0u;
    for (var k = 0u; k < {per}u; k++) {{
        let e = w * {per}u + k;
        if (e < p[3]) {{ r |= (code_of(e) & {mask}u) << (k * {bits}u); }}
    }}
    return r;
}}
",
        read_source(from)
    )
}

/// The `fetch` code of a cast between `from` and `to`, one of them packed.
pub(super) fn code(from: DataType, to: DataType) -> String {
    if is_packed(from) {
        unpack_code(from, to)
    } else {
        pack_code(from, to)
    }
}
