//! Attention (opset 23 and 24): scaled dot-product attention over 3-D (`[batch, seq,
//! heads * head_size]`) or 4-D (`[batch, heads, seq, head_size]`) inputs, with grouped-query
//! heads, an optional boolean or additive mask, causal masking, a KV cache (past/present),
//! padded KV lengths (`nonpad_kv_seqlen`, opset 24), a softcap, and the optional
//! `qk_matmul_output` at one of four points.
//!
//! Per (batch, query head): `S = scale · Q Kᵀ` (one matrix product), `S = c · tanh(S / c)` when
//! `softcap = c > 0`, `S += bias` (mask, causal and padding), `P = softmax(S)` along the keys,
//! `Y = P V`. Query head `h` reads KV head `h / (q_heads / kv_heads)`. Computed in f32 (f64 for
//! double inputs). A query row whose every key is masked out gets all-zero weights (a zero
//! output row) rather than NaNs.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};
use rayon::prelude::*;

use super::elementwise::exp_f32;
use super::matmul::gemm::{gemm_serial, MatMut, MatRef};
use super::matmul::real::{compute_type, float_output, float_slice, Real};
use super::reduce::fold_lanes;
use super::util;
use crate::Registry;

mod gqa;
mod mha;
#[cfg(test)]
mod tests;
mod tiled;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Attention", build_attention);
    // The optimizer's fused attention in models below opset 23: the same contract.
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "Attention", build_attention);
    r.add_in(onyx_core::ir::MS_DOMAIN, "GroupQueryAttention", gqa::build);
    r.add_in(onyx_core::ir::MS_DOMAIN, "MultiHeadAttention", mha::build_mha);
    r.add_in(onyx_core::ir::MS_DOMAIN, "Attention", mha::build_packed);
}

/// Where `qk_matmul_output` is taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum QkMode {
    /// The scaled product `scale · Q Kᵀ`.
    Product,
    /// After the softcap.
    Softcapped,
    /// After the softcap and the mask.
    Masked,
    /// After the softmax.
    Softmax,
}

/// An Attention node with its attributes decoded.
struct AttentionOp {
    is_causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    mode: QkMode,
    scale: Option<f64>,
    softcap: f64,
    at: Location,
}

fn positive_attr(ctx: &NodeContext<'_>, name: &str) -> Result<Option<usize>> {
    let at = ctx.node.location();
    match ctx.node.get_int(name)? {
        None => Ok(None),
        Some(v) if v > 0 => Ok(Some(v as usize)),
        Some(v) => Err(Error::attribute(&at, name, "a positive number of heads", v.to_string())),
    }
}

fn build_attention(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let mode = match node.int_or("qk_matmul_output_mode", 0)? {
        0 => QkMode::Product,
        1 => QkMode::Softcapped,
        2 => QkMode::Masked,
        3 => QkMode::Softmax,
        m => return Err(Error::attribute(&at, "qk_matmul_output_mode", "0, 1, 2 or 3", m.to_string())),
    };
    let softcap = node.float_or("softcap", 0.0)? as f64;
    if !(softcap >= 0.0 && softcap.is_finite()) {
        return Err(Error::attribute(&at, "softcap", "a finite value >= 0", softcap.to_string()));
    }
    let scale = node.get_float("scale")?.map(f64::from);
    if let Some(s) = scale {
        if !s.is_finite() {
            return Err(Error::attribute(&at, "scale", "a finite value", s.to_string()));
        }
    }
    if let Some(p) = node.get_int("softmax_precision")? {
        let ok = DataType::from_onnx(p as i32).is_some_and(|d| compute_type(d).is_some());
        if !ok {
            return Err(Error::attribute(
                &at,
                "softmax_precision",
                "a float type code (1, 10, 11 or 16)",
                p.to_string(),
            ));
        }
    }
    let is_causal = match node.int_or("is_causal", 0)? {
        0 => false,
        1 => true,
        v => return Err(Error::attribute(&at, "is_causal", "0 or 1", v.to_string())),
    };
    Ok(Box::new(AttentionOp {
        is_causal,
        q_heads: positive_attr(ctx, "q_num_heads")?,
        kv_heads: positive_attr(ctx, "kv_num_heads")?,
        mode,
        scale,
        softcap,
        at,
    }))
}

