//! `com.microsoft` GroupQueryAttention on the contract of `onyx_core::ops::contrib::gqa`:
//! q and k rotated (rounded to the input's type), the present cache built from the past and the
//! new keys and values, then per (batch row, query head) the scores of each query over the
//! keys it sees, the softcap, the bias, a softmax (smooth, or with the head's sink logit) and
//! the weighted sum of values. Computed in f32; (batch row, head) pairs run in parallel.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::gqa::{GqaLengths, GqaShapes, GroupQueryAttentionOp as Op};
use onyx_core::{DataType, Error, Result, TensorView, Value};

use crate::ops::elementwise::exp_f32;
use crate::ops::util;
use crate::parallel;

struct Gqa(Op);

/// Builds the kernel.
pub(crate) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Gqa(Op::from_node(ctx.node)?)))
}

/// `x` rounded to the precision of float type `dtype`.
fn round_to(dtype: DataType, x: f32) -> f32 {
    match dtype {
        DataType::Float16 => half::f16::from_f32(x).to_f32(),
        DataType::BFloat16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// The new tokens' q, k and v as f32, `[B, S, heads, D]` each.
struct NewTokens {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Gqa {
    /// Splits the query (packed or not), key and value into per-head rows.
    fn new_tokens(
        &self,
        s: &GqaShapes,
        q: &TensorView<'_>,
        k: Option<&TensorView<'_>>,
        v: Option<&TensorView<'_>>,
    ) -> Result<NewTokens> {
        let op = &self.0;
        let (hq, hkv, d) = (op.num_heads, op.kv_num_heads, s.head);
        let q_all = util::to_f32(q)?;
        if !s.packed {
            let (k, v) = (k.expect("checked"), v.expect("checked"));
            return Ok(NewTokens { q: q_all, k: util::to_f32(k)?, v: util::to_f32(v)? });
        }
        let tokens = s.batch * s.seq;
        let row = (hq + 2 * hkv) * d;
        let part = |from: usize, len: usize| -> Vec<f32> {
            (0..tokens).flat_map(|t| q_all[t * row + from..][..len].iter().copied()).collect()
        };
        Ok(NewTokens { q: part(0, hq * d), k: part(hq * d, hkv * d), v: part((hq + hkv) * d, hkv * d) })
    }

    /// Rotates the first `rotary_dim` elements of each q and k head vector in place and rounds
    /// them to `dtype`.
    fn rotate(
        &self,
        s: &GqaShapes,
        l: &GqaLengths,
        new: &mut NewTokens,
        cos: &[f32],
        sin: &[f32],
        ids: &[i64],
        dtype: DataType,
    ) -> Result<()> {
        let op = &self.0;
        let (d, half) = (s.head, s.rotary_dim / 2);
        for b in 0..s.batch {
            for t in 0..s.seq {
                let row = op.position(s, l, ids, b, t)? * half;
                let (c, sn) = (&cos[row..row + half], &sin[row..row + half]);
                for (x, heads) in [(&mut new.q, op.num_heads), (&mut new.k, op.kv_num_heads)] {
                    for h in 0..heads {
                        let v = &mut x[((b * s.seq + t) * heads + h) * d..][..d];
                        for i in 0..half {
                            let (p, q) = if op.rotary_interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                            let (x1, x2) = (v[p], v[q]);
                            v[p] = round_to(dtype, x1 * c[i] - x2 * sn[i]);
                            v[q] = round_to(dtype, x1 * sn[i] + x2 * c[i]);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The keys (or values) attention reads, `[B, Hkv, rows, D]`: each row's cached past,
    /// then its new tokens, zeros elsewhere. Row `j` of batch row b is position `origin + j`.
    /// Without the windowed cache this is the present cache (`rows` = its length); a past
    /// handed over with the present's shape becomes it, only the new tokens written (the
    /// rows after them keep what the buffer held, as in ONNX Runtime's shared buffer).
    fn keys(&self, s: &GqaShapes, l: &GqaLengths, past: Past<'_>, new: &[f32]) -> (Vec<f32>, usize) {
        let (hkv, d) = (self.0.kv_num_heads, s.head);
        let t = if self.0.sliding_cache { s.past_capacity + s.seq } else { l.present };
        let past = match past {
            Past::Owned(mut buffer) if !self.0.sliding_cache && s.past_capacity == t => {
                self.write_new(s, l, &mut buffer, t, new);
                return (buffer, t);
            }
            Past::Owned(buffer) => return self.keys(s, l, Past::Read(Some(&buffer)), new),
            Past::Read(past) => past,
        };
        let mut out = onyx_core::host_pool::take_zeroed::<f32>(s.batch * hkv * t * d);
        if let Some(past) = past {
            for b in 0..s.batch {
                let cached = l.rows[b].cached * d;
                for h in 0..hkv {
                    let src = &past[(b * hkv + h) * s.past_capacity * d..][..cached];
                    out[(b * hkv + h) * t * d..][..cached].copy_from_slice(src);
                }
            }
        }
        self.write_new(s, l, &mut out, t, new);
        (out, t)
    }

    /// Writes the new tokens of `new` (`[B, S, Hkv, D]`) after each row's cached ones in
    /// `cache` (`[B, Hkv, t, D]`).
    fn write_new(&self, s: &GqaShapes, l: &GqaLengths, cache: &mut [f32], t: usize, new: &[f32]) {
        let (hkv, d) = (self.0.kv_num_heads, s.head);
        for b in 0..s.batch {
            let cached = l.rows[b].cached;
            for h in 0..hkv {
                let dst = &mut cache[(b * hkv + h) * t * d..][..t * d];
                for i in 0..s.seq {
                    dst[(cached + i) * d..][..d].copy_from_slice(&new[((b * s.seq + i) * hkv + h) * d..][..d]);
                }
            }
        }
    }

    /// The windowed present cache `[B, Hkv, C, D]` from the keys attention read (`rows` a
    /// head): each row's last `window_rows(total)` tokens, then what the past buffer held in
    /// the rows after (as ONNX Runtime moves the rows within the buffer; zeros in a first
    /// prompt).
    fn windowed_present(
        &self,
        s: &GqaShapes,
        l: &GqaLengths,
        past: Option<&[f32]>,
        keys: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let (hkv, d, c) = (self.0.kv_num_heads, s.head, s.past_capacity);
        let mut out = onyx_core::host_pool::take_zeroed::<f32>(s.batch * hkv * c * d);
        if let Some(p) = past.filter(|_| !l.first_prompt) {
            out.copy_from_slice(p);
        }
        for b in 0..s.batch {
            let row = l.rows[b];
            let kept = self.0.window_rows(c, row.total);
            let first = row.total - kept - row.origin();
            for h in 0..hkv {
                let src = &keys[((b * hkv + h) * rows + first) * d..][..kept * d];
                out[(b * hkv + h) * c * d..][..kept * d].copy_from_slice(src);
            }
        }
        out
    }
}

/// A past cache as the kernel got it.
enum Past<'a> {
    /// Read only: the present is a new buffer.
    Read(Option<&'a [f32]>),
    /// Handed over by the run (see [`Kernel::run_donated`]): the present may be written into it.
    Owned(Vec<f32>),
}

/// The past as read from its input, or as handed over.
fn past<'a>(read: Option<&'a [f32]>, handed: Handed) -> Past<'a> {
    match handed {
        Some((_, buffer)) => Past::Owned(buffer),
        None => Past::Read(read),
    }
}

/// What one (batch row, query head) task reads.
struct Task<'a> {
    op: &'a Op,
    shapes: &'a GqaShapes,
    lengths: &'a GqaLengths,
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    bias: Option<&'a [f32]>,
    sink: Option<&'a [f32]>,
    total: usize,
    /// Rows of `keys` and `values` a head.
    rows: usize,
}

impl Task<'_> {
    /// Computes the outputs of head `n` of row `b`: `y[s * D..]` per query, and the qk rows
    /// (`[S, total]`) when `qk` is given. Inlined into [`Head`], which is compiled for the
    /// CPU's SIMD level.
    #[inline(always)]
    fn run(&self, b: usize, n: usize, y: &mut [f32], mut qk: Option<&mut [f32]>) {
        let (op, s) = (self.op, self.shapes);
        let (d, t_cap) = (s.head, self.rows);
        let kvh = n / (op.num_heads / op.kv_num_heads);
        let row = self.lengths.rows[b];
        // Key j (a position) is row j - origin of the head's keys.
        let base = (b * op.kv_num_heads + kvh) * t_cap * d;
        let (keys, values) = (&self.keys[base..][..t_cap * d], &self.values[base..][..t_cap * d]);
        let origin = row.origin();
        let scale = op.scale_for(d);
        let mut scores = vec![0f32; row.total.max(1)];
        for i in 0..s.seq {
            let q = &self.q[((b * s.seq + i) * op.num_heads + n) * d..][..d];
            let range = op.keys(row, i);
            let window = &mut scores[range.clone()];
            for (j, score) in range.clone().zip(window.iter_mut()) {
                let mut x = scale * dot(q, &keys[(j - origin) * d..][..d]);
                if op.softcap > 0.0 {
                    x = op.softcap * (x / op.softcap).tanh();
                }
                if let (Some(bias), Some((bb, bh, bt))) = (self.bias, s.bias) {
                    let (bi, hi) = (if bb == 1 { 0 } else { b }, if bh == 1 { 0 } else { n });
                    x += bias[((bi * bh + hi) * s.seq + i) * bt + j];
                }
                *score = x;
            }
            if op.qk_output == 1 {
                if let Some(qk) = qk.as_deref_mut() {
                    qk[i * self.total + range.start..][..window.len()].copy_from_slice(window);
                }
            }
            let sink = match self.sink {
                Some(sink) => Some(sink[n]),
                None => op.smooth_softmax.then_some(0.0),
            };
            softmax(window, sink);
            if op.qk_output == 2 {
                if let Some(qk) = qk.as_deref_mut() {
                    qk[i * self.total + range.start..][..window.len()].copy_from_slice(window);
                }
            }
            let out = &mut y[i * d..][..d];
            out.fill(0.0);
            for (j, &p) in range.zip(window.iter()) {
                for (o, &v) in out.iter_mut().zip(&values[(j - origin) * d..][..d]) {
                    *o += p * v;
                }
            }
        }
    }
}

/// One (batch row, head) of [`Task::run`], run through [`util::simd_body`].
struct Head<'t, 'a> {
    task: &'t Task<'a>,
    b: usize,
    n: usize,
    y: &'t mut [f32],
    qk: Option<&'t mut [f32]>,
}

impl util::SimdBody for Head<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        self.task.run(self.b, self.n, self.y, self.qk)
    }
}

/// `Σ a·b` in 8 lanes.
#[inline(always)]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Softmax of `x` in place; with a sink logit, `exp(sink − m)` joins the denominator.
#[inline(always)]
pub(super) fn softmax(x: &mut [f32], sink: Option<f32>) {
    if x.is_empty() {
        return;
    }
    let mut m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if let Some(s) = sink {
        m = m.max(s);
    }
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = exp_f32(*v - m);
        sum += *v;
    }
    if let Some(s) = sink {
        sum += exp_f32(s - m);
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

impl Kernel for Gqa {
    /// The past key and value: a shared buffer (past and present of one capacity) that the run
    /// hands over is updated in place. Not with the windowed cache, whose rows move.
    fn in_place_inputs(&self) -> &[usize] {
        if self.0.sliding_cache {
            &[]
        } else {
            &[Op::PAST_KEY, Op::PAST_VALUE]
        }
    }

    fn run_donated(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        donated: Vec<(usize, Value)>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let (mut handed, mut rest) = ([None, None], vec![]);
        for (i, value) in donated {
            match i {
                Op::PAST_KEY | Op::PAST_VALUE => match onyx_core::host_pool::reclaim::<f32>(value) {
                    Ok(buffer) => handed[i - Op::PAST_KEY] = Some(buffer),
                    Err(value) => rest.push((i, value)),
                },
                _ => rest.push((i, value)),
            }
        }
        self.compute(&onyx_core::ep::with_inputs(inputs, &rest), handed, wanted)
    }

    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        self.compute(inputs, [None, None], wanted)
    }
}

/// A past key or value handed over to the kernel: its shape and elements.
type Handed = Option<(Vec<usize>, Vec<f32>)>;

impl Gqa {
    /// The node's outputs; `handed` holds the past key and value when the run handed them over
    /// as f32 buffers (their entries in `inputs` are then `None`).
    fn compute(&self, inputs: &[Option<ValueRef<'_>>], handed: [Handed; 2], wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let at = &op.at;
        let views = (0..=Op::HEAD_SINK).map(|i| util::opt_input(inputs, i, at)).collect::<Result<Vec<_>>>()?;
        let q = views[Op::QUERY].as_ref().ok_or_else(|| Error::input(at, Op::QUERY, "a query", "none"))?;
        let dtype = q.dtype();
        if !matches!(dtype, DataType::Float | DataType::Float16 | DataType::BFloat16) {
            return Err(Error::input(at, Op::QUERY, "float, float16 or bfloat16", dtype.name()));
        }
        for i in [Op::KEY, Op::VALUE, Op::PAST_KEY, Op::PAST_VALUE, Op::ATTENTION_BIAS, Op::HEAD_SINK] {
            if let Some(t) = views[i].as_ref().filter(|t| t.dtype() != dtype) {
                return Err(Error::input(at, i, dtype.name(), t.dtype().name()));
            }
        }
        if op.do_rotary {
            for i in [Op::COS_CACHE, Op::SIN_CACHE] {
                if let Some(t) = views[i].as_ref().filter(|t| t.dtype() != dtype) {
                    return Err(Error::input(at, i, dtype.name(), t.dtype().name()));
                }
            }
        }
        for (i, want) in [
            (Op::SEQLENS_K, DataType::Int32),
            (Op::TOTAL_SEQUENCE_LENGTH, DataType::Int32),
            (Op::POSITION_IDS, DataType::Int64),
        ] {
            if let Some(t) = views[i].as_ref().filter(|t| t.dtype() != want) {
                return Err(Error::input(at, i, want.name(), t.dtype().name()));
            }
        }
        for (k, h) in handed.iter().enumerate() {
            if h.is_some() && dtype != DataType::Float {
                return Err(Error::input(at, Op::PAST_KEY + k, dtype.name(), DataType::Float.name()));
            }
        }
        let mut shape_list: Vec<Option<&[usize]>> = views.iter().map(|v| v.as_ref().map(|v| v.shape())).collect();
        for (k, h) in handed.iter().enumerate() {
            if let Some((shape, _)) = h {
                shape_list[Op::PAST_KEY + k] = Some(shape);
            }
        }
        if !op.do_rotary {
            shape_list[Op::COS_CACHE] = None;
            shape_list[Op::SIN_CACHE] = None;
            shape_list[Op::POSITION_IDS] = None;
        }
        let shapes = op.shapes(&shape_list)?;
        let seqlens = views[Op::SEQLENS_K].as_ref().expect("checked").as_slice::<i32>()?;
        let total = views[Op::TOTAL_SEQUENCE_LENGTH].as_ref().expect("checked").as_slice::<i32>()?[0];
        let lengths = op.lengths(&shapes, seqlens, total)?;

        let mut new = self.new_tokens(&shapes, q, views[Op::KEY].as_ref(), views[Op::VALUE].as_ref())?;
        if op.do_rotary {
            let cos = util::f32s(views[Op::COS_CACHE].as_ref().expect("checked"))?;
            let sin = util::f32s(views[Op::SIN_CACHE].as_ref().expect("checked"))?;
            let ids = views[Op::POSITION_IDS]
                .as_ref()
                .map(|p| p.as_slice::<i64>().map(<[i64]>::to_vec))
                .transpose()?
                .unwrap_or_default();
            self.rotate(&shapes, &lengths, &mut new, &cos, &sin, &ids, dtype)?;
        }
        let past_k = views[Op::PAST_KEY].as_ref().map(util::f32s).transpose()?;
        let past_v = views[Op::PAST_VALUE].as_ref().map(util::f32s).transpose()?;
        let [handed_k, handed_v] = handed;
        let (keys, rows) = self.keys(&shapes, &lengths, past(past_k.as_deref(), handed_k), &new.k);
        let (values, _) = self.keys(&shapes, &lengths, past(past_v.as_deref(), handed_v), &new.v);
        let bias = views[Op::ATTENTION_BIAS].as_ref().map(util::f32s).transpose()?;
        let sink = views[Op::HEAD_SINK].as_ref().map(util::f32s).transpose()?;

        let (hq, d, seq) = (op.num_heads, shapes.head, shapes.seq);
        let want_qk = op.qk_output != 0 && wanted.get(3).copied().unwrap_or(false);
        let total = total as usize;
        let task = Task {
            op,
            shapes: &shapes,
            lengths: &lengths,
            q: &new.q,
            keys: &keys,
            values: &values,
            bias: bias.as_deref(),
            sink: sink.as_deref(),
            total,
            rows,
        };
        // Per (row, head): the head's outputs [S, D], then its qk rows [S, total].
        let per_task = seq * d + if want_qk { seq * total } else { 0 };
        let mut scratch = onyx_core::host_pool::take_zeroed::<f32>(shapes.batch * hq * per_task);
        parallel::for_each_chunk_mut(&mut scratch, per_task.max(1), &|i, chunk| {
            let (y, qk) = chunk.split_at_mut(seq * d);
            util::simd_body(Head { task: &task, b: i / hq, n: i % hq, y, qk: want_qk.then_some(qk) });
        });
        let mut y = onyx_core::host_pool::take::<f32>(shapes.batch * seq * hq * d);
        for (i, chunk) in scratch.chunks(per_task.max(1)).enumerate() {
            let (b, n) = (i / hq, i % hq);
            for s in 0..seq {
                y[((b * seq + s) * hq + n) * d..][..d].copy_from_slice(&chunk[s * d..][..d]);
            }
        }
        let present_shape = vec![shapes.batch, op.kv_num_heads, lengths.present, d];
        let (keys, values) = match op.sliding_cache {
            true => (
                self.windowed_present(&shapes, &lengths, past_k.as_deref(), &keys, rows),
                self.windowed_present(&shapes, &lengths, past_v.as_deref(), &values, rows),
            ),
            false => (keys, values),
        };
        let mut out = vec![
            util::from_f32(dtype, vec![shapes.batch, seq, hq * d], y)?,
            util::from_f32(dtype, present_shape.clone(), keys)?,
            util::from_f32(dtype, present_shape, values)?,
        ];
        if want_qk {
            let qk: Vec<f32> = scratch.chunks(per_task).flat_map(|c| c[seq * d..].iter().copied()).collect();
            out.push(util::from_f32(dtype, vec![shapes.batch, hq, seq, total], qk)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::ep::{Kernel, ValueRef};
    use onyx_core::host_pool::{self, HostPool};
    use onyx_core::ir::AttrValue;
    use onyx_core::{Tensor, Value};

    use crate::ops::elementwise::testing::{random_f32, tensor};
    use crate::ops::matmul::test_support::{build, node};

    const D: usize = 6;
    const PAST: usize = 5;
    const NEW: usize = 3;

    fn gqa() -> Box<dyn Kernel> {
        let inputs = ["q", "k", "v", "pk", "pv", "seqlens", "total"];
        let attrs = vec![("num_heads", AttrValue::Int(4)), ("kv_num_heads", AttrValue::Int(2))];
        build(super::build, &node("GroupQueryAttention", &inputs, 3, attrs), 1).unwrap()
    }

    /// q, k, v of `NEW` tokens after `PAST` cached ones, in a shared buffer of `capacity`.
    fn inputs(rng: &mut fastrand::Rng, capacity: usize) -> Vec<Tensor> {
        let mut new = |heads: usize| tensor(&[1, NEW, heads * D], random_f32(rng, NEW * heads * D, -1.0, 1.0));
        let (q, k, v) = (new(4), new(2), new(2));
        let mut past = || tensor(&[1, 2, capacity, D], random_f32(rng, 2 * capacity * D, -1.0, 1.0));
        let (pk, pv) = (past(), past());
        let total = (PAST + NEW) as i32;
        vec![q, k, v, pk, pv, tensor(&[1], vec![total - 1]), tensor(&[], vec![capacity as i32])]
    }

    /// A pooled copy of `t` that nothing else holds: what a run hands over.
    fn pooled(t: &Tensor) -> Value {
        let mut data = host_pool::take::<f32>(t.len());
        data.copy_from_slice(t.as_slice::<f32>().unwrap());
        Value::Tensor(host_pool::tensor(t.shape().to_vec(), data).unwrap())
    }

    fn f32s(v: &Value) -> Vec<f32> {
        v.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
    }

    /// A shared buffer handed over is written in place: the same outputs as a run that copies,
    /// the new rows in the buffer itself, the rows after the sequence as they were.
    #[test]
    fn a_handed_over_shared_buffer_is_updated_in_place() {
        let pool = HostPool::new(1 << 24);
        let _entered = host_pool::enter(&pool);
        let mut rng = fastrand::Rng::with_seed(7);
        let kernel = gqa();
        for capacity in [PAST + NEW, 11] {
            let x = inputs(&mut rng, capacity);
            let values: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
            let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| Some(ValueRef::Value(v))).collect();
            let copied = kernel.run(&refs, &[true; 3]).unwrap();

            let (pk, pv) = (pooled(&x[3]), pooled(&x[4]));
            let at = |v: &Value| v.as_tensor().unwrap().as_slice::<f32>().unwrap().as_ptr();
            let (pk_at, pv_at) = (at(&pk), at(&pv));
            let mut handed = refs.clone();
            handed[3] = None;
            handed[4] = None;
            let in_place = kernel.run_donated(&handed, vec![(3, pk), (4, pv)], &[true; 3]).unwrap();

            assert_eq!(f32s(&in_place[0]), f32s(&copied[0]), "capacity {capacity}: output");
            assert_eq!((at(&in_place[1]), at(&in_place[2])), (pk_at, pv_at), "capacity {capacity}: in place");
            for (i, past) in [(1, &x[3]), (2, &x[4])] {
                let (got, want, before) = (f32s(&in_place[i]), f32s(&copied[i]), past.as_slice::<f32>().unwrap());
                for h in 0..2 {
                    let head = h * capacity * D;
                    let valid = head..head + (PAST + NEW) * D;
                    assert_eq!(got[valid.clone()], want[valid.clone()], "capacity {capacity}: present {i} head {h}");
                    let after = valid.end..head + capacity * D;
                    assert_eq!(got[after.clone()], before[after], "capacity {capacity}: rows after the sequence");
                }
            }
        }
    }

    /// A past smaller than the present (a growing cache) is read, not reused.
    #[test]
    fn a_handed_over_past_of_another_size_is_copied() {
        let pool = HostPool::new(1 << 24);
        let _entered = host_pool::enter(&pool);
        let mut rng = fastrand::Rng::with_seed(8);
        let kernel = gqa();
        let mut x = inputs(&mut rng, PAST);
        x[6] = tensor(&[], vec![(PAST + NEW) as i32]);
        let values: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
        let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| Some(ValueRef::Value(v))).collect();
        let copied = kernel.run(&refs, &[true; 3]).unwrap();
        let mut handed = refs.clone();
        handed[3] = None;
        let donated = kernel.run_donated(&handed, vec![(3, pooled(&x[3]))], &[true; 3]).unwrap();
        for i in 0..3 {
            assert_eq!(f32s(&donated[i]), f32s(&copied[i]), "output {i}");
        }
        assert_eq!(donated[1].as_tensor().unwrap().shape(), [1, 2, PAST + NEW, D]);
    }
}
