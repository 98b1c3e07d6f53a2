//! com.microsoft SkipLayerNormalization(input, skip, gamma, beta?, bias?) and its RMS form
//! SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) -> (output, mean?, inv_std_var?,
//! input_skip_bias_sum?): one dispatch of the LayerNormalization (or RMSNormalization) row
//! kernel that normalizes `s = input + skip + bias` (skip broadcast over leading dims, bias
//! along the last) over the last axis as it reads it, and writes `s` (output 3). The
//! statistics outputs (1 and 2) are declined.

use super::rows::{SkipInputs, SkipSum};
use super::*;

/// f32 (or f16) inputs of one type; the statistics outputs unread.
pub(super) fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node.inputs.len();
    let same = (1..n).filter(|&i| ctx.node.input(i).is_some()).all(|i| input_dtype(ctx, i) == input_dtype(ctx, 0));
    let most = if is_simplified(ctx.node) { 4 } else { 5 };
    (3..=most).contains(&n)
        && !has_output(ctx, 1)
        && !has_output(ctx, 2)
        && ctx.node.float_or("epsilon", 1e-12).is_ok()
        && same
        && float_inputs(ctx, gpu, 0..n)
}

/// Whether the node is the RMS form (no beta; the bias is input 3).
fn is_simplified(node: &onyx_core::ir::Node) -> bool {
    node.op_type == "SkipSimplifiedLayerNormalization"
}

/// The shape of the row statistics of rows along the last dim of `shape` (the kernel's
/// `stat_shape`; SkipLayerNormalization never writes them).
pub(super) fn stats_shape(shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Some(last) = s.last_mut() {
        *last = 1;
    }
    s
}

/// The input's last dim (the rows' length) when the session knows it.
fn last_dim(ctx: &NodeContext<'_>) -> Option<usize> {
    known_dims(ctx, 0)?.last().copied().flatten()
}

/// A SkipLayerNormalization node.
struct SkipLayerNorm {
    norm: RowNorm,
    /// Input positions of beta (none in the RMS form) and of the bias.
    beta: Option<usize>,
    bias: usize,
    epsilon: f32,
    at: Location,
}

pub(super) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let (dtype, ty) = param_type(ctx, 0)?;
    let (form, beta_at, bias_at) =
        if is_simplified(node) { (Form::Rms, None, 3) } else { (Form::Centered, Some(3), 4) };
    let beta = beta_at.is_some_and(|i| node.input(i).is_some());
    let mut types = vec![(dtype, ty), (dtype, ty)];
    if beta {
        types.push((dtype, ty));
    }
    let skip = SkipSum { bias: node.input(bias_at).is_some(), partials: false };
    Ok(Box::new(SkipLayerNorm {
        norm: RowNorm::with_skip(gpu, &types, form, beta, false, Some(skip), last_dim(ctx))?,
        beta: beta_at,
        bias: bias_at,
        epsilon: node.float_or("epsilon", 1e-12)?,
        at: node.location(),
    }))
}

/// Input `i`, which must be a vector of the last dim `n` when present.
pub(super) fn vector<'r>(
    run: &GpuRun,
    inputs: &[Option<ValueRef<'r>>],
    i: usize,
    n: usize,
    at: &Location,
) -> Result<Option<GpuTensor<'r>>> {
    let Some(v) = opt_gpu_input(run, inputs, i, at)? else { return Ok(None) };
    if v.shape() != [n] {
        return Err(Error::input(
            at,
            i,
            format!("a 1-D vector of the input's last dim [{n}]"),
            format!("shape {:?}", v.shape()),
        ));
    }
    Ok(Some(v))
}

/// Whether `skip` has `input`'s shape or broadcasts to it over leading dims only.
fn skip_broadcasts(skip: &[usize], input: &[usize]) -> bool {
    let first = skip.iter().position(|&d| d != 1).unwrap_or(skip.len());
    !skip.is_empty() && skip.len() <= input.len() && skip.last() == input.last() && input.ends_with(&skip[first..])
}

