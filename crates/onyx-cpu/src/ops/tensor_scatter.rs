//! TensorScatter (opset 24): writes an update into a copy of a KV cache along the sequence
//! axis, at a per-batch write index (`linear`), or wrapping around (`circular`).
//!
//! The cache `[batch, D1, .., max_seq, .., Dn]` and the update `[batch, D1, .., seq, .., Dn]`
//! agree everywhere but on `axis` (not 0). Elements are moved as bytes (or strings).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, HostBuffer, Location, Result, Tensor, TensorView, Value};

use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("TensorScatter", build_tensor_scatter);
}

/// A TensorScatter node with its attributes decoded.
struct TensorScatter {
    circular: bool,
    axis: i64,
    at: Location,
}

fn build_tensor_scatter(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let circular = match ctx.node.string_or("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(Error::attribute(&at, "mode", "linear or circular", other)),
    };
    Ok(Box::new(TensorScatter { circular, axis: ctx.node.int_or("axis", -2)?, at }))
}

/// Where each run of updated elements goes: (source offset, destination offset), in elements,
/// each run `inner` elements long.
struct Moves {
    runs: Vec<(usize, usize)>,
    inner: usize,
}

impl TensorScatter {
    fn moves(&self, cache: &[usize], update: &[usize], indices: Option<&TensorView<'_>>) -> Result<Moves> {
        let at = &self.at;
        let axis = util::normalize_axis(self.axis, cache.len(), at)?;
        if axis == 0 {
            return Err(Error::attribute(
                at,
                "axis",
                "a sequence axis other than the batch axis 0",
                self.axis.to_string(),
            ));
        }
        let agree = update.len() == cache.len()
            && (0..cache.len()).all(|d| if d == axis { update[d] <= cache[d] } else { update[d] == cache[d] });
        if !agree {
            return Err(Error::input(
                at,
                1,
                format!("an update matching {cache:?} except for at most {} on axis {axis}", cache[axis]),
                format!("{update:?}"),
            ));
        }
        let batch = cache[0];
        let writes = match indices {
            Some(t) if t.shape() == [batch] && t.dtype() == DataType::Int64 => util::to_i64(t)?,
            Some(t) => {
                return Err(Error::input(
                    at,
                    2,
                    format!("int64 write_indices of shape [{batch}]"),
                    format!("{} {:?}", t.dtype(), t.shape()),
                ))
            }
            None => vec![0; batch],
        };
        let (max_seq, seq) = (cache[axis], update[axis]);
        let inner: usize = cache[axis + 1..].iter().product();
        let per_batch: usize = cache[1..axis].iter().product();
        let mut runs = Vec::with_capacity(batch * per_batch * seq);
        for (b, &w) in writes.iter().enumerate() {
            let bad = || {
                Error::input(
                    at,
                    2,
                    format!("write indices with index + {seq} <= {max_seq} (linear mode)"),
                    w.to_string(),
                )
            };
            if w < 0 || (!self.circular && w as usize + seq > max_seq) {
                return Err(bad());
            }
            for p in 0..per_batch {
                let prefix = b * per_batch + p;
                for s in 0..seq {
                    let mut t = w as usize + s;
                    if self.circular {
                        t %= max_seq;
                    }
                    runs.push(((prefix * seq + s) * inner, (prefix * max_seq + t) * inner));
                }
            }
        }
        Ok(Moves { runs, inner })
    }

    fn compute(
        &self,
        cache: &TensorView<'_>,
        update: &TensorView<'_>,
        indices: Option<&TensorView<'_>>,
    ) -> Result<Value> {
        if update.dtype() != cache.dtype() {
            return Err(Error::input(&self.at, 1, cache.dtype().name(), update.dtype().name()));
        }
        let m = self.moves(cache.shape(), update.shape(), indices)?;
        let shape = cache.shape().to_vec();
        if cache.dtype() == DataType::String {
            let mut out = cache.strings()?.to_vec();
            let src = update.strings()?;
            for &(s, d) in &m.runs {
                out[d..d + m.inner].clone_from_slice(&src[s..s + m.inner]);
            }
            return Tensor::from_strings(shape, out).map(Value::Tensor);
        }
        let bits = cache.dtype().bit_width();
        if bits % 8 != 0 {
            return Err(Error::input(
                &self.at,
                0,
                "a tensor of whole-byte elements",
                format!("a {} tensor", cache.dtype()),
            ));
        }
        let size = bits / 8;
        let mut out = cache.bytes()?.to_vec();
        let src = update.bytes()?;
        let n = m.inner * size;
        for &(s, d) in &m.runs {
            out[d * size..d * size + n].copy_from_slice(&src[s * size..s * size + n]);
        }
        Tensor::from_bytes(cache.dtype(), shape, HostBuffer::from_vec(out)).map(Value::Tensor)
    }
}

