//! Seeded random inputs for `onyx run` and `onyx bench` when the user gives none.

use half::{bf16, f16};
use onyx::types::{Dim, ValueInfo, ValueType};
use onyx::{DataType, Error, Result, Tensor};

/// A concrete shape for a declared one: free dimensions become 1.
pub fn concrete_shape(info: &ValueInfo) -> Result<(DataType, Vec<usize>)> {
    let ValueType::Tensor(t) = &info.ty else {
        return Err(Error::InvalidArgument(format!(
            "input '{}' is a {}: give it with --input, random values are made for tensors only",
            info.name, info.ty
        )));
    };
    let dims = t.shape.as_deref().unwrap_or(&[]);
    Ok((t.dtype, dims.iter().map(|d| if let Dim::Fixed(n) = d { *n } else { 1 }).collect()))
}

/// Random values for `info`, reproducible from `seed`: floats uniform in [-1, 1), integers in
/// [0, 10) (safe as indices into small tables), bools fair.
pub fn random_input(info: &ValueInfo, seed: u64) -> Result<Tensor> {
    let (dtype, shape) = concrete_shape(info)?;
    let n: usize = shape.iter().product();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut f = || rng.f32() * 2.0 - 1.0;
    match dtype {
        DataType::Float => Tensor::from_vec(shape, (0..n).map(|_| f()).collect()),
        DataType::Double => Tensor::from_vec(shape, (0..n).map(|_| f64::from(f())).collect()),
        DataType::Float16 => Tensor::from_vec(shape, (0..n).map(|_| f16::from_f32(f())).collect()),
        DataType::BFloat16 => Tensor::from_vec(shape, (0..n).map(|_| bf16::from_f32(f())).collect()),
        DataType::Bool => Tensor::from_bools(shape, (0..n).map(|_| rng.bool()).collect()),
        DataType::Int64 => Tensor::from_vec(shape, (0..n).map(|_| rng.i64(0..10)).collect()),
        DataType::Int32 => Tensor::from_vec(shape, (0..n).map(|_| rng.i32(0..10)).collect()),
        DataType::Int16 => Tensor::from_vec(shape, (0..n).map(|_| rng.i16(0..10)).collect()),
        DataType::Int8 => Tensor::from_vec(shape, (0..n).map(|_| rng.i8(0..10)).collect()),
        DataType::Uint8 => Tensor::from_vec(shape, (0..n).map(|_| rng.u8(0..10)).collect()),
        DataType::Uint16 => Tensor::from_vec(shape, (0..n).map(|_| rng.u16(0..10)).collect()),
        DataType::Uint32 => Tensor::from_vec(shape, (0..n).map(|_| rng.u32(0..10)).collect()),
        DataType::Uint64 => Tensor::from_vec(shape, (0..n).map(|_| rng.u64(0..10)).collect()),
        other => Err(Error::InvalidArgument(format!(
            "input '{}': cannot make random {other} values; give it with --input",
            info.name
        ))),
    }
}