impl GpuOp for SkipLayerNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let skip = gpu_input(run, inputs, 1, &self.at)?;
        let n = *x.shape().last().ok_or_else(|| Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"))?;
        if !skip_broadcasts(skip.shape(), x.shape()) {
            return Err(Error::input(
                &self.at,
                1,
                format!("the input's shape {:?} or one broadcast over its leading dims", x.shape()),
                format!("shape {:?}", skip.shape()),
            ));
        }
        let gamma =
            vector(run, inputs, 2, n, &self.at)?.ok_or_else(|| Error::input(&self.at, 2, "gamma", "nothing"))?;
        let beta = match self.beta {
            Some(i) => vector(run, inputs, i, n, &self.at)?,
            None => None,
        };
        let bias = vector(run, inputs, self.bias, n, &self.at)?;
        let map = ParamMap { div: 1, modulo: n };
        let stat_shape = stats_shape(x.shape());
        let beta = beta.map(|b| (b, map));
        let skip = SkipInputs { skip, bias, slices: 0 };
        let mut out =
            self.norm.record(run, x, Some(skip), n, (gamma, map), beta, self.epsilon, &stat_shape, &self.at)?;
        // Outputs are positional: 1 and 2 are never named (see `supports`), so the values in
        // their places are dropped unread; output 3 is the sum, which follows Y.
        let sum = out.pop().ok_or_else(|| Error::node(&self.at, "the row kernel returned no sum"))?;
        out.truncate(1);
        out.extend([sum.clone(), sum.clone(), sum]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use onyx_core::ir::{Graph, Model, Node};
    use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
    use onyx_core::{InputValue, Session, SessionOptions, Tensor, Value};

    use crate::testkit::{assert_close, float, provider, rand, Case};

    /// Runs SkipLayerNormalization with outputs 0 and 3 named (1 and 2 left out) on `provider`.
    fn run_with_sum(inputs: &[Tensor], provider: Arc<dyn onyx_core::ep::ExecutionProvider>) -> Vec<Tensor> {
        let mut graph = Graph::default();
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
        for (name, t) in names.iter().zip(inputs) {
            let shape = t.shape().iter().map(|&d| Dim::Fixed(d)).collect();
            let ty = ValueType::Tensor(TensorType { dtype: t.dtype(), shape: Some(shape) });
            graph.inputs.push(ValueInfo::new(name.clone(), ty));
        }
        let outputs = vec!["y".to_string(), String::new(), String::new(), "sum".to_string()];
        graph.nodes.push(Node {
            name: "n".into(),
            op_type: "SkipLayerNormalization".into(),
            domain: "com.microsoft".into(),
            inputs: names.clone(),
            outputs,
            ..Default::default()
        });
        for o in ["y", "sum"] {
            graph.outputs.push(ValueInfo::new(o.to_string(), ValueType::Unknown));
        }
        let mut model = Model { ir_version: 10, graph, ..Default::default() };
        model.opsets.insert(String::new(), 21);
        model.opsets.insert("com.microsoft".into(), 1);
        let options = SessionOptions { providers: vec![provider], ..Default::default() };
        let session = Session::new(model, options).unwrap();
        let feeds: Vec<(String, InputValue<'_>)> =
            names.iter().zip(inputs).map(|(n, t)| (n.clone(), InputValue::Value(Value::Tensor(t.clone())))).collect();
        session.run(feeds).unwrap().into_vec().into_iter().map(|(_, v)| v.as_tensor().unwrap().clone()).collect()
    }

    /// The normalized output and the sum output match the CPU EP's.
    fn check_sum_output(inputs: &[Tensor]) {
        let Some(gpu) = provider() else { return };
        let want = run_with_sum(inputs, Arc::new(onyx_cpu::CpuProvider::new()));
        let got = run_with_sum(inputs, gpu);
        assert_eq!(got.len(), 2);
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, 1e-4, 1e-4, &format!("SkipLayerNormalization output {o}"));
        }
    }

    #[test]
    fn skip_layer_norm_matches_the_cpu_contrib_kernel() {
        for (k, (shape, skip)) in
            [(&[2, 3, 67][..], &[2, 3, 67][..]), (&[3, 5, 257], &[5, 257]), (&[4, 1000], &[1, 1000])]
                .into_iter()
                .enumerate()
        {
            let n = *shape.last().unwrap();
            let s = k as u64 * 10;
            let (x, sk) = (rand(shape, -3.0, 3.0, s), rand(skip, -1.0, 1.0, s + 1));
            let (gamma, beta, bias) =
                (rand(&[n], 0.5, 2.0, s + 2), rand(&[n], -1.0, 1.0, s + 3), rand(&[n], -1.0, 1.0, s + 4));
            let eps = vec![float("epsilon", 1e-5)];
            let ms = "com.microsoft";
            Case::new("SkipLayerNormalization", vec![x.clone(), sk.clone(), gamma.clone()])
                .domain(ms)
                .check(1e-4, 1e-4);
            let all = vec![x.clone(), sk.clone(), gamma.clone(), beta.clone(), bias.clone()];
            Case::new("SkipLayerNormalization", all.clone()).domain(ms).attrs(eps.clone()).check(1e-4, 1e-4);
            check_sum_output(&all);
            // Beta without the skip bias: the sum is input + skip alone.
            let no_bias = vec![x.clone(), sk.clone(), gamma.clone(), beta.clone()];
            Case::new("SkipLayerNormalization", no_bias.clone()).domain(ms).check(1e-4, 1e-4);
            check_sum_output(&no_bias);
            // The RMS form, with and without its bias (input 3).
            for inputs in
                [vec![x.clone(), sk.clone(), gamma.clone()], vec![x.clone(), sk.clone(), gamma.clone(), bias.clone()]]
            {
                Case::new("SkipSimplifiedLayerNormalization", inputs).domain(ms).attrs(eps.clone()).check(1e-4, 1e-4);
            }
        }
    }
}
