//! `ai.onyx` GemmSkipLayerNormalization(A, B, bias?, skip, gamma, beta?) -> (output, sum?): the
//! product `A @ op(B)` (`transB`), read in the skip's shape, normalized as SkipLayerNormalization
//! normalizes `input + skip + bias`. Where the product splits K, the row kernel sums the K
//! slices as it reads them: split-K's own sum pass goes, one dispatch fewer for each projection
//! that feeds a transformer block's residual.

use super::rows::{SkipInputs, SkipSum};
use super::skip::{stats_shape, vector};
use super::*;
use crate::ops::matmul::plain::{PlainProduct, Recorded};

/// f32 (or f16) inputs of one type, at most the output and the sum.
pub(super) fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node.inputs.len();
    let same = (1..n).filter(|&i| ctx.node.input(i).is_some()).all(|i| input_dtype(ctx, i) == input_dtype(ctx, 0));
    (5..=6).contains(&n)
        && ctx.node.outputs.len() <= 2
        && ctx.node.int_or("transB", 0).is_ok()
        && ctx.node.float_or("epsilon", 1e-12).is_ok()
        && same
        && float_inputs(ctx, gpu, 0..n)
}

/// A GemmSkipLayerNormalization node: the product, and the row kernel for a whole product and
/// for one in K slices.
struct GemmSkipLayerNorm {
    product: PlainProduct,
    whole: RowNorm,
    partials: RowNorm,
    epsilon: f32,
    outputs: usize,
    at: Location,
}

pub(super) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let (dtype, ty) = param_type(ctx, 0)?;
    let beta = node.input(5).is_some();
    let mut types = vec![(dtype, ty), (dtype, ty)];
    if beta {
        types.push((dtype, ty));
    }
    let bias = node.input(2).is_some();
    let row_len = known_dims(ctx, 3).and_then(|d| d.last().copied().flatten());
    let norm = |partials| {
        RowNorm::with_skip(gpu, &types, Form::Centered, beta, false, Some(SkipSum { bias, partials }), row_len)
    };
    Ok(Box::new(GemmSkipLayerNorm {
        product: PlainProduct::new(ctx, gpu, node.int_or("transB", 0)? != 0)?,
        whole: norm(false)?,
        partials: norm(true)?,
        epsilon: node.float_or("epsilon", 1e-12)?,
        outputs: node.outputs.len(),
        at: node.location(),
    }))
}

