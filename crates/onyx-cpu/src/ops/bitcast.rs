//! BitCast (opset 26): reinterprets a tensor's little-endian bytes as another type of the same
//! bit width, keeping the shape.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, HostBuffer, Location, Result, Tensor, TensorView, Value};

use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("BitCast", build_bitcast);
}

/// A BitCast node: the target type.
struct BitCast {
    to: DataType,
    at: Location,
}

fn build_bitcast(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let code = ctx.node.get_int("to")?.ok_or_else(|| Error::attribute(&at, "to", "a data type", "nothing"))?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .filter(|&d| d != DataType::String)
        .ok_or_else(|| Error::attribute(&at, "to", "a non-string ONNX data type", code.to_string()))?;
    Ok(Box::new(BitCast { to, at }))
}

impl BitCast {
    fn compute(&self, x: &TensorView<'_>) -> Result<Value> {
        let from = x.dtype();
        if from == DataType::String || from.bit_width() != self.to.bit_width() {
            return Err(Error::input(
                &self.at,
                0,
                format!("a tensor of {} bits (as {})", self.to.bit_width(), self.to),
                format!("a {from} tensor"),
            ));
        }
        let bytes = x.bytes()?;
        if self.to == DataType::Bool && bytes.iter().any(|&b| b > 1) {
            return Err(Error::input(&self.at, 0, "bytes 0 or 1 to reinterpret as bool", "other byte values"));
        }
        Tensor::from_bytes(self.to, x.shape().to_vec(), HostBuffer::from_vec(bytes.to_vec())).map(Value::Tensor)
    }
}

impl Kernel for BitCast {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        Ok(vec![self.compute(&x).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::tensor;
    use crate::ops::matmul::test_support::{build, node, run};
    use onyx_core::ir::AttrValue;

    fn bitcast(to: DataType, x: Tensor) -> Result<Tensor> {
        let k =
            build(build_bitcast, &node("BitCast", &["x"], 1, vec![("to", AttrValue::Int(to.onnx_code() as i64))]), 26)?;
        run(k.as_ref(), &[Some(x)], 1)?.remove(0).into_tensor()
    }

    #[test]
    fn bitcast_keeps_the_bits() {
        let f = [1.5f32, -0.0, f32::INFINITY, 3.25e-3, -7.0];
        let y = bitcast(DataType::Int32, tensor(&[5], f.to_vec())).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), f.iter().map(|v| v.to_bits() as i32).collect::<Vec<_>>());
        let back = bitcast(DataType::Float, y).unwrap();
        assert_eq!(
            back.as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            f.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let d = [2.5f64, -1e300];
        let y = bitcast(DataType::Uint64, tensor(&[1, 2], d.to_vec())).unwrap();
        assert_eq!(y.shape(), &[1, 2]);
        assert_eq!(y.as_slice::<u64>().unwrap(), d.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        let y = bitcast(DataType::Int8, tensor(&[3], vec![255u8, 1, 128])).unwrap();
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-1, 1, -128]);
        let h = bitcast(DataType::Float16, Tensor::scalar(0x3c00u16)).unwrap();
        assert_eq!(h.as_slice::<half::f16>().unwrap(), &[half::f16::ONE]);
    }

    #[test]
    fn invalid_bitcasts_are_errors() {
        let e = bitcast(DataType::Int64, tensor(&[2], vec![1f32, 2.0])).unwrap_err().to_string();
        assert!(e.contains("64 bits") && e.contains("float"), "{e}");
        let e = bitcast(DataType::Bool, tensor(&[2], vec![1u8, 2])).unwrap_err().to_string();
        assert!(e.contains("bool"), "{e}");
        assert!(build(build_bitcast, &node("BitCast", &["x"], 1, vec![("to", AttrValue::Int(8))]), 26).is_err());
        assert!(build(build_bitcast, &node("BitCast", &["x"], 1, vec![]), 26).is_err());
    }
}