impl Kernel for TensorScatter {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let cache = util::input(inputs, 0, &self.at)?;
        let update = util::input(inputs, 1, &self.at)?;
        let indices = util::opt_input(inputs, 2, &self.at)?;
        Ok(vec![self.compute(&cache, &update, indices.as_ref()).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{tensor, unravel};
    use crate::ops::matmul::test_support::{build, node, run, string};
    use onyx_core::ir::AttrValue;

    fn scatter(mode: &str, axis: i64, inputs: Vec<Option<Tensor>>) -> Result<Tensor> {
        let attrs = vec![("mode", string(mode)), ("axis", AttrValue::Int(axis))];
        let k = build(build_tensor_scatter, &node("TensorScatter", &["c", "u", "w"], 1, attrs), 24)?;
        run(k.as_ref(), &inputs, 1)?.remove(0).into_tensor()
    }

    #[test]
    fn tensor_scatter_matches_the_pseudocode() {
        let cache_shape = [3, 2, 7, 3];
        let update_shape = [3, 2, 4, 3];
        let cache: Vec<f32> = (0..126).map(|i| i as f32).collect();
        let update: Vec<f32> = (0..72).map(|i| -(i as f32) - 1.0).collect();
        let writes = vec![0i64, 3, 5];
        for mode in ["linear", "circular"] {
            let w = if mode == "linear" { vec![0i64, 3, 2] } else { writes.clone() };
            let y = scatter(
                mode,
                -2,
                vec![
                    Some(tensor(&cache_shape, cache.clone())),
                    Some(tensor(&update_shape, update.clone())),
                    Some(tensor(&[3], w.clone())),
                ],
            )
            .unwrap();
            let mut want = cache.clone();
            for (flat, &u) in update.iter().enumerate() {
                let idx = unravel(flat, &update_shape);
                let mut t = w[idx[0]] as usize + idx[2];
                if mode == "circular" {
                    t %= 7;
                }
                want[((idx[0] * 2 + idx[1]) * 7 + t) * 3 + idx[3]] = u;
            }
            assert_eq!(y.as_slice::<f32>().unwrap(), &want[..], "{mode}");
        }
        // Without write indices, on the last axis, with strings.
        let c = Tensor::from_strings(vec![2, 3], ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec()).unwrap();
        let u = Tensor::from_strings(vec![2, 2], ["x", "y", "z", "w"].map(String::from).to_vec()).unwrap();
        let y = scatter("linear", 1, vec![Some(c), Some(u), None]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["x", "y", "c", "z", "w", "f"]);
    }

    #[test]
    fn invalid_tensor_scatters_are_errors() {
        let c = || Some(tensor(&[2, 5, 2], vec![0f32; 20]));
        let u = || Some(tensor(&[2, 3, 2], vec![1f32; 12]));
        let e = scatter("linear", 1, vec![c(), u(), Some(tensor(&[2], vec![0i64, 3]))]).unwrap_err().to_string();
        assert!(e.contains("input 2") && e.contains("linear"), "{e}");
        let e = scatter("linear", 0, vec![c(), u(), None]).unwrap_err().to_string();
        assert!(e.contains("axis"), "{e}");
        let e = scatter("linear", -1, vec![c(), u(), None]).unwrap_err().to_string();
        assert!(e.contains("input 1"), "{e}");
        assert!(scatter("ring", 1, vec![c(), u(), None]).unwrap_err().to_string().contains("mode"));
    }
}
