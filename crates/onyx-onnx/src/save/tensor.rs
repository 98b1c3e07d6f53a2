//! `Tensor` to TensorProto: little-endian `raw_data` (sub-byte types packed, first element in
//! the low bits, as the IR already stores them), `string_data` for strings, or external data;
//! dense tensors to SparseTensorProto for SPARSE_TENSOR attributes.

use onyx_core::{Error, Result, Tensor, TensorData};

use super::external::ExternalWriter;
use crate::proto::tensor_proto::DataLocation;
use crate::proto::{SparseTensorProto, TensorProto};

/// The host bytes of a non-string tensor; device tensors are an error naming `what`.
pub(crate) fn host_bytes<'a>(t: &'a Tensor, what: &str) -> Result<&'a [u8]> {
    match t.data() {
        TensorData::Host(b) => Ok(b.bytes()),
        TensorData::Device(_) => Err(Error::InvalidArgument(format!(
            "{what} is on {}: copy it to the host before saving the model",
            t.device()
        ))),
        TensorData::Strings(_) => Err(Error::InvalidArgument(format!("{what}: string tensors have no bytes"))),
    }
}

/// Bytes a tensor's data takes in a file (strings: the sum of their lengths); device tensors
/// count their size too, so the choice of external data does not depend on where they live.
pub(crate) fn stored_len(t: &Tensor) -> u64 {
    match t.data() {
        TensorData::Host(b) => b.bytes().len() as u64,
        TensorData::Strings(s) => s.iter().map(|s| s.len() as u64).sum(),
        TensorData::Device(d) => d.byte_len() as u64,
    }
}

/// The dims of `t` as ONNX writes them.
fn dims(t: &Tensor) -> Vec<i64> {
    t.shape().iter().map(|&d| d as i64).collect()
}

/// Converts a tensor named `name` (`None` for tensors inside attributes). With `ext`, the
/// bytes go to the external data file when the writer takes them. `what` names the tensor in
/// errors ("initializer 'w'", "attribute 'value' of Constant node 'c'").
pub(crate) fn tensor_to_proto(
    t: &Tensor,
    name: Option<&str>,
    what: &str,
    ext: Option<&mut ExternalWriter>,
) -> Result<TensorProto> {
    let mut proto = TensorProto {
        name: name.map(str::to_string),
        data_type: Some(t.dtype().onnx_code()),
        dims: dims(t),
        ..Default::default()
    };
    if let TensorData::Strings(s) = t.data() {
        proto.string_data = s.iter().map(|s| s.as_bytes().to_vec()).collect();
        return Ok(proto);
    }
    let bytes = host_bytes(t, what)?;
    match ext {
        Some(ext) if ext.takes(bytes.len()) => {
            proto.external_data = ext.write(bytes, what)?;
            proto.data_location = Some(DataLocation::External as i32);
        }
        _ => proto.raw_data = Some(bytes.to_vec()),
    }
    Ok(proto)
}

/// A dense tensor as a SparseTensorProto: `values` holds the elements that are not zero (empty
/// for strings; bitwise, so -0.0 and NaN are kept), `indices` their linear positions (int64,
/// increasing), as the ONNX checker requires.
pub(crate) fn sparse_to_proto(t: &Tensor, what: &str) -> Result<SparseTensorProto> {
    let dtype = t.dtype();
    let (positions, values) = match t.data() {
        TensorData::Strings(s) => {
            let kept: Vec<(usize, &String)> = s.iter().enumerate().filter(|(_, s)| !s.is_empty()).collect();
            let values = kept.iter().map(|(_, s)| s.to_string()).collect();
            (kept.iter().map(|(i, _)| *i).collect::<Vec<_>>(), Tensor::from_strings(vec![kept.len()], values)?)
        }
        _ => {
            if dtype.bit_width() < 8 {
                return Err(Error::Unsupported(format!(
                    "{what}: sparse {dtype} tensors cannot be written (ONNX sparse tensors of sub-byte types are not supported)"
                )));
            }
            let size = dtype.bit_width() / 8;
            let bytes = host_bytes(t, what)?;
            let mut positions = vec![];
            let mut kept = vec![];
            for (i, e) in bytes.chunks_exact(size).enumerate().filter(|(_, e)| e.iter().any(|&b| b != 0)) {
                positions.push(i);
                kept.extend_from_slice(e);
            }
            let values = Tensor::from_bytes(dtype, vec![positions.len()], crate::tensor::copy_aligned(&kept)?)?;
            (positions, values)
        }
    };
    let indices = Tensor::from_vec(vec![positions.len()], positions.iter().map(|&p| p as i64).collect())?;
    Ok(SparseTensorProto {
        values: Some(tensor_to_proto(&values, None, what, None)?),
        indices: Some(tensor_to_proto(&indices, None, what, None)?),
        dims: dims(t),
    })
}