impl GpuOp for GemmSkipLayerNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (a, b) = (gpu_input(run, inputs, 0, at)?, gpu_input(run, inputs, 1, at)?);
        let skip = gpu_input(run, inputs, 3, at)?;
        let [m, n] = self.product.dims(a.shape(), b.shape())?;
        if skip.shape().last() != Some(&n) || m.checked_mul(n) != Some(skip.len()) {
            return Err(Error::input(
                at,
                3,
                format!("the product's {m} x {n} elements in rows of {n}"),
                format!("shape {:?}", skip.shape()),
            ));
        }
        let gamma = vector(run, inputs, 4, n, at)?.ok_or_else(|| Error::input(at, 4, "gamma", "nothing"))?;
        let map = ParamMap { div: 1, modulo: n };
        let beta = vector(run, inputs, 5, n, at)?.map(|b| (b, map));
        let bias = vector(run, inputs, 2, n, at)?;
        let stat_shape = stats_shape(skip.shape());
        let skip_tensor = skip.tensor;
        let mut out = match self.product.record(run, a, b)? {
            Recorded::Whole(y) => {
                let x = y.reshaped(skip_tensor.shape().to_vec()).map_err(|e| e.at(at))?;
                let skip = SkipInputs { skip, bias, slices: 0 };
                let x_gpu = GpuTensor { tensor: &x, buffer: x.gpu()? };
                let out =
                    self.whole.record(run, x_gpu, Some(skip), n, (gamma, map), beta, self.epsilon, &stat_shape, at)?;
                drop(x);
                run.release_tensor(y);
                out
            }
            Recorded::Partials { part, slices } => {
                // X is the skip's shape and type, its buffer the product's f32 slices.
                let x = GpuTensor { tensor: skip_tensor, buffer: part.gpu()? };
                let skip = SkipInputs { skip, bias, slices };
                let out =
                    self.partials.record(run, x, Some(skip), n, (gamma, map), beta, self.epsilon, &stat_shape, at)?;
                run.release_tensor(part);
                out
            }
        };
        out.truncate(self.outputs);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use onyx_core::ep::ExecutionProvider;
    use onyx_core::ir::{Graph, Model, Node, MS_DOMAIN, ONYX_DOMAIN};
    use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
    use onyx_core::{InputValue, Session, SessionOptions, Tensor, Value};

    use crate::ops::matmul::tests::{half, has_f16};
    use crate::testkit::{assert_close, float, i64s, int, provider, rand, startup_provider};

    /// One product's sizes and what surrounds it.
    struct Shape {
        m: usize,
        k: usize,
        n: usize,
        skip: Vec<usize>,
        trans_b: bool,
        bias: bool,
        beta: bool,
        sum: bool,
    }

    impl Shape {
        /// A, B, bias, skip, gamma, beta (absent ones left out).
        fn inputs(&self, seed: u64) -> Vec<(&'static str, Tensor)> {
            let b = if self.trans_b { [self.n, self.k] } else { [self.k, self.n] };
            let mut inputs =
                vec![("a", rand(&[self.m, self.k], -1.0, 1.0, seed)), ("b", rand(&b, -0.2, 0.2, seed + 1))];
            if self.bias {
                inputs.push(("bias", rand(&[self.n], -1.0, 1.0, seed + 2)));
            }
            inputs.push(("skip", rand(&self.skip, -2.0, 2.0, seed + 3)));
            inputs.push(("gamma", rand(&[self.n], 0.5, 1.5, seed + 4)));
            if self.beta {
                inputs.push(("beta", rand(&[self.n], -1.0, 1.0, seed + 5)));
            }
            inputs
        }

        /// The fused node, or (`!fused`) the Gemm, Reshape and SkipLayerNormalization it stands for.
        fn model(&self, inputs: &[(&'static str, Tensor)], fused: bool) -> Model {
            let mut graph = Graph::default();
            for (name, t) in inputs {
                let shape = t.shape().iter().map(|&d| Dim::Fixed(d)).collect();
                graph.inputs.push(ValueInfo::new(
                    *name,
                    ValueType::Tensor(TensorType { dtype: t.dtype(), shape: Some(shape) }),
                ));
            }
            let has =
                |name: &str| if inputs.iter().any(|(n, _)| *n == name) { name.to_string() } else { String::new() };
            let outputs: Vec<String> = if self.sum { vec!["y".into(), "s".into()] } else { vec!["y".into()] };
            let node = |op: &str, domain: &str, inputs: Vec<String>, outputs: Vec<String>| Node {
                name: op.into(),
                op_type: op.into(),
                domain: domain.into(),
                inputs,
                outputs,
                ..Default::default()
            };
            let trans_b = int("transB", self.trans_b as i64);
            if fused {
                let inputs = ["a", "b", "bias", "skip", "gamma", "beta"].map(has).to_vec();
                let mut n = node("GemmSkipLayerNormalization", ONYX_DOMAIN, inputs, outputs.clone());
                n.attributes = vec![trans_b, float("epsilon", 1e-5)];
                graph.nodes.push(n);
            } else {
                let mut gemm = node("Gemm", "", vec!["a".into(), "b".into(), has("bias")], vec!["g".into()]);
                gemm.attributes = vec![trans_b];
                graph
                    .initializers
                    .insert("shape".into(), i64s(&self.skip.iter().map(|&d| d as i64).collect::<Vec<_>>()));
                graph.nodes.push(gemm);
                graph.nodes.push(node("Reshape", "", vec!["g".into(), "shape".into()], vec!["r".into()]));
                let norm_inputs =
                    ["r", "skip", "gamma", "beta"].map(|n| if n == "r" { n.into() } else { has(n) }).to_vec();
                let mut norm_outputs = vec!["y".to_string()];
                if self.sum {
                    norm_outputs.extend([String::new(), String::new(), "s".into()]);
                }
                let mut sln = node("SkipLayerNormalization", MS_DOMAIN, norm_inputs, norm_outputs);
                sln.attributes = vec![float("epsilon", 1e-5)];
                graph.nodes.push(sln);
            }
            for o in outputs {
                graph.outputs.push(ValueInfo::new(o, ValueType::Unknown));
            }
            let mut model = Model { ir_version: 10, graph, ..Default::default() };
            model.opsets.insert(String::new(), 17);
            model.opsets.insert(MS_DOMAIN.into(), 1);
            model.opsets.insert(ONYX_DOMAIN.into(), 1);
            model
        }
    }

    fn run(
        model: Model,
        provider: Arc<dyn ExecutionProvider>,
        inputs: &[(&str, Tensor)],
    ) -> onyx_core::Result<Vec<Tensor>> {
        let options = SessionOptions { providers: vec![provider], ..Default::default() };
        let session = Session::new(model, options)?;
        let feeds = inputs.iter().map(|(n, t)| (n.to_string(), InputValue::Value(Value::Tensor(t.clone()))));
        let outputs = session.run(feeds)?;
        Ok(outputs.into_vec().into_iter().map(|(_, v)| v.as_tensor().unwrap().clone()).collect())
    }

    /// Against the CPU's Gemm, Reshape and SkipLayerNormalization: a product that splits K (its
    /// slices summed by the row kernel), one that does not, a GEMV, with and without bias, beta
    /// and the sum output; the tuned kernels and the startup ones.
    #[test]
    fn gemm_skip_layer_norm_matches_the_cpu_on_its_parts() {
        let shapes = [
            Shape { m: 70, k: 300, n: 67, skip: vec![2, 35, 67], trans_b: true, bias: true, beta: true, sum: true },
            Shape { m: 130, k: 520, n: 96, skip: vec![130, 96], trans_b: false, bias: false, beta: true, sum: false },
            Shape { m: 33, k: 50, n: 40, skip: vec![1, 33, 40], trans_b: false, bias: true, beta: false, sum: true },
            Shape { m: 1, k: 100, n: 24, skip: vec![1, 1, 24], trans_b: true, bias: true, beta: true, sum: true },
        ];
        for (i, shape) in shapes.iter().enumerate() {
            let inputs = shape.inputs(10 * i as u64);
            check(shape, &inputs, 1e-4, &format!("case {i}"));
            if has_f16() {
                let halves: Vec<_> = inputs.iter().map(|(n, t)| (*n, half(t))).collect();
                check(shape, &halves, 1e-2, &format!("case {i} in f16"));
            }
        }
    }

    /// The fused node on wgpu (tuned and startup kernels) against its parts on the CPU.
    fn check(shape: &Shape, inputs: &[(&'static str, Tensor)], tolerance: f32, what: &str) {
        let want = run(shape.model(inputs, false), Arc::new(onyx_cpu::CpuProvider::new()), inputs).unwrap();
        for (gpu, kernels) in [(provider(), "tuned"), (startup_provider(), "startup")] {
            let Some(gpu) = gpu else { return };
            let got = run(shape.model(inputs, true), gpu, inputs).unwrap();
            assert_eq!(got.len(), want.len());
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(g, w, tolerance, tolerance, &format!("{what} output {o} ({kernels} kernels)"));
            }
        }
    }

    #[test]
    fn a_skip_of_another_size_is_a_clear_error() {
        let Some(gpu) = provider() else { return };
        let shape = Shape { m: 6, k: 8, n: 5, skip: vec![6, 5], trans_b: false, bias: false, beta: false, sum: false };
        let mut inputs = shape.inputs(1);
        inputs[2].1 = rand(&[7, 5], -1.0, 1.0, 3);
        let e = run(shape.model(&inputs, true), gpu, &inputs).unwrap_err().to_string();
        assert!(e.contains("input 3") && e.contains("6 x 5 elements"), "{e}");
    }
}
