//! SparseTensorProto to a dense `Tensor` (sparse initializers and attributes are densified).

use onyx_core::{element_count, DataType, Error, HostBuffer, Result, Tensor};

use crate::external::ExternalData;
use crate::proto::SparseTensorProto;
use crate::tensor::{shape_from_dims, tensor_from_proto, tensor_name};

/// The name of a sparse tensor (its `values`' name) and the dense tensor it describes.
pub(crate) fn densify(proto: SparseTensorProto, ext: &mut ExternalData) -> Result<(String, Tensor)> {
    let name = proto.values.as_ref().and_then(|v| v.name.clone()).unwrap_or_default();
    let what = format!("sparse {}", proto.values.as_ref().map_or("an unnamed tensor".into(), tensor_name));
    let shape = shape_from_dims(&proto.dims, &what)?;
    let (Some(values), Some(indices)) = (proto.values, proto.indices) else {
        return Err(Error::InvalidModel(format!("{what}: expected both values and indices")));
    };
    let values = tensor_from_proto(values, ext).map_err(|e| crate::in_context(e, &what))?;
    let indices = tensor_from_proto(indices, ext).map_err(|e| crate::in_context(e, &format!("{what}: indices")))?;
    let positions = linear_positions(&indices, &shape, values.len(), &what)?;
    let dense = scatter(&values, &positions, shape, &what)?;
    Ok((name, dense))
}

/// The linear position of each value, from `[nnz]` linear or `[nnz, rank]` coordinate indices,
/// each checked against `shape`.
fn linear_positions(indices: &Tensor, shape: &[usize], nnz: usize, what: &str) -> Result<Vec<usize>> {
    if values_shape_ok(indices.shape(), nnz, shape.len()).is_none() {
        return Err(Error::InvalidModel(format!(
            "{what}: indices have shape {:?}, expected [{nnz}] or [{nnz}, {}]",
            indices.shape(),
            shape.len()
        )));
    }
    let raw: Vec<i64> = match indices.dtype() {
        DataType::Int64 => indices.as_slice::<i64>()?.to_vec(),
        DataType::Int32 => indices.as_slice::<i32>()?.iter().map(|&i| i64::from(i)).collect(),
        other => {
            return Err(Error::InvalidModel(format!("{what}: indices are {other}, expected int64 or int32")));
        }
    };
    let total = element_count(shape)?;
    let linear = indices.shape().len() == 1 || nnz == 0;
    let out_of_range = |i: &[i64]| Error::InvalidModel(format!("{what}: index {i:?} is outside the shape {shape:?}"));
    if linear {
        return raw
            .iter()
            .map(|&i| usize::try_from(i).ok().filter(|&i| i < total).ok_or_else(|| out_of_range(&[i])))
            .collect();
    }
    raw.chunks(shape.len().max(1))
        .map(|coords| {
            coords.iter().zip(shape).try_fold(0usize, |acc, (&c, &d)| {
                let c = usize::try_from(c).ok().filter(|&c| c < d).ok_or_else(|| out_of_range(coords))?;
                Ok(acc * d + c)
            })
        })
        .collect()
}

fn values_shape_ok(indices: &[usize], nnz: usize, rank: usize) -> Option<()> {
    match indices {
        [n] if *n == nnz => Some(()),
        [n, r] if *n == nnz && *r == rank && rank > 0 => Some(()),
        _ => None,
    }
}