/// Sizes of one Attention call, all in the 4-D layout.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dims {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_seq: usize,
    /// Keys in the K/V inputs (without the past).
    kv_seq: usize,
    /// Keys in the past.
    past: usize,
    head: usize,
    v_head: usize,
    /// Whether Q, K, V are 3-D (and Y is too).
    three_d: bool,
}

impl Dims {
    /// Keys attended to: past plus new.
    fn total(&self) -> usize {
        self.past + self.kv_seq
    }
}

/// A 3-D `[batch, seq, heads * size]` or 4-D `[batch, heads, seq, size]` operand seen as
/// `(batch, heads, seq, size)`.
fn split_heads(shape: &[usize], heads: Option<usize>, i: usize, name: &str, at: &Location) -> Result<[usize; 4]> {
    match (shape.len(), heads) {
        (4, h) => {
            if h.is_some_and(|h| h != shape[1]) {
                return Err(Error::input(
                    at,
                    i,
                    format!("{name} with {} heads (the attribute)", h.unwrap_or(0)),
                    format!("{shape:?}"),
                ));
            }
            Ok([shape[0], shape[1], shape[2], shape[3]])
        }
        (3, Some(h)) if shape[2].is_multiple_of(h) => Ok([shape[0], h, shape[1], shape[2] / h]),
        (3, Some(h)) => Err(Error::input(
            at,
            i,
            format!("{name} whose last dimension divides into {h} heads"),
            format!("{shape:?}"),
        )),
        (3, None) => Err(Error::node(
            at,
            format!("3-D inputs need the q_num_heads and kv_num_heads attributes ({name} is {shape:?})"),
        )),
        _ => Err(Error::input(at, i, format!("{name} of rank 3 or 4"), format!("{shape:?}"))),
    }
}

impl AttentionOp {
    /// Checks the shapes of Q, K, V and the past, and returns the sizes.
    fn dims(&self, q: &[usize], k: &[usize], v: &[usize], past: Option<(&[usize], &[usize])>) -> Result<Dims> {
        let at = &self.at;
        if q.len() != k.len() || q.len() != v.len() {
            return Err(Error::node(at, format!("Q, K and V must have the same rank, found {q:?}, {k:?}, {v:?}")));
        }
        let [batch, q_heads, q_seq, head] = split_heads(q, self.q_heads, 0, "Q", at)?;
        let [kb, kv_heads, kv_seq, k_head] = split_heads(k, self.kv_heads, 1, "K", at)?;
        let [vb, v_heads, v_seq, v_head] = split_heads(v, self.kv_heads, 2, "V", at)?;
        if kb != batch || vb != batch || v_heads != kv_heads || v_seq != kv_seq || k_head != head {
            return Err(Error::node(
                at,
                format!("Q {q:?}, K {k:?} and V {v:?} do not agree in batch, heads, sequence or head size"),
            ));
        }
        if kv_heads == 0 || q_heads % kv_heads != 0 {
            return Err(Error::node(
                at,
                format!("{q_heads} query heads are not a multiple of {kv_heads} key/value heads"),
            ));
        }
        let mut past_len = 0;
        if let Some((pk, pv)) = past {
            let ok = pk.len() == 4
                && pv.len() == 4
                && pk[..2] == [batch, kv_heads]
                && pv[..2] == [batch, kv_heads]
                && pk[2] == pv[2]
                && pk[3] == head
                && pv[3] == v_head;
            if !ok {
                return Err(Error::node(
                    at,
                    format!("past_key {pk:?} and past_value {pv:?} must be [{batch}, {kv_heads}, past, {head}] and [{batch}, {kv_heads}, past, {v_head}]"),
                ));
            }
            past_len = pk[2];
        }
        Ok(Dims { batch, q_heads, kv_heads, q_seq, kv_seq, past: past_len, head, v_head, three_d: q.len() == 3 })
    }
}

