//! What the fuzz targets share: sessions with small resource limits, and run inputs decoded
//! from the fuzzer's bytes.

use onyx::types::{Dim, ValueType};
use onyx::{DataType, Session, SessionBuilder, Tensor};

/// Limits of every fuzzed session: far below the fuzzer's memory limit, so that a size asked
/// for by a model or an input must be stopped by the session's checks.
pub const MAX_TENSOR_BYTES: u64 = 64 << 20;
/// See [`MAX_TENSOR_BYTES`].
pub const MAX_RUN_BYTES: u64 = 256 << 20;

/// A builder for the CPU EP, one thread, and the fuzzing limits.
pub fn builder() -> SessionBuilder {
    SessionBuilder::new()
        .with_intra_threads(1)
        .with_max_tensor_bytes(MAX_TENSOR_BYTES)
        .with_max_run_bytes(MAX_RUN_BYTES)
}

/// The fuzzer's bytes, read front to back; zeros once they run out.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// Reads `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    /// The next byte (0 when none is left).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A small signed integer, or (for the top 16 byte values) an extreme one.
    pub fn int(&mut self) -> i64 {
        const SPECIAL: [i64; 16] = [
            i64::MIN, i64::MAX, i32::MIN as i64, i32::MAX as i64, 1 << 40, -(1 << 40), 1 << 31, 1 << 20,
            65536, 4096, 1000, 255, 256, -256, 1 << 62, -1,
        ];
        let b = self.byte();
        if b >= 0xF0 { SPECIAL[(b - 0xF0) as usize] } else { b as i8 as i64 }
    }

    /// A small float, or (for the top 16 byte values) a special one.
    pub fn float(&mut self) -> f32 {
        const SPECIAL: [f32; 16] = [
            f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1e-40,
            1e30, -1e30, 65504.0, 1e10, 0.5, 1e-7, 16777217.0, -1.0,
        ];
        let b = self.byte();
        if b >= 0xF0 { SPECIAL[(b - 0xF0) as usize] } else { (b as i8) as f32 * 0.25 }
    }
}

/// One input of `ty` from `bytes`: free dimensions 0 to 4, fixed ones as declared (an unknown
/// rank is taken as 1-D), one byte per element.
pub fn input(ty: &ValueType, bytes: &mut Bytes<'_>) -> Option<Tensor> {
    let t = ty.as_tensor()?;
    let dims = t.shape.clone().unwrap_or_else(|| vec![Dim::Symbol("n".into())]);
    let shape: Vec<usize> = dims.iter().map(|d| d.fixed().unwrap_or_else(|| (bytes.byte() % 5) as usize)).collect();
    let n: usize = shape.iter().product();
    match t.dtype {
        DataType::Float => Tensor::from_vec(shape, (0..n).map(|_| bytes.float()).collect()).ok(),
        DataType::Int64 => Tensor::from_vec(shape, (0..n).map(|_| bytes.int()).collect()).ok(),
        DataType::Int32 => Tensor::from_vec(shape, (0..n).map(|_| bytes.int() as i32).collect()).ok(),
        DataType::Bool => Tensor::from_bools(shape, (0..n).map(|_| bytes.byte() & 1 == 1).collect()).ok(),
        _ => None,
    }
}

/// Inputs for every input of `session`, decoded from `bytes` in declaration order.
pub fn inputs(session: &Session, bytes: &mut Bytes<'_>) -> Vec<(String, Tensor)> {
    session.inputs().iter().filter_map(|i| Some((i.name.clone(), input(&i.ty, bytes)?))).collect()
}
