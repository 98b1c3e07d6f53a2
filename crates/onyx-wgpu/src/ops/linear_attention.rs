//! LinearAttention (opset 27) on f32: recurrent linear attention over packed `[batch, seq, heads
//! * size]` inputs, with a `[batch, kv_heads, d_k, d_v]` state carried in `past_state` and
//! returned in `present_state`.
//!
//! Every step of the recurrence (decay `S <- exp(g) S`, delta `v <- beta (v - S^T k)`, write `S
//! <- S + k v^T`, read `o = scale q^T S`) works on each column of the state on its own, so one
//! dispatch runs one invocation per (batch, KV head, value column): it walks the tokens in order,
//! keeping its column of the state in the `present_state` output, and writes its column of
//! every query head's output in the group.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, grid, opt_gpu_input, u32_of, GpuOp, GpuTensor, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers LinearAttention.
pub(crate) fn register(r: &mut Registry) {
    r.add("LinearAttention", supports_linear_attention, build_linear_attention);
}

/// f32 inputs and valid attributes.
fn supports_linear_attention(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let f32_or_absent = |i| ctx.node.input(i).is_none() || input_dtype(ctx, i) == Some(DataType::Float);
    (0..6).all(f32_or_absent) && (0..3).all(|i| ctx.node.input(i).is_some()) && Attrs::decode(ctx).is_ok()
}

/// The recurrence a node runs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rule {
    /// The state decays by `exp(decay)` before each write.
    gating: bool,
    /// The written value is corrected by what the state already retrieves for the key.
    delta: bool,
}

/// A node's attributes.
struct Attrs {
    q_heads: usize,
    kv_heads: usize,
    /// `None`: `1 / sqrt(d_k)`.
    scale: Option<f32>,
    rule: Rule,
}

impl Attrs {
    fn decode(ctx: &NodeContext<'_>) -> Result<Attrs> {
        let node = ctx.node;
        let at = node.location();
        let heads = |name: &str| -> Result<usize> {
            match node.get_int(name)? {
                Some(v) if v > 0 && v < 1 << 24 => Ok(v as usize),
                Some(v) => Err(Error::attribute(&at, name, "a positive number of heads", v.to_string())),
                None => Err(Error::attribute(&at, name, "a number of heads (required)", "nothing")),
            }
        };
        let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
        if q_heads % kv_heads != 0 {
            return Err(Error::attribute(
                &at,
                "q_num_heads",
                format!("a multiple of kv_num_heads ({kv_heads})"),
                q_heads.to_string(),
            ));
        }
        let rule = match node.string_or("update_rule", "gated_delta")?.as_str() {
            "linear" => Rule { gating: false, delta: false },
            "gated" => Rule { gating: true, delta: false },
            "delta" => Rule { gating: false, delta: true },
            "gated_delta" => Rule { gating: true, delta: true },
            other => return Err(Error::attribute(&at, "update_rule", "linear, gated, delta or gated_delta", other)),
        };
        let scale = match node.get_float("scale")? {
            None => None,
            Some(s) if s == 0.0 => None,
            Some(s) if s.is_finite() => Some(s),
            Some(s) => return Err(Error::attribute(&at, "scale", "a finite scale", s.to_string())),
        };
        Ok(Attrs { q_heads, kv_heads, scale, rule })
    }
}

