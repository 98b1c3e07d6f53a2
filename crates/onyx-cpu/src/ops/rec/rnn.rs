//! RNN, GRU and LSTM (every opset; forward, reverse and bidirectional; layouts 0 and 1;
//! sequence lengths, initial states, clip, peepholes, custom activations). Computed in f64:
//! the input projections of all steps are one matrix product per direction, the recurrent
//! projection one product per step.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::elementwise::FLOAT_TYPES;
use crate::ops::matmul::gemm::{gemm, MatMut, MatRef};
use crate::ops::matmul::real::{float_output, float_slice};
use crate::ops::util;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates per cell.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// Activation functions per direction.
    fn functions(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 2,
            Cell::Lstm => 3,
        }
    }
}

/// An activation function of the recurrent ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    /// Parses a name, taking its parameters from the `alphas` and `betas` lists in order (the
    /// defaults when they run out).
    fn parse(name: &str, alphas: &mut impl Iterator<Item = f64>, betas: &mut impl Iterator<Item = f64>) -> Option<Act> {
        let mut a = |d: f64| alphas.next().unwrap_or(d);
        Some(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(a(1.0), betas.next().unwrap_or(0.0)),
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => Act::ScaledTanh(a(1.0), betas.next().unwrap_or(1.0)),
            "hardsigmoid" => Act::HardSigmoid(a(0.2), betas.next().unwrap_or(0.5)),
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            _ => return None,
        })
    }

    #[inline]
    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => (1.0 + x.exp()).ln(),
        }
    }
}

struct Recurrent {
    cell: Cell,
    hidden: usize,
    /// Directions run: forward and/or reverse, in output order.
    reverse: Vec<bool>,
    /// Activations per direction.
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    batch_first: bool,
    linear_before_reset: bool,
    input_forget: bool,
    at: Location,
}

pub(super) fn build_rnn(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build(ctx, Cell::Rnn)
}

pub(super) fn build_gru(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build(ctx, Cell::Gru)
}

pub(super) fn build_lstm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build(ctx, Cell::Lstm)
}

fn build(ctx: &NodeContext<'_>, cell: Cell) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let hidden =
        node.get_int("hidden_size")?.ok_or_else(|| Error::attribute(&at, "hidden_size", "an int", "nothing"))?;
    let hidden = usize::try_from(hidden)
        .ok()
        .filter(|&h| h > 0)
        .ok_or_else(|| Error::attribute(&at, "hidden_size", "a positive size", hidden.to_string()))?;
    let reverse = match node.string_or("direction", "forward")?.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(Error::attribute(&at, "direction", "forward, reverse or bidirectional", other)),
    };
    let names: Vec<String> = match node.get_strings("activations")? {
        Some(v) => v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        None => {
            let d: &[&str] = match cell {
                Cell::Rnn => &["Tanh"],
                Cell::Gru => &["Sigmoid", "Tanh"],
                Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            };
            reverse.iter().flat_map(|_| d.iter().map(|s| s.to_string())).collect()
        }
    };
    let per = cell.functions();
    if names.len() != per * reverse.len() {
        return Err(Error::attribute(
            &at,
            "activations",
            format!("{} functions", per * reverse.len()),
            format!("{names:?}"),
        ));
    }
    let floats = |n: &str| -> Result<Vec<f64>> {
        Ok(node.get_floats(n)?.unwrap_or(&[]).iter().map(|&v| f64::from(v)).collect())
    };
    let (alphas, betas) = (floats("activation_alpha")?, floats("activation_beta")?);
    let (mut ai, mut bi) = (alphas.into_iter(), betas.into_iter());
    let mut all = vec![];
    for n in &names {
        all.push(
            Act::parse(n, &mut ai, &mut bi)
                .ok_or_else(|| Error::attribute(&at, "activations", "known activation functions", n.clone()))?,
        );
    }
    let acts = all.chunks(per).map(<[Act]>::to_vec).collect();
    let clip = node.get_float("clip")?.map(f64::from);
    if clip.is_some_and(|c| c.is_nan() || c < 0.0) {
        return Err(Error::attribute(&at, "clip", "a non-negative threshold", format!("{clip:?}")));
    }
    Ok(Box::new(Recurrent {
        cell,
        hidden,
        reverse,
        acts,
        clip,
        batch_first: node.int_or("layout", 0)? != 0,
        linear_before_reset: node.int_or("linear_before_reset", 0)? != 0,
        input_forget: node.int_or("input_forget", 0)? != 0,
        at,
    }))
}

/// `[a, b, c]` data with its first two axes swapped.
fn swap01(x: &[f64], a: usize, b: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for i in 0..a {
        for j in 0..b {
            out[(j * a + i) * c..(j * a + i + 1) * c].copy_from_slice(&x[(i * b + j) * c..(i * b + j + 1) * c]);
        }
    }
    out
}

