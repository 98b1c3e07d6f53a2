//! One-line summaries of output values: shape, dtype, min/max/mean.

use half::{bf16, f16};
use onyx::{DataType, Tensor, Value};

/// Min, max and mean of a numeric or bool tensor, as f64 (`None` for strings and empty tensors).
pub fn stats(t: &Tensor) -> Option<(f64, f64, f64)> {
    let values: Vec<f64> = match t.dtype() {
        DataType::Float => t.as_slice::<f32>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Double => t.as_slice::<f64>().ok()?.to_vec(),
        DataType::Float16 => t.as_slice::<f16>().ok()?.iter().map(|x| x.to_f64()).collect(),
        DataType::BFloat16 => t.as_slice::<bf16>().ok()?.iter().map(|x| x.to_f64()).collect(),
        DataType::Int8 => t.as_slice::<i8>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Int16 => t.as_slice::<i16>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Int32 => t.as_slice::<i32>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Int64 => t.as_slice::<i64>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Uint8 | DataType::Bool => t.view().ok()?.bytes().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Uint16 => t.as_slice::<u16>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Uint32 => t.as_slice::<u32>().ok()?.iter().map(|&x| x as f64).collect(),
        DataType::Uint64 => t.as_slice::<u64>().ok()?.iter().map(|&x| x as f64).collect(),
        _ => return None,
    };
    if values.is_empty() {
        return None;
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some((min, max, mean))
}

/// `name: float32[1,10] min=... max=... mean=...`
pub fn describe(name: &str, value: &Value) -> String {
    match value {
        Value::Tensor(t) => {
            let stats = match stats(t) {
                Some((min, max, mean)) => format!(" min={min:.6} max={max:.6} mean={mean:.6}"),
                None => String::new(),
            };
            format!("{name}: {}{:?}{stats}", t.dtype(), t.shape())
        }
        other => format!("{name}: {}", other.describe()),
    }
}

/// Replaces every character outside `[A-Za-z0-9._-]` with `_` (output file names).
pub fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_names() {
        assert_eq!(file_stem("out:0/x y.z-1"), "out_0_x_y.z-1");
    }

    #[test]
    fn stats_of_a_tensor() {
        let t = Tensor::from_vec(vec![4], vec![1.0f32, -3.0, 2.0, 4.0]).unwrap();
        assert_eq!(stats(&t), Some((-3.0, 4.0, 1.0)));
    }
}