/// The shader for a rule, with or without a past state. Parameters: batch, seq, q_heads,
/// kv_heads, dk, dv, decay width (1 or dk), beta heads (1 or kv_heads), scale (f32 bits).
fn shader(rule: Rule, with_past: bool) -> String {
    let mut bindings = vec!["q", "k", "v"];
    if with_past {
        bindings.push("past");
    }
    if rule.gating {
        bindings.push("decay");
    }
    if rule.delta {
        bindings.push("beta");
    }
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    for (i, name) in bindings.iter().enumerate() {
        s += &format!("@group(0) @binding({}) var<storage, read> {name}: array<f32>;\n", i + 1);
    }
    s += &format!("@group(0) @binding({}) var<storage, read_write> y: array<f32>;\n", bindings.len() + 1);
    s += &format!("@group(0) @binding({}) var<storage, read_write> st: array<f32>;\n", bindings.len() + 2);
    s += FLAT_INDEX;
    let init = if with_past { "past[sb + r * dv]" } else { "0.0" };
    let gate = if rule.gating {
        "        let gw = p[6];
        let gb = (bt * kh + h) * gw;
        for (var r = 0u; r < dk; r++) {
            let f = exp(decay[gb + select(r, 0u, gw == 1u)]);
            st[sb + r * dv] *= f;
        }
"
    } else {
        ""
    };
    let delta = if rule.delta {
        "        let bw = p[7];
        let scale_v = beta[bt * bw + select(h, 0u, bw == 1u)];
        var got = 0.0;
        for (var r = 0u; r < dk; r++) { got += st[sb + r * dv] * k[kb + r]; }
        val = scale_v * (val - got);
"
    } else {
        ""
    };
    s += &format!(
        "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let idx = flat_index(gid, nwg);
    let seq = p[1];
    let qh = p[2];
    let kh = p[3];
    let dk = p[4];
    let dv = p[5];
    if (idx >= p[0] * kh * dv) {{ return; }}
    let scale = bitcast<f32>(p[8]);
    let j = idx % dv;
    let bh = idx / dv;
    let h = bh % kh;
    let b = bh / kh;
    let g = qh / kh;
    let sb = bh * dk * dv + j;
    for (var r = 0u; r < dk; r++) {{ st[sb + r * dv] = {init}; }}
    for (var t = 0u; t < seq; t++) {{
        let bt = b * seq + t;
        let kb = (bt * kh + h) * dk;
        var val = v[(bt * kh + h) * dv + j];
{gate}{delta}        for (var r = 0u; r < dk; r++) {{ st[sb + r * dv] += k[kb + r] * val; }}
        for (var m = 0u; m < g; m++) {{
            let hq = h * g + m;
            let qb = (bt * qh + hq) * dk;
            var o = 0.0;
            for (var r = 0u; r < dk; r++) {{ o += q[qb + r] * st[sb + r * dv]; }}
            y[(bt * qh + hq) * dv + j] = scale * o;
        }}
    }}
}}
"
    );
    s
}

/// A LinearAttention node with its kernels (with and without a past state).
struct LinearAttention {
    attrs: Attrs,
    fresh: Arc<Pipeline>,
    carried: Arc<Pipeline>,
    at: Location,
}

fn build_linear_attention(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let attrs = Attrs::decode(ctx)?;
    let rule = attrs.rule;
    let name = format!("linear_attention/f32/{}{}", rule.gating as u8, rule.delta as u8);
    let fresh = gpu.pipeline(&format!("{name}/0"), || shader(rule, false))?;
    let carried = gpu.pipeline(&format!("{name}/1"), || shader(rule, true))?;
    Ok(Box::new(LinearAttention { attrs, fresh, carried, at: ctx.node.location() }))
}

/// Sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    seq: usize,
    dk: usize,
    dv: usize,
    decay_width: usize,
    beta_heads: usize,
}

/// The inputs of one run.
struct Inputs<'r> {
    q: GpuTensor<'r>,
    k: GpuTensor<'r>,
    v: GpuTensor<'r>,
    past: Option<GpuTensor<'r>>,
    decay: Option<GpuTensor<'r>>,
    beta: Option<GpuTensor<'r>>,
}

