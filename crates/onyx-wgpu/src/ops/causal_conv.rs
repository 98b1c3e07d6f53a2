//! CausalConvWithState (opset 27) on f32: a depthwise causal 1-D convolution with a carried
//! state, in two dispatches (the output, then the new state).
//!
//! Per (batch, channel) row, the sequence `past_state ++ input` (zeros for a missing state; the
//! state holds the last `k - 1` positions) is convolved with the channel's `k` taps: `y[t] = b +
//! sum_j w[j] s[t + j]`, optionally followed by SiLU. The new state is the last `k - 1`
//! positions of that sequence.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, opt_gpu_input, u32_of, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

/// Registers CausalConvWithState.
pub(crate) fn register(r: &mut Registry) {
    r.add("CausalConvWithState", supports_causal_conv, build_causal_conv);
}

/// f32 inputs and a known activation.
fn supports_causal_conv(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let f32_or_absent = |i| ctx.node.input(i).is_none() || input_dtype(ctx, i) == Some(DataType::Float);
    (0..4).all(f32_or_absent) && ctx.node.input(0).is_some() && ctx.node.input(1).is_some() && activation(ctx).is_ok()
}

/// Whether the node applies SiLU, from its `activation` attribute.
fn activation(ctx: &NodeContext<'_>) -> Result<bool> {
    match ctx.node.string_or("activation", "none")?.as_str() {
        "none" => Ok(false),
        "silu" | "swish" => Ok(true),
        other => Err(Error::attribute(&ctx.node.location(), "activation", "silu, swish or none", other)),
    }
}

/// WGSL `seq_at(row, pos)`: position `pos` of row `row`'s sequence `past ++ x`. Parameters:
/// length (p[3]), channels (p[4]), taps (p[5]).
fn seq_at(with_past: bool) -> String {
    let before = if with_past { "bitcast<f32>(load_past(row * state + pos))" } else { "0.0" };
    format!(
        "fn seq_at(row: u32, pos: u32) -> f32 {{
    let state = p[5] - 1u;
    if (pos < state) {{ return {before}; }}
    return bitcast<f32>(load_x(row * p[3] + pos - state));
}}
"
    )
}

/// The output kernel: `fetch(e)` is `y[row, t]`. Parameters after [`seq_at`]'s: silu (p[6]).
fn output_shader(with_bias: bool, with_past: bool) -> String {
    let bias = if with_bias { "bitcast<f32>(load_b(ch))" } else { "0.0" };
    let code = format!(
        "{}
fn fetch(e: u32) -> E {{
    let l = p[3];
    let k = p[5];
    let t = e % l;
    let row = e / l;
    let ch = row % p[4];
    var acc = {bias};
    for (var j = 0u; j < k; j++) {{
        acc += bitcast<f32>(load_w(ch * k + j)) * seq_at(row, t + j);
    }}
    if (p[6] == 1u) {{ acc = acc / (1.0 + exp(-acc)); }}
    return bitcast<u32>(acc);
}}
",
        seq_at(with_past)
    );
    let mut inputs = vec![("x", 4), ("w", 4)];
    if with_bias {
        inputs.push(("b", 4));
    }
    if with_past {
        inputs.push(("past", 4));
    }
    element_shader("", 4, &inputs, &code)
}

/// The state kernel: `fetch(e)` is `present[row, i]`, position `length + i` of the sequence.
fn state_shader(with_past: bool) -> String {
    let code = format!(
        "{}
fn fetch(e: u32) -> E {{
    let state = p[5] - 1u;
    return bitcast<u32>(seq_at(e / state, p[3] + e % state));
}}
",
        seq_at(with_past)
    );
    let inputs: &[(&str, u32)] = if with_past { &[("x", 4), ("past", 4)] } else { &[("x", 4)] };
    element_shader("", 4, inputs, &code)
}

/// A CausalConvWithState node: output kernels by (bias, past), state kernels by past.
struct CausalConv {
    silu: bool,
    /// Indexed by `2 * bias + past`.
    outputs: Vec<Arc<Pipeline>>,
    /// Indexed by `past`.
    states: Vec<Arc<Pipeline>>,
    at: Location,
}

fn build_causal_conv(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let silu = activation(ctx)?;
    let mut outputs = vec![];
    for (bias, past) in [(false, false), (false, true), (true, false), (true, true)] {
        let key = format!("causal_conv/f32/y/{}{}", bias as u8, past as u8);
        outputs.push(gpu.pipeline(&key, || output_shader(bias, past))?);
    }
    let mut states = vec![];
    for past in [false, true] {
        states.push(gpu.pipeline(&format!("causal_conv/f32/state/{}", past as u8), || state_shader(past))?);
    }
    Ok(Box::new(CausalConv { silu, outputs, states, at: ctx.node.location() }))
}

