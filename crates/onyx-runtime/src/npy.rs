//! Reading and writing tensors as NumPy `.npy` files (through npyz): how the CLI and tests
//! exchange tensors with Python.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use half::{bf16, f16};
use npyz::WriterBuilder;
use onyx_core::{DataType, Element, Error, Result, Tensor};

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), source: e }
}

/// Reads a `.npy` file of any numeric dtype, float16 or bool (C order) into a tensor.
pub fn read(path: &Path) -> Result<Tensor> {
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    let npy = npyz::NpyFile::new(BufReader::new(file)).map_err(|e| io_err(path, e))?;
    if npy.order() == npyz::Order::Fortran {
        return Err(Error::InvalidArgument(format!(
            "{}: Fortran-ordered arrays are not supported; save with np.ascontiguousarray",
            path.display()
        )));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = npy.dtype().descr();
    let code = descr.trim_matches(|c| c == '\'' || c == '"').trim_start_matches(['<', '>', '|', '=']);
    let bad = |e: std::io::Error| io_err(path, e);
    match code {
        "f4" => typed::<f32>(shape, npy.into_vec().map_err(bad)?),
        "f8" => typed::<f64>(shape, npy.into_vec().map_err(bad)?),
        "f2" => typed::<f16>(shape, npy.into_vec().map_err(bad)?),
        "i1" => typed::<i8>(shape, npy.into_vec().map_err(bad)?),
        "i2" => typed::<i16>(shape, npy.into_vec().map_err(bad)?),
        "i4" => typed::<i32>(shape, npy.into_vec().map_err(bad)?),
        "i8" => typed::<i64>(shape, npy.into_vec().map_err(bad)?),
        "u1" => typed::<u8>(shape, npy.into_vec().map_err(bad)?),
        "u2" => typed::<u16>(shape, npy.into_vec().map_err(bad)?),
        "u4" => typed::<u32>(shape, npy.into_vec().map_err(bad)?),
        "u8" => typed::<u64>(shape, npy.into_vec().map_err(bad)?),
        "b1" => Tensor::from_bools(shape, npy.into_vec().map_err(bad)?),
        other => Err(Error::InvalidArgument(format!(
            "{}: numpy dtype '{other}' is not supported (numeric types, float16 and bool are)",
            path.display()
        ))),
    }
}

fn typed<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, data)
}

/// Writes a host tensor as `.npy`. bfloat16 (which numpy lacks) is written as float32; returns
/// the numpy dtype written.
pub fn write(path: &Path, tensor: &Tensor) -> Result<&'static str> {
    let shape: Vec<u64> = tensor.shape().iter().map(|&d| d as u64).collect();
    let file = File::create(path).map_err(|e| io_err(path, e))?;
    let w = BufWriter::new(file);
    macro_rules! put {
        ($t:ty, $data:expr, $name:literal) => {{
            let mut out = npyz::WriteOptions::<$t>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()
                .map_err(|e| io_err(path, e))?;
            out.extend($data).map_err(|e| io_err(path, e))?;
            out.finish().map_err(|e| io_err(path, e))?;
            Ok($name)
        }};
    }
    match tensor.dtype() {
        DataType::Float => put!(f32, tensor.as_slice::<f32>()?.iter().copied(), "float32"),
        DataType::Double => put!(f64, tensor.as_slice::<f64>()?.iter().copied(), "float64"),
        DataType::Float16 => put!(f16, tensor.as_slice::<f16>()?.iter().copied(), "float16"),
        DataType::BFloat16 => put!(f32, tensor.as_slice::<bf16>()?.iter().map(|x| x.to_f32()), "float32"),
        DataType::Int8 => put!(i8, tensor.as_slice::<i8>()?.iter().copied(), "int8"),
        DataType::Int16 => put!(i16, tensor.as_slice::<i16>()?.iter().copied(), "int16"),
        DataType::Int32 => put!(i32, tensor.as_slice::<i32>()?.iter().copied(), "int32"),
        DataType::Int64 => put!(i64, tensor.as_slice::<i64>()?.iter().copied(), "int64"),
        DataType::Uint8 => put!(u8, tensor.as_slice::<u8>()?.iter().copied(), "uint8"),
        DataType::Uint16 => put!(u16, tensor.as_slice::<u16>()?.iter().copied(), "uint16"),
        DataType::Uint32 => put!(u32, tensor.as_slice::<u32>()?.iter().copied(), "uint32"),
        DataType::Uint64 => put!(u64, tensor.as_slice::<u64>()?.iter().copied(), "uint64"),
        DataType::Bool => put!(bool, tensor.view()?.bytes()?.iter().map(|&b| b != 0), "bool"),
        other => Err(Error::InvalidArgument(format!("{}: cannot write a {other} tensor as .npy", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_supported_dtype() {
        let dir = std::env::temp_dir().join(format!("onyx-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = vec![
            Tensor::from_vec(vec![2, 3], vec![1.5f32, -2.0, 3.0, 4.25, 5.0, -6.5]).unwrap(),
            Tensor::from_vec(vec![3], vec![1.5f64, -2.0, 1e300]).unwrap(),
            Tensor::from_vec(vec![2], vec![f16::from_f32(0.5), f16::from_f32(-3.0)]).unwrap(),
            Tensor::from_vec(vec![1, 2], vec![i64::MIN, 7]).unwrap(),
            Tensor::from_vec(vec![3], vec![-1i8, 0, 127]).unwrap(),
            Tensor::from_vec(vec![2], vec![65535u16, 3]).unwrap(),
            Tensor::from_bools(vec![4], vec![true, false, false, true]).unwrap(),
            Tensor::from_vec(vec![], vec![42u32]).unwrap(),
        ];
        for (i, t) in cases.iter().enumerate() {
            let p = dir.join(format!("{i}.npy"));
            write(&p, t).unwrap();
            let back = read(&p).unwrap();
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.view().unwrap().bytes().unwrap(), t.view().unwrap().bytes().unwrap());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn missing_and_garbage_files_are_errors() {
        assert!(read(Path::new("/nonexistent/x.npy")).is_err());
        let p = std::env::temp_dir().join(format!("onyx-npy-bad-{}.npy", std::process::id()));
        std::fs::write(&p, b"not a numpy file at all").unwrap();
        assert!(read(&p).is_err());
        std::fs::remove_file(&p).ok();
    }
}