impl LinearAttention {
    fn read_inputs<'r>(&self, run: &GpuRun, inputs: &[Option<ValueRef<'r>>]) -> Result<Inputs<'r>> {
        let at = &self.at;
        let x = Inputs {
            q: gpu_input(run, inputs, 0, at)?,
            k: gpu_input(run, inputs, 1, at)?,
            v: gpu_input(run, inputs, 2, at)?,
            past: opt_gpu_input(run, inputs, 3, at)?,
            decay: opt_gpu_input(run, inputs, 4, at)?,
            beta: opt_gpu_input(run, inputs, 5, at)?,
        };
        let all = [
            (0, Some(&x.q)),
            (1, Some(&x.k)),
            (2, Some(&x.v)),
            (3, x.past.as_ref()),
            (4, x.decay.as_ref()),
            (5, x.beta.as_ref()),
        ];
        for (i, t) in all {
            if let Some(t) = t.filter(|t| t.dtype() != DataType::Float) {
                return Err(Error::input(at, i, "float", t.dtype().name()));
            }
        }
        let Rule { gating, delta } = self.attrs.rule;
        if gating != x.decay.is_some() {
            let want = if gating {
                "a decay input (the update rule gates)"
            } else {
                "no decay input (the update rule does not gate)"
            };
            return Err(Error::input(at, 4, want, if x.decay.is_some() { "a tensor" } else { "no input" }));
        }
        if delta != x.beta.is_some() {
            let want = if delta {
                "a beta input (the update rule is a delta rule)"
            } else {
                "no beta input (the update rule is not a delta rule)"
            };
            return Err(Error::input(at, 5, want, if x.beta.is_some() { "a tensor" } else { "no input" }));
        }
        Ok(x)
    }

    /// Checks every shape against Q's and the head counts.
    fn dims(&self, x: &Inputs<'_>) -> Result<Dims> {
        let at = &self.at;
        let rank3 = |t: &GpuTensor<'_>, i: usize| -> Result<[usize; 3]> {
            <[usize; 3]>::try_from(t.shape()).map_err(|_| {
                Error::input(at, i, "a rank-3 tensor [batch, seq, heads * size]", format!("{:?}", t.shape()))
            })
        };
        let [batch, seq, qw] = rank3(&x.q, 0)?;
        let [kb, ks, kw] = rank3(&x.k, 1)?;
        let [vb, vs, vw] = rank3(&x.v, 2)?;
        let (qh, kh) = (self.attrs.q_heads, self.attrs.kv_heads);
        if qw % qh != 0 || qw == 0 {
            return Err(Error::input(
                at,
                0,
                format!("a last axis divisible by q_num_heads ({qh})"),
                format!("{:?}", x.q.shape()),
            ));
        }
        let dk = qw / qh;
        if (kb, ks, kw) != (batch, seq, kh * dk) {
            return Err(Error::input(
                at,
                1,
                format!("shape [{batch}, {seq}, {}]", kh * dk),
                format!("{:?}", x.k.shape()),
            ));
        }
        if (vb, vs) != (batch, seq) || vw % kh != 0 || vw == 0 {
            let want = format!("shape [{batch}, {seq}, kv_num_heads ({kh}) * v_head_size]");
            return Err(Error::input(at, 2, want, format!("{:?}", x.v.shape())));
        }
        let dv = vw / kh;
        let mut d = Dims { batch, seq, dk, dv, decay_width: 1, beta_heads: 1 };
        if let Some(g) = &x.decay {
            let [gb, gs, gw] = rank3(g, 4)?;
            if (gb, gs) != (batch, seq) || (gw != kh && gw != kh * dk) {
                return Err(Error::input(
                    at,
                    4,
                    format!("shape [{batch}, {seq}, {kh} or {}]", kh * dk),
                    format!("{:?}", g.shape()),
                ));
            }
            d.decay_width = gw / kh;
        }
        if let Some(b) = &x.beta {
            let [bb, bs, bw] = rank3(b, 5)?;
            if (bb, bs) != (batch, seq) || (bw != kh && bw != 1) {
                return Err(Error::input(
                    at,
                    5,
                    format!("shape [{batch}, {seq}, {kh} or 1]"),
                    format!("{:?}", b.shape()),
                ));
            }
            d.beta_heads = bw;
        }
        if let Some(p) = x.past.as_ref().filter(|p| p.shape() != [batch, kh, dk, dv]) {
            return Err(Error::input(at, 3, format!("shape [{batch}, {kh}, {dk}, {dv}]"), format!("{:?}", p.shape())));
        }
        Ok(d)
    }
}