impl CausalConv {
    /// Checks the shapes; returns (batch, channels, length, taps).
    fn dims(
        &self,
        x: &GpuTensor<'_>,
        w: &GpuTensor<'_>,
        b: Option<&GpuTensor<'_>>,
        past: Option<&GpuTensor<'_>>,
    ) -> Result<[usize; 4]> {
        let at = &self.at;
        let &[n, c, l] = x.shape() else {
            return Err(Error::input(at, 0, "a [batch, channels, length] tensor", format!("{:?}", x.shape())));
        };
        let k = w.shape().get(2).copied().unwrap_or(0);
        if w.shape() != [c, 1, k] || k == 0 {
            return Err(Error::input(at, 1, format!("weights of shape [{c}, 1, k >= 1]"), format!("{:?}", w.shape())));
        }
        if let Some(b) = b.filter(|b| b.shape() != [c]) {
            return Err(Error::input(at, 2, format!("a bias of shape [{c}]"), format!("{:?}", b.shape())));
        }
        if let Some(p) = past.filter(|p| p.shape() != [n, c, k - 1]) {
            return Err(Error::input(
                at,
                3,
                format!("a past_state of shape [{n}, {c}, {}]", k - 1),
                format!("{:?}", p.shape()),
            ));
        }
        for (i, t) in [(0, Some(x)), (1, Some(w)), (2, b), (3, past)] {
            if let Some(t) = t.filter(|t| t.dtype() != DataType::Float) {
                return Err(Error::input(at, i, "float", t.dtype().name()));
            }
        }
        Ok([n, c, l, k])
    }
}

impl GpuOp for CausalConv {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let w = gpu_input(run, inputs, 1, at)?;
        let b = opt_gpu_input(run, inputs, 2, at)?;
        let past = opt_gpu_input(run, inputs, 3, at)?;
        let [n, c, l, k] = self.dims(&x, &w, b.as_ref(), past.as_ref())?;
        let y = run.alloc(DataType::Float, vec![n, c, l])?;
        let present = run.alloc(DataType::Float, vec![n, c, k - 1])?;
        let params = [u32_of(l, at)?, u32_of(c, at)?, u32_of(k, at)?, self.silu as u32];
        if !y.is_empty() {
            let mut buffers = vec![x.buffer, w.buffer];
            buffers.extend(b.as_ref().map(|b| b.buffer));
            buffers.extend(past.as_ref().map(|p| p.buffer));
            buffers.push(y.gpu()?);
            let pipeline = &self.outputs[2 * b.is_some() as usize + past.is_some() as usize];
            dispatch_elements(run, pipeline, Elements::new(4, y.len()), &params, &buffers, at)?;
        }
        if !present.is_empty() {
            let mut buffers = vec![x.buffer];
            buffers.extend(past.as_ref().map(|p| p.buffer));
            buffers.push(present.gpu()?);
            let pipeline = &self.states[past.is_some() as usize];
            dispatch_elements(run, pipeline, Elements::new(4, present.len()), &params, &buffers, at)?;
        }
        Ok(vec![Value::Tensor(y), Value::Tensor(present)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::testkit::{rand, string, Case};

    fn case(inputs: Vec<Option<Tensor>>, activation: &str) -> Case {
        let mut case =
            Case::new("CausalConvWithState", vec![]).attrs(vec![string("activation", activation)]).opset(27).outputs(2);
        case.inputs = inputs;
        case
    }

    #[test]
    fn causal_conv_matches_the_cpu() {
        for (s, &(n, c, l, k)) in
            [(2usize, 3usize, 7usize, 4usize), (1, 5, 1, 3), (3, 2, 9, 1), (1, 1, 2, 5)].iter().enumerate()
        {
            let seed = 90 + 10 * s as u64;
            let x = rand(&[n, c, l], -1.0, 1.0, seed);
            let w = rand(&[c, 1, k], -1.0, 1.0, seed + 1);
            let b = rand(&[c], -1.0, 1.0, seed + 2);
            let past = rand(&[n, c, k - 1], -1.0, 1.0, seed + 3);
            for activation in ["none", "silu", "swish"] {
                for (with_b, with_past) in [(false, false), (true, false), (false, true), (true, true)] {
                    let inputs = vec![
                        Some(x.clone()),
                        Some(w.clone()),
                        with_b.then(|| b.clone()),
                        with_past.then(|| past.clone()),
                    ];
                    case(inputs, activation).check(1e-5, 1e-6);
                }
            }
        }
    }

    #[test]
    fn causal_conv_rejects_mismatched_weights() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let inputs = vec![Some(rand(&[1, 2, 3], -1.0, 1.0, 1)), Some(rand(&[3, 1, 2], -1.0, 1.0, 2))];
        let e = case(inputs, "none").try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("weights") || e.contains("input 1"), "{e}");
    }
}