/// A dense tensor of `shape`, zero (or empty strings) except at `positions`.
fn scatter(values: &Tensor, positions: &[usize], shape: Vec<usize>, what: &str) -> Result<Tensor> {
    if values.shape().len() != 1 {
        return Err(Error::InvalidModel(format!("{what}: values have shape {:?}, expected 1-D", values.shape())));
    }
    let dtype = values.dtype();
    let total = element_count(&shape)?;
    if dtype == DataType::String {
        let mut dense = vec![String::new(); total];
        for (&p, s) in positions.iter().zip(values.view()?.strings()?) {
            dense[p] = s.clone();
        }
        return Tensor::from_strings(shape, dense);
    }
    let size = dtype.bit_width() / 8;
    if dtype.bit_width() < 8 {
        return Err(Error::InvalidModel(format!("{what}: sparse {dtype} tensors are not supported")));
    }
    let src = values.view()?.bytes()?;
    let bytes = total.checked_mul(size).ok_or_else(|| Error::InvalidModel(format!("{what}: too large")))?;
    let mut words = vec![0u64; bytes.div_ceil(8)];
    let dense = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes];
    for (&p, v) in positions.iter().zip(src.chunks_exact(size)) {
        dense[p * size..(p + 1) * size].copy_from_slice(v);
    }
    let buffer = HostBuffer::new(std::sync::Arc::new(words), 0, bytes)?;
    Tensor::from_bytes(dtype, shape, buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::TensorProto;

    fn values(name: &str, data: Vec<f32>) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            data_type: Some(1),
            dims: vec![data.len() as i64],
            float_data: data,
            ..Default::default()
        }
    }

    fn indices(dims: Vec<i64>, data: Vec<i64>) -> TensorProto {
        TensorProto { data_type: Some(7), dims, int64_data: data, ..Default::default() }
    }

    fn sparse(v: TensorProto, i: TensorProto, dims: Vec<i64>) -> SparseTensorProto {
        SparseTensorProto { values: Some(v), indices: Some(i), dims }
    }

    fn run(p: SparseTensorProto) -> Result<(String, Tensor)> {
        densify(p, &mut ExternalData::new(None))
    }

    #[test]
    fn both_index_layouts_give_the_same_dense_tensor() {
        // Dense [3,5] with 2.5 at (0,1), -1 at (1,4), 7 at (2,0): linear 1, 9, 10.
        let mut want = [0f32; 15];
        want[1] = 2.5;
        want[9] = -1.0;
        want[10] = 7.0;
        let v = || values("w", vec![2.5, -1.0, 7.0]);
        let linear = sparse(v(), indices(vec![3], vec![1, 9, 10]), vec![3, 5]);
        let coords = sparse(v(), indices(vec![3, 2], vec![0, 1, 1, 4, 2, 0]), vec![3, 5]);
        for p in [linear, coords] {
            let (name, t) = run(p).unwrap();
            assert_eq!(name, "w");
            assert_eq!(t.shape(), &[3, 5]);
            assert_eq!(t.as_slice::<f32>().unwrap(), &want[..]);
        }
    }

    #[test]
    fn int32_indices_and_strings() {
        let v = TensorProto {
            name: Some("s".into()),
            data_type: Some(8),
            dims: vec![2],
            string_data: vec![b"a".to_vec(), b"bc".to_vec()],
            ..Default::default()
        };
        let i = TensorProto { data_type: Some(6), dims: vec![2], int32_data: vec![0, 3], ..Default::default() };
        let (_, t) = run(sparse(v, i, vec![4])).unwrap();
        assert_eq!(t.view().unwrap().strings().unwrap(), &["a", "", "", "bc"]);
    }

    #[test]
    fn invalid_sparse_tensors_are_errors() {
        let cases: Vec<(SparseTensorProto, &str)> = vec![
            (sparse(values("w", vec![1.0]), indices(vec![1], vec![6]), vec![2, 3]), "index [6] is outside"),
            (sparse(values("w", vec![1.0]), indices(vec![1, 2], vec![1, 3]), vec![2, 3]), "index [1, 3] is outside"),
            (sparse(values("w", vec![1.0]), indices(vec![1], vec![-1]), vec![2, 3]), "index [-1]"),
            (sparse(values("w", vec![1.0, 2.0]), indices(vec![1], vec![0]), vec![2, 3]), "expected [2] or [2, 2]"),
            (sparse(values("w", vec![1.0]), indices(vec![1], vec![0]), vec![2, -3]), "dimension -3"),
            (SparseTensorProto { values: Some(values("w", vec![1.0])), indices: None, dims: vec![2] }, "expected both"),
        ];
        for (p, needle) in cases {
            let err = run(p).unwrap_err().to_string();
            assert!(err.contains("sparse tensor 'w'") && err.contains(needle), "{err} (want {needle})");
        }
    }
}