impl GpuOp for LinearAttention {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = self.read_inputs(run, inputs)?;
        let d = self.dims(&x)?;
        let (qh, kh) = (self.attrs.q_heads, self.attrs.kv_heads);
        let y = run.alloc(DataType::Float, vec![d.batch, d.seq, qh * d.dv])?;
        let state = run.alloc(DataType::Float, vec![d.batch, kh, d.dk, d.dv])?;
        if state.is_empty() {
            return Ok(vec![Value::Tensor(y), Value::Tensor(state)]);
        }
        let scale = self.attrs.scale.unwrap_or(1.0 / (d.dk as f32).sqrt());
        let params = [
            u32_of(d.batch, at)?,
            u32_of(d.seq, at)?,
            u32_of(qh, at)?,
            u32_of(kh, at)?,
            u32_of(d.dk, at)?,
            u32_of(d.dv, at)?,
            u32_of(d.decay_width, at)?,
            u32_of(d.beta_heads, at)?,
            scale.to_bits(),
        ];
        u32_of(y.len().max(state.len()), at)?;
        let mut buffers = vec![x.q.buffer, x.k.buffer, x.v.buffer];
        buffers.extend(x.past.as_ref().map(|p| p.buffer));
        buffers.extend(x.decay.as_ref().map(|t| t.buffer));
        buffers.extend(x.beta.as_ref().map(|t| t.buffer));
        buffers.push(y.gpu()?);
        buffers.push(state.gpu()?);
        let pipeline = if x.past.is_some() { &self.carried } else { &self.fresh };
        run.dispatch(pipeline, &params, &buffers, grid(d.batch * kh * d.dv))?;
        Ok(vec![Value::Tensor(y), Value::Tensor(state)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::testkit::{float, int, rand, string, Case};

    /// A case of `rule` with `qh` query and `kh` KV heads; `decay_width` 1 or dk, beta per head
    /// or shared.
    #[allow(clippy::too_many_arguments)]
    fn case(
        rule: &str,
        [b, s, qh, kh, dk, dv]: [usize; 6],
        past: bool,
        decay_width: usize,
        beta_heads: usize,
        scale: Option<f32>,
        seed: u64,
    ) -> Case {
        let gating = rule.starts_with("gated");
        let delta = rule.ends_with("delta");
        let inputs: Vec<Option<Tensor>> = vec![
            Some(rand(&[b, s, qh * dk], -1.0, 1.0, seed)),
            Some(rand(&[b, s, kh * dk], -0.5, 0.5, seed + 1)),
            Some(rand(&[b, s, kh * dv], -1.0, 1.0, seed + 2)),
            past.then(|| rand(&[b, kh, dk, dv], -1.0, 1.0, seed + 3)),
            gating.then(|| rand(&[b, s, kh * decay_width], -1.0, 0.0, seed + 4)),
            delta.then(|| rand(&[b, s, beta_heads], 0.0, 1.0, seed + 5)),
        ];
        let mut attrs =
            vec![int("q_num_heads", qh as i64), int("kv_num_heads", kh as i64), string("update_rule", rule)];
        if let Some(sc) = scale {
            attrs.push(float("scale", sc));
        }
        let mut c = Case::new("LinearAttention", vec![]).attrs(attrs).opset(27).outputs(2);
        c.inputs = inputs;
        c
    }

    #[test]
    fn linear_attention_matches_the_cpu() {
        let mut seed = 200;
        for rule in ["linear", "gated", "delta", "gated_delta"] {
            for dims in [[2, 5, 4, 2, 3, 7], [1, 1, 3, 3, 5, 2], [3, 4, 2, 1, 6, 5]] {
                for past in [false, true] {
                    let [.., kh, dk, _] = dims;
                    for (decay_width, beta_heads) in [(1, kh), (dk, 1)] {
                        seed += 10;
                        case(rule, dims, past, decay_width, beta_heads, None, seed).check(1e-4, 1e-5);
                    }
                }
            }
            case(rule, [2, 3, 2, 2, 4, 4], true, 1, 2, Some(0.3), seed + 1).check(1e-4, 1e-5);
        }
    }

    #[test]
    fn linear_attention_rejects_a_missing_decay() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let mut c = case("gated", [1, 2, 2, 2, 3, 3], false, 1, 2, None, 1);
        c.inputs.truncate(3);
        let e = c.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("decay") || e.contains("input 4"), "{e}");
    }
}