impl Recurrent {
    /// Optional input `i` as f64 values with `len` elements.
    fn param(&self, inputs: &[Option<ValueRef<'_>>], i: usize, len: usize, what: &str) -> Result<Option<Vec<f64>>> {
        let Some(v) = util::opt_input(inputs, i, &self.at)? else { return Ok(None) };
        util::expect_dtype(&v, FLOAT_TYPES, i, &self.at)?;
        if v.len() != len {
            return Err(Error::input(
                &self.at,
                i,
                format!("{what} of {len} elements"),
                format!("shape {:?}", v.shape()),
            ));
        }
        Ok(Some(float_slice::<f64>(&v)?.into_owned()))
    }

    /// A state input (`initial_h`, `initial_c`) as `[dirs, batch, hidden]`.
    fn state(&self, inputs: &[Option<ValueRef<'_>>], i: usize, dirs: usize, batch: usize) -> Result<Vec<f64>> {
        let h = self.hidden;
        Ok(match self.param(inputs, i, dirs * batch * h, "an initial state")? {
            Some(v) if self.batch_first => swap01(&v, batch, dirs, h),
            Some(v) => v,
            None => vec![0.0; dirs * batch * h],
        })
    }
}

impl Kernel for Recurrent {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x: TensorView<'_> = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, FLOAT_TYPES, 0, at)?;
        let &[d0, d1, input] = x.shape() else {
            return Err(Error::input(at, 0, "X of rank 3", format!("shape {:?}", x.shape())));
        };
        let (seq, batch) = if self.batch_first { (d1, d0) } else { (d0, d1) };
        let (h, g, dirs) = (self.hidden, self.cell.gates(), self.reverse.len());
        let mut xs = float_slice::<f64>(&x)?.into_owned();
        if self.batch_first {
            xs = swap01(&xs, batch, seq, input);
        }
        let w = self
            .param(inputs, 1, dirs * g * h * input, &format!("W [{dirs}, {}, {input}]", g * h))?
            .ok_or_else(|| Error::input(at, 1, "W", "no input"))?;
        let r = self
            .param(inputs, 2, dirs * g * h * h, &format!("R [{dirs}, {}, {h}]", g * h))?
            .ok_or_else(|| Error::input(at, 2, "R", "no input"))?;
        let b = self
            .param(inputs, 3, dirs * 2 * g * h, &format!("B [{dirs}, {}]", 2 * g * h))?
            .unwrap_or_else(|| vec![0.0; dirs * 2 * g * h]);
        let lens: Vec<usize> = match util::opt_input(inputs, 4, at)? {
            None => vec![seq; batch],
            Some(l) => {
                let v = crate::ops::layout::elems::int_values(&l, 4, &[DataType::Int32, DataType::Int64], at)?;
                if v.len() != batch || v.iter().any(|&n| n < 0 || n as usize > seq) {
                    return Err(Error::input(
                        at,
                        4,
                        format!("{batch} sequence lengths in [0, {seq}]"),
                        format!("{v:?}"),
                    ));
                }
                v.into_iter().map(|n| n as usize).collect()
            }
        };
        let mut hs = self.state(inputs, 5, dirs, batch)?;
        let lstm = self.cell == Cell::Lstm;
        let mut cs = if lstm { self.state(inputs, 6, dirs, batch)? } else { vec![] };
        let p = if lstm { self.param(inputs, 7, dirs * 3 * h, &format!("P [{dirs}, {}]", 3 * h))? } else { None };
        let mut y = vec![0.0; seq * dirs * batch * h];
        let gh = g * h;
        for (d, &rev) in self.reverse.iter().enumerate() {
            let wd = &w[d * gh * input..(d + 1) * gh * input];
            let rd = &r[d * gh * h..(d + 1) * gh * h];
            let (wb, rb) = (&b[d * 2 * gh..d * 2 * gh + gh], &b[d * 2 * gh + gh..(d + 1) * 2 * gh]);
            let acts = &self.acts[d];
            // Input projections of every step: [seq * batch, g * h].
            let mut xw = vec![0.0; seq * batch * gh];
            gemm(
                1.0,
                MatRef::row_major(&xs, seq * batch, input),
                MatRef::row_major(wd, gh, input).t(),
                0.0,
                MatMut::row_major(&mut xw, seq * batch, gh),
            )?;
            let hd = &mut hs[d * batch * h..(d + 1) * batch * h];
            let mut cd = if lstm { cs[d * batch * h..(d + 1) * batch * h].to_vec() } else { vec![] };
            let mut hr = vec![0.0; batch * gh];
            for s in 0..seq {
                gemm(
                    1.0,
                    MatRef::row_major(hd, batch, h),
                    MatRef::row_major(rd, gh, h).t(),
                    0.0,
                    MatMut::row_major(&mut hr, batch, gh),
                )?;
                for bi in 0..batch {
                    if s >= lens[bi] {
                        continue;
                    }
                    let t = if rev { lens[bi] - 1 - s } else { s };
                    let xg = &xw[(t * batch + bi) * gh..(t * batch + bi + 1) * gh];
                    let rg = &hr[bi * gh..(bi + 1) * gh];
                    let clip = |v: f64| self.clip.map_or(v, |c| v.clamp(-c, c));
                    let hrow = &mut hd[bi * h..(bi + 1) * h];
                    match self.cell {
                        Cell::Rnn => {
                            for j in 0..h {
                                hrow[j] = acts[0].apply(clip(xg[j] + rg[j] + wb[j] + rb[j]));
                            }
                        }
                        Cell::Gru => {
                            // Gate order z, r, h.
                            let prev = hrow.to_vec();
                            let mut rh = vec![0.0; h];
                            let mut rgate = vec![0.0; h];
                            for j in 0..h {
                                rgate[j] = acts[0].apply(clip(xg[h + j] + rg[h + j] + wb[h + j] + rb[h + j]));
                                rh[j] = rgate[j] * prev[j];
                            }
                            // (r * H) R_h^T when the reset comes before the product.
                            let rdh = &rd[2 * h * h..3 * h * h];
                            for j in 0..h {
                                let z = acts[0].apply(clip(xg[j] + rg[j] + wb[j] + rb[j]));
                                let rec = if self.linear_before_reset {
                                    rgate[j] * (rg[2 * h + j] + rb[2 * h + j])
                                } else {
                                    (0..h).map(|k| rh[k] * rdh[j * h + k]).sum::<f64>() + rb[2 * h + j]
                                };
                                let cand = acts[1].apply(clip(xg[2 * h + j] + wb[2 * h + j] + rec));
                                hrow[j] = (1.0 - z) * cand + z * prev[j];
                            }
                        }
                        Cell::Lstm => {
                            // Gate order i, o, f, c; peepholes i, o, f.
                            let crow = &mut cd[bi * h..(bi + 1) * h];
                            let pd = p.as_ref().map(|p| &p[d * 3 * h..(d + 1) * 3 * h]);
                            let peep = |k: usize, j: usize| pd.map_or(0.0, |p| p[k * h + j]);
                            for j in 0..h {
                                let pre = |k: usize| xg[k * h + j] + rg[k * h + j] + wb[k * h + j] + rb[k * h + j];
                                let c_prev = crow[j];
                                let i_g = acts[0].apply(clip(pre(0) + peep(0, j) * c_prev));
                                let f_g = if self.input_forget {
                                    1.0 - i_g
                                } else {
                                    acts[0].apply(clip(pre(2) + peep(2, j) * c_prev))
                                };
                                let cand = acts[1].apply(clip(pre(3)));
                                let c = f_g * c_prev + i_g * cand;
                                let o_g = acts[0].apply(clip(pre(1) + peep(1, j) * c));
                                crow[j] = c;
                                hrow[j] = o_g * acts[2].apply(c);
                            }
                        }
                    }
                    y[((t * dirs + d) * batch + bi) * h..((t * dirs + d) * batch + bi + 1) * h].copy_from_slice(hrow);
                }
            }
            if lstm {
                cs[d * batch * h..(d + 1) * batch * h].copy_from_slice(&cd);
            }
        }
        let dtype = x.dtype();
        let (y, y_shape, st_shape) = if self.batch_first {
            // [seq, dirs, batch, h] -> [batch, seq, dirs, h]; states [dirs, batch, h] -> [batch, dirs, h].
            let mut out = vec![0.0; y.len()];
            for t in 0..seq {
                for d in 0..dirs {
                    for bi in 0..batch {
                        let src = ((t * dirs + d) * batch + bi) * h;
                        let dst = ((bi * seq + t) * dirs + d) * h;
                        out[dst..dst + h].copy_from_slice(&y[src..src + h]);
                    }
                }
            }
            hs = swap01(&hs, dirs, batch, h);
            if lstm {
                cs = swap01(&cs, dirs, batch, h);
            }
            (out, vec![batch, seq, dirs, h], vec![batch, dirs, h])
        } else {
            (y, vec![seq, dirs, batch, h], vec![dirs, batch, h])
        };
        let mut outs = vec![float_output(dtype, y_shape, y)?, float_output(dtype, st_shape.clone(), hs)?];
        if lstm {
            outs.push(float_output(dtype, st_shape, cs)?);
        }
        Ok(outs)
    }
}