/// Reads a float operand as `T` in the `[batch, heads, seq, size]` layout.
fn to_4d<T: Real>(x: &TensorView<'_>, [b, h, s, d]: [usize; 4]) -> Result<Vec<T>> {
    let data = float_slice::<T>(x)?;
    if x.rank() == 4 {
        return Ok(data.into_owned());
    }
    let mut out = Vec::with_capacity(data.len());
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let start = (bi * s + si) * h * d + hi * d;
                out.extend_from_slice(&data[start..start + d]);
            }
        }
    }
    Ok(out)
}

/// Concatenates `past` (`[b, h, p, d]`) and `new` (`[b, h, s, d]`) along the sequence.
fn concat_seq<T: Copy>(past: &[T], new: &[T], bh: usize, p: usize, s: usize, d: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(past.len() + new.len());
    for i in 0..bh {
        out.extend_from_slice(&past[i * p * d..(i + 1) * p * d]);
        out.extend_from_slice(&new[i * s * d..(i + 1) * s * d]);
    }
    out
}

/// The additive mask input broadcast against `[batch, q_heads, q_seq, mask_len]`, with
/// `mask_len <= total`; keys past `mask_len` are masked out.
struct Mask<T> {
    values: Vec<T>,
    /// Strides of the four dimensions (0 where the mask repeats).
    strides: [usize; 4],
    len: usize,
}

impl<T: Real> Mask<T> {
    fn new(m: &TensorView<'_>, d: &Dims, at: &Location) -> Result<Self> {
        let shape = m.shape();
        let total = d.total();
        let bad = || {
            Error::input(
                at,
                3,
                format!("attn_mask broadcastable to [{}, {}, {}, <= {total}]", d.batch, d.q_heads, d.q_seq),
                format!("{shape:?}"),
            )
        };
        if shape.is_empty() || shape.len() > 4 || shape[shape.len() - 1] > total {
            return Err(bad());
        }
        let full = [d.batch, d.q_heads, d.q_seq, shape[shape.len() - 1]];
        let mut dims = [1usize; 4];
        dims[4 - shape.len()..].copy_from_slice(shape);
        let dense = util::strides(&dims);
        let mut strides = [0usize; 4];
        for a in 0..4 {
            if dims[a] == full[a] {
                strides[a] = if dims[a] == 1 { 0 } else { dense[a] };
            } else if dims[a] != 1 {
                return Err(bad());
            }
        }
        let values = match m.dtype() {
            DataType::Bool => {
                m.bytes()?.iter().map(|&b| if b != 0 { T::ZERO } else { T::from_f64(f64::NEG_INFINITY) }).collect()
            }
            dt if compute_type(dt).is_some() => float_slice::<T>(m)?.into_owned(),
            other => return Err(Error::input(at, 3, "a bool or float attn_mask", other.name())),
        };
        Ok(Mask { values, strides, len: full[3] })
    }

    /// Adds the mask row of (batch `b`, head `h`, query `i`) to `row` (length `total`).
    fn add_to(&self, row: &mut [T], b: usize, h: usize, i: usize) {
        let [sb, sh, sq, sk] = self.strides;
        let base = b * sb + h * sh + i * sq;
        let ninf = T::from_f64(f64::NEG_INFINITY);
        for (j, s) in row.iter_mut().enumerate() {
            *s = if j < self.len { *s + self.values[base + j * sk] } else { ninf };
        }
    }
}

