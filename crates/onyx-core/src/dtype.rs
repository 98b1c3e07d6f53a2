//! Element types of tensors, numbered as in ONNX's `TensorProto.DataType`.

use std::fmt;

/// The element type of a tensor. Discriminants are ONNX's `TensorProto.DataType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
#[allow(missing_docs)]
pub enum DataType {
    Float = 1,
    Uint8 = 2,
    Int8 = 3,
    Uint16 = 4,
    Int16 = 5,
    Int32 = 6,
    Int64 = 7,
    String = 8,
    Bool = 9,
    Float16 = 10,
    Double = 11,
    Uint32 = 12,
    Uint64 = 13,
    Complex64 = 14,
    Complex128 = 15,
    BFloat16 = 16,
    Float8E4M3FN = 17,
    Float8E4M3FNUZ = 18,
    Float8E5M2 = 19,
    Float8E5M2FNUZ = 20,
    Uint4 = 21,
    Int4 = 22,
    Float4E2M1 = 23,
    Float8E8M0 = 24,
    Uint2 = 25,
    Int2 = 26,
}

impl DataType {
    /// Every data type, in code order.
    pub const ALL: [DataType; 26] = {
        use DataType::*;
        [
            Float,
            Uint8,
            Int8,
            Uint16,
            Int16,
            Int32,
            Int64,
            String,
            Bool,
            Float16,
            Double,
            Uint32,
            Uint64,
            Complex64,
            Complex128,
            BFloat16,
            Float8E4M3FN,
            Float8E4M3FNUZ,
            Float8E5M2,
            Float8E5M2FNUZ,
            Uint4,
            Int4,
            Float4E2M1,
            Float8E8M0,
            Uint2,
            Int2,
        ]
    };

    /// The type with ONNX code `code`, if any (0 is "undefined" and gives `None`).
    pub fn from_onnx(code: i32) -> Option<DataType> {
        DataType::ALL.get((code as usize).wrapping_sub(1)).copied()
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    /// Bits one element takes in dense storage (4 for int4, 2 for int2; strings: 0).
    pub fn bit_width(self) -> usize {
        use DataType::*;
        match self {
            String => 0,
            Uint2 | Int2 => 2,
            Uint4 | Int4 | Float4E2M1 => 4,
            Uint8 | Int8 | Bool | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ | Float8E8M0 => 8,
            Uint16 | Int16 | Float16 | BFloat16 => 16,
            Float | Int32 | Uint32 => 32,
            Int64 | Uint64 | Double | Complex64 => 64,
            Complex128 => 128,
        }
    }

    /// Bytes `count` elements take in dense storage (sub-byte types packed, rounded up).
    pub fn byte_len(self, count: usize) -> Option<usize> {
        count.checked_mul(self.bit_width()).map(|bits| bits.div_ceil(8))
    }

    /// True for every floating-point type, float8/float4 included.
    pub fn is_float(self) -> bool {
        use DataType::*;
        matches!(
            self,
            Float
                | Double
                | Float16
                | BFloat16
                | Float8E4M3FN
                | Float8E4M3FNUZ
                | Float8E5M2
                | Float8E5M2FNUZ
                | Float4E2M1
                | Float8E8M0
        )
    }

    /// True for signed and unsigned integer types (bool excluded).
    pub fn is_integer(self) -> bool {
        use DataType::*;
        matches!(self, Uint8 | Int8 | Uint16 | Int16 | Int32 | Int64 | Uint32 | Uint64 | Uint4 | Int4 | Uint2 | Int2)
    }

    /// The lower-case name ONNX uses in its docs (`float`, `int64`, `float16`, ...).
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Float => "float",
            Uint8 => "uint8",
            Int8 => "int8",
            Uint16 => "uint16",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            String => "string",
            Bool => "bool",
            Float16 => "float16",
            Double => "double",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            BFloat16 => "bfloat16",
            Float8E4M3FN => "float8e4m3fn",
            Float8E4M3FNUZ => "float8e4m3fnuz",
            Float8E5M2 => "float8e5m2",
            Float8E5M2FNUZ => "float8e5m2fnuz",
            Uint4 => "uint4",
            Int4 => "int4",
            Float4E2M1 => "float4e2m1",
            Float8E8M0 => "float8e8m0",
            Uint2 => "uint2",
            Int2 => "int2",
        }
    }

    /// Parses a name as printed by [`DataType::name`] (also accepts `f32`-style aliases).
    pub fn from_name(name: &str) -> Option<DataType> {
        let alias = match name {
            "f32" | "float32" => "float",
            "f64" | "float64" => "double",
            "f16" => "float16",
            "bf16" => "bfloat16",
            "i8" => "int8",
            "i16" => "int16",
            "i32" => "int32",
            "i64" => "int64",
            "u8" => "uint8",
            "u16" => "uint16",
            "u32" => "uint32",
            "u64" => "uint64",
            other => other,
        };
        DataType::ALL.into_iter().find(|t| t.name() == alias)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_onnx(t.onnx_code()), Some(t));
            assert_eq!(DataType::from_name(t.name()), Some(t));
        }
        assert_eq!(DataType::from_onnx(0), None);
        assert_eq!(DataType::from_onnx(27), None);
        assert_eq!(DataType::from_onnx(-3), None);
    }

    #[test]
    fn packed_sizes() {
        assert_eq!(DataType::Int4.byte_len(3), Some(2));
        assert_eq!(DataType::Float.byte_len(3), Some(12));
        assert_eq!(DataType::Float.byte_len(usize::MAX), None);
    }
}
