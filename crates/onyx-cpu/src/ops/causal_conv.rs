//! CausalConvWithState (opset 27): a depthwise causal 1-D convolution with a carried state.
//!
//! Per (batch, channel): the sequence `past_state ++ input` (zeros when no state is given; the
//! state holds the last `k − 1` positions) is convolved with the channel's `k` taps, so that
//! output `t` reads positions `t .. t + k` of it (`y[t] = b + Σ_j w[j] · s[t + j]`), optionally
//! followed by SiLU. The new state is the last `k − 1` positions of the sequence. Computed in
//! f64, written in the input's type.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("CausalConvWithState", build_causal_conv);
}

/// A CausalConvWithState node.
struct CausalConv {
    silu: bool,
    at: Location,
}

fn build_causal_conv(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let silu = match ctx.node.string_or("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => return Err(Error::attribute(&at, "activation", "silu, swish or none", other)),
    };
    Ok(Box::new(CausalConv { silu, at }))
}

impl CausalConv {
    fn compute(
        &self,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        past: Option<&TensorView<'_>>,
    ) -> Result<Vec<Value>> {
        let at = &self.at;
        let s = x.shape();
        if s.len() != 3 || compute_type(x.dtype()).is_none() {
            return Err(Error::input(
                at,
                0,
                "a float [batch, channels, length] tensor",
                format!("{} {s:?}", x.dtype()),
            ));
        }
        let (n, c, l) = (s[0], s[1], s[2]);
        let k = w.shape().get(2).copied().unwrap_or(0);
        if w.shape() != [c, 1, k] || k == 0 {
            return Err(Error::input(at, 1, format!("weights of shape [{c}, 1, k >= 1]"), format!("{:?}", w.shape())));
        }
        if bias.is_some_and(|b| b.shape() != [c]) {
            return Err(Error::input(
                at,
                2,
                format!("a bias of shape [{c}]"),
                format!("{:?}", bias.map(|b| b.shape().to_vec())),
            ));
        }
        let state = k - 1;
        if past.is_some_and(|p| p.shape() != [n, c, state]) {
            return Err(Error::input(
                at,
                3,
                format!("a past_state of shape [{n}, {c}, {state}]"),
                format!("{:?}", past.map(|p| p.shape().to_vec())),
            ));
        }
        for (i, t) in [(1, Some(w)), (2, bias), (3, past)] {
            if t.is_some_and(|t| t.dtype() != x.dtype()) {
                return Err(Error::input(at, i, x.dtype().name(), t.map_or("", |t| t.dtype().name())));
            }
        }
        let (xs, ws) = (float_slice::<f64>(x)?, float_slice::<f64>(w)?);
        let bs = bias.map(float_slice::<f64>).transpose()?;
        let ps = past.map(float_slice::<f64>).transpose()?;
        let mut y = Vec::with_capacity(n * c * l);
        let mut present = Vec::with_capacity(n * c * state);
        for row in 0..n * c {
            let ch = row % c;
            let mut seq: Vec<f64> =
                ps.as_ref().map_or_else(|| vec![0.0; state], |p| p[row * state..(row + 1) * state].to_vec());
            seq.extend_from_slice(&xs[row * l..(row + 1) * l]);
            let taps = &ws[ch * k..(ch + 1) * k];
            for t in 0..l {
                let mut v = bs.as_ref().map_or(0.0, |b| b[ch])
                    + taps.iter().zip(&seq[t..t + k]).map(|(a, b)| a * b).sum::<f64>();
                if self.silu {
                    v /= 1.0 + (-v).exp();
                }
                y.push(v);
            }
            present.extend_from_slice(&seq[seq.len() - state..]);
        }
        Ok(vec![float_output(x.dtype(), s.to_vec(), y)?, float_output(x.dtype(), vec![n, c, state], present)?])
    }
}