/// Everything one (batch, head) computation reads.
struct Operands<'a, T> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    mask: Option<&'a Mask<T>>,
    /// Valid keys per batch entry (`nonpad_kv_seqlen`).
    nonpad: Option<&'a [usize]>,
}

impl AttentionOp {
    /// Computes one (batch `b`, query head `h`): returns Y's `[q_seq, v_head]` block and, when
    /// `keep_qk`, the `[q_seq, total]` block of `qk_matmul_output`.
    fn head<T: Real>(
        &self,
        d: &Dims,
        ops: &Operands<'_, T>,
        b: usize,
        h: usize,
        keep_qk: bool,
    ) -> Result<(Vec<T>, Vec<T>)> {
        let total = d.total();
        let kvh = h / (d.q_heads / d.kv_heads);
        let q = &ops.q[(b * d.q_heads + h) * d.q_seq * d.head..][..d.q_seq * d.head];
        let k = &ops.k[(b * d.kv_heads + kvh) * total * d.head..][..total * d.head];
        let v = &ops.v[(b * d.kv_heads + kvh) * total * d.v_head..][..total * d.v_head];
        let scale = self.scale.unwrap_or(1.0 / (d.head as f64).sqrt());
        let mut s = vec![T::ZERO; d.q_seq * total];
        let qm = MatRef::row_major(q, d.q_seq, d.head);
        let km = MatRef::row_major(k, total, d.head).t();
        gemm_serial(T::from_f64(scale), qm, km, T::ZERO, MatMut::row_major(&mut s, d.q_seq, total))?;
        let mut qk = Vec::new();
        if keep_qk && self.mode == QkMode::Product {
            qk = s.clone();
        }
        if self.softcap > 0.0 {
            let c = self.softcap;
            s.iter_mut().for_each(|x| *x = T::from_f64(c * (x.to_f64() / c).tanh()));
        }
        if keep_qk && self.mode == QkMode::Softcapped {
            qk = s.clone();
        }
        let ninf = T::from_f64(f64::NEG_INFINITY);
        let valid = ops.nonpad.map_or(total, |n| n[b]);
        for (i, row) in s.chunks_mut(total.max(1)).enumerate().take(d.q_seq) {
            if let Some(m) = ops.mask {
                m.add_to(row, b, h, i);
            }
            // Causal: query i (at absolute position past + i) sees keys up to past + i.
            let last = if self.is_causal { (d.past + i + 1).min(total) } else { total };
            row[last.min(valid)..].iter_mut().for_each(|x| *x = ninf);
        }
        if keep_qk && self.mode == QkMode::Masked {
            qk = s.clone();
        }
        s.chunks_mut(total.max(1)).for_each(softmax_row);
        if keep_qk && self.mode == QkMode::Softmax {
            qk = s.clone();
        }
        let mut y = vec![T::ZERO; d.q_seq * d.v_head];
        let pm = MatRef::row_major(&s, d.q_seq, total);
        let vm = MatRef::row_major(v, total, d.v_head);
        gemm_serial(T::ONE, pm, vm, T::ZERO, MatMut::row_major(&mut y, d.q_seq, d.v_head))?;
        Ok((y, qk))
    }
}

/// Softmax of one row in place; a row with no finite score becomes all zeros. f32 rows take the
/// vectorized path ([`SoftmaxF32`]), f64 rows are computed with the library's exp.
fn softmax_row<T: Real>(row: &mut [T]) {
    if T::DTYPE == DataType::Float {
        if let Ok(r) = bytemuck::try_cast_slice_mut::<T, f32>(row) {
            return util::simd_body(SoftmaxF32(r));
        }
    }
    let m = row.iter().map(|x| x.to_f64()).fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        row.iter_mut().for_each(|x| *x = T::ZERO);
        return;
    }
    let mut sum = 0.0;
    for x in row.iter_mut() {
        let e = (x.to_f64() - m).exp();
        sum += e;
        *x = T::from_f64(e);
    }
    let inv = T::from_f64(1.0 / sum);
    row.iter_mut().for_each(|x| *x *= inv);
}

/// An f32 score row for [`softmax_row`], compiled for the CPU's SIMD level: maximum and sum
/// folded in lanes, e^x by the branch-free [`exp_f32`].
struct SoftmaxF32<'a>(&'a mut [f32]);

impl util::SimdBody for SoftmaxF32<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let row = self.0;
        // NaN scores are skipped by the maximum, as f64::max does in the f64 path.
        let m = fold_lanes(row, f32::NEG_INFINITY, &|v| v, &|a, b| if b > a { b } else { a });
        if m == f32::NEG_INFINITY {
            row.fill(0.0);
            return;
        }
        for x in row.iter_mut() {
            *x = exp_f32(*x - m);
        }
        let inv = 1.0 / fold_lanes(row, 0.0, &|v| v, &|a, b| a + b);
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
}

/// The inputs of one run.
struct Inputs<'r> {
    q: TensorView<'r>,
    k: TensorView<'r>,
    v: TensorView<'r>,
    mask: Option<TensorView<'r>>,
    past: Option<(TensorView<'r>, TensorView<'r>)>,
    nonpad: Option<TensorView<'r>>,
}

impl AttentionOp {
    fn read_inputs<'r>(&self, inputs: &[Option<ValueRef<'r>>]) -> Result<Inputs<'r>> {
        let at = &self.at;
        let q = util::input(inputs, 0, at)?;
        let k = util::input(inputs, 1, at)?;
        let v = util::input(inputs, 2, at)?;
        if compute_type(q.dtype()).is_none() {
            return Err(Error::input(at, 0, "a float tensor", q.dtype().name()));
        }
        let past = match (util::opt_input(inputs, 4, at)?, util::opt_input(inputs, 5, at)?) {
            (Some(pk), Some(pv)) => Some((pk, pv)),
            (None, None) => None,
            _ => return Err(Error::node(at, "past_key and past_value must be given together")),
        };
        for (i, t) in [(1, &k), (2, &v)].into_iter().chain(past.iter().flat_map(|(a, b)| [(4, a), (5, b)])) {
            if t.dtype() != q.dtype() {
                return Err(Error::input(at, i, q.dtype().name(), t.dtype().name()));
            }
        }
        let nonpad = util::opt_input(inputs, 6, at)?;
        Ok(Inputs { q, k, v, mask: util::opt_input(inputs, 3, at)?, past, nonpad })
    }

    /// Valid key counts per batch entry from `nonpad_kv_seqlen`.
    fn nonpad(&self, t: &TensorView<'_>, d: &Dims) -> Result<Vec<usize>> {
        let at = &self.at;
        if t.shape() != [d.batch] || !matches!(t.dtype(), DataType::Int64 | DataType::Int32) {
            return Err(Error::input(
                at,
                6,
                format!("an int64 nonpad_kv_seqlen of shape [{}]", d.batch),
                format!("{} {:?}", t.dtype(), t.shape()),
            ));
        }
        util::to_i64(t)?
            .into_iter()
            .map(|n| {
                usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= d.total())
                    .ok_or_else(|| Error::input(at, 6, format!("lengths in 0..={}", d.total()), n.to_string()))
            })
            .collect()
    }

    fn compute<T: Real>(&self, x: &Inputs<'_>, wanted: &[bool]) -> Result<Vec<Value>> {
        let d =
            self.dims(x.q.shape(), x.k.shape(), x.v.shape(), x.past.as_ref().map(|(a, b)| (a.shape(), b.shape())))?;
        if let Some(y) = tiled::attention(self, x, &d, wanted) {
            return y;
        }
        let q = to_4d::<T>(&x.q, [d.batch, d.q_heads, d.q_seq, d.head])?;
        let mut k = to_4d::<T>(&x.k, [d.batch, d.kv_heads, d.kv_seq, d.head])?;
        let mut v = to_4d::<T>(&x.v, [d.batch, d.kv_heads, d.kv_seq, d.v_head])?;
        if let Some((pk, pv)) = &x.past {
            let bh = d.batch * d.kv_heads;
            k = concat_seq(&float_slice::<T>(pk)?, &k, bh, d.past, d.kv_seq, d.head);
            v = concat_seq(&float_slice::<T>(pv)?, &v, bh, d.past, d.kv_seq, d.v_head);
        }
        let mask = x.mask.as_ref().map(|m| Mask::new(m, &d, &self.at)).transpose()?;
        let nonpad = x.nonpad.as_ref().map(|t| self.nonpad(t, &d)).transpose()?;
        let keep_qk = wanted.get(3).copied().unwrap_or(false);
        let ops = Operands { q: &q, k: &k, v: &v, mask: mask.as_ref(), nonpad: nonpad.as_deref() };
        let work = d.batch * d.q_heads * d.q_seq * d.total() * (d.head + d.v_head);
        let one = |bh: usize| self.head(&d, &ops, bh / d.q_heads, bh % d.q_heads, keep_qk);
        let heads: Vec<(Vec<T>, Vec<T>)> = if work >= super::matmul::gemm::PARALLEL_WORK {
            (0..d.batch * d.q_heads).into_par_iter().map(one).collect::<Result<_>>()?
        } else {
            (0..d.batch * d.q_heads).map(one).collect::<Result<_>>()?
        };
        self.outputs(&d, heads, k, v, wanted, x.q.dtype())
    }

    /// Assembles Y (3-D or 4-D), the present key and value, and `qk_matmul_output`.
    fn outputs<T: Real>(
        &self,
        d: &Dims,
        heads: Vec<(Vec<T>, Vec<T>)>,
        k: Vec<T>,
        v: Vec<T>,
        wanted: &[bool],
        dtype: DataType,
    ) -> Result<Vec<Value>> {
        let mut y = Vec::with_capacity(d.batch * d.q_heads * d.q_seq * d.v_head);
        let mut qk = Vec::new();
        for (yh, qh) in &heads {
            y.extend_from_slice(yh);
            qk.extend_from_slice(qh);
        }
        let y = if d.three_d {
            let dv = d.v_head;
            let mut t = vec![T::ZERO; y.len()];
            for b in 0..d.batch {
                for h in 0..d.q_heads {
                    for s in 0..d.q_seq {
                        let src = ((b * d.q_heads + h) * d.q_seq + s) * dv;
                        let dst = (b * d.q_seq + s) * d.q_heads * dv + h * dv;
                        t[dst..dst + dv].copy_from_slice(&y[src..src + dv]);
                    }
                }
            }
            float_output(dtype, vec![d.batch, d.q_seq, d.q_heads * dv], t)?
        } else {
            float_output(dtype, vec![d.batch, d.q_heads, d.q_seq, d.v_head], y)?
        };
        let mut outs = vec![y];
        let wants = |i: usize| wanted.get(i).copied().unwrap_or(false);
        if wants(1) || wants(2) || wants(3) {
            outs.push(float_output(dtype, vec![d.batch, d.kv_heads, d.total(), d.head], k)?);
            outs.push(float_output(dtype, vec![d.batch, d.kv_heads, d.total(), d.v_head], v)?);
        }
        if wants(3) {
            outs.push(float_output(dtype, vec![d.batch, d.q_heads, d.q_seq, d.total()], qk)?);
        }
        Ok(outs)
    }
}

impl Kernel for AttentionOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let x = self.read_inputs(inputs)?;
        let r = match compute_type(x.q.dtype()) {
            Some(DataType::Double) => self.compute::<f64>(&x, wanted),
            _ => self.compute::<f32>(&x, wanted),
        };
        r.map_err(|e| e.at(&self.at))
    }
}