impl Kernel for CausalConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let w = util::input(inputs, 1, at)?;
        let bias = util::opt_input(inputs, 2, at)?;
        let past = util::opt_input(inputs, 3, at)?;
        self.compute(&x, &w, bias.as_ref(), past.as_ref()).map_err(|e| e.at(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
    use crate::ops::matmul::test_support::{build, node, run, string};
    use onyx_core::Tensor;

    #[test]
    fn causal_conv_matches_a_padded_convolution_and_chains() {
        let mut rng = fastrand::Rng::with_seed(27);
        let (n, c, l, k) = (2usize, 3usize, 7usize, 4usize);
        let f = |v: Vec<f32>| -> Vec<f64> { v.into_iter().map(f64::from).collect() };
        let x = f(random_f32(&mut rng, n * c * l, -1.0, 1.0));
        let w = f(random_f32(&mut rng, c * k, -1.0, 1.0));
        let b = f(random_f32(&mut rng, c, -1.0, 1.0));
        for silu in [false, true] {
            let attrs = vec![("activation", string(if silu { "silu" } else { "none" }))];
            let kern =
                build(build_causal_conv, &node("CausalConvWithState", &["x", "w", "b", "p"], 2, attrs), 27).unwrap();
            let go = |xs: &[f64], len: usize, past: Option<Tensor>| {
                let inputs = vec![
                    Some(tensor(&[n, c, len], xs.to_vec())),
                    Some(tensor(&[c, 1, k], w.clone())),
                    Some(tensor(&[c], b.clone())),
                    past,
                ];
                let out = run(kern.as_ref(), &inputs, 2).unwrap();
                (out[0].as_tensor().unwrap().clone(), out[1].as_tensor().unwrap().clone())
            };
            let (y, state) = go(&x, l, None);
            // y[t] = b + Σ_j w[j] x[t + j − (k − 1)], zero before the start.
            let mut want = vec![];
            for row in 0..n * c {
                for t in 0..l {
                    let mut v = b[row % c];
                    for j in 0..k {
                        let p = t as isize + j as isize - (k as isize - 1);
                        if p >= 0 {
                            v += w[(row % c) * k + j] * x[row * l + p as usize];
                        }
                    }
                    want.push(if silu { v / (1.0 + (-v).exp()) } else { v });
                }
            }
            assert_close(&floats(&y), &want, 1e-12, 1e-12, &format!("silu={silu}"));
            assert_eq!(state.shape(), &[n, c, k - 1]);
            // Running in two pieces with the carried state gives the same outputs.
            let split = 2;
            let first: Vec<f64> = (0..n * c).flat_map(|r| x[r * l..r * l + split].to_vec()).collect();
            let second: Vec<f64> = (0..n * c).flat_map(|r| x[r * l + split..(r + 1) * l].to_vec()).collect();
            let (y1, s1) = go(&first, split, None);
            let (y2, s2) = go(&second, l - split, Some(s1));
            let joined: Vec<f64> = (0..n * c)
                .flat_map(|r| {
                    let (a, b2) = (floats(&y1), floats(&y2));
                    [a[r * split..(r + 1) * split].to_vec(), b2[r * (l - split)..(r + 1) * (l - split)].to_vec()]
                        .concat()
                })
                .collect();
            assert_close(&joined, &want, 1e-12, 1e-12, "chained");
            assert_eq!(floats(&s2), floats(&state));
        }
        let kern = build(build_causal_conv, &node("CausalConvWithState", &["x", "w"], 2, vec![]), 27).unwrap();
        let e =
            run(kern.as_ref(), &[Some(tensor(&[1, 2, 3], vec![0f32; 6])), Some(tensor(&[3, 1, 2], vec![0f32; 6]))], 2)
                .unwrap_err()
                .to_string();
        assert!(e.contains("input 1"), "{e}");
        assert!(build(
            build_causal_conv,
            &node("CausalConvWithState", &["x"], 1, vec![("activation", string("relu"))]),
            27
        )
        .is_err());
    }
}
