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
    /// Without the windowed cache this is the present cache (`rows` = its length).
    fn keys(&self, s: &GqaShapes, l: &GqaLengths, past: Option<&[f32]>, new: &[f32]) -> (Vec<f32>, usize) {
        let (hkv, d) = (self.0.kv_num_heads, s.head);
        let t = if self.0.sliding_cache { s.past_capacity + s.seq } else { l.present };
        let mut out = onyx_core::host_pool::take_zeroed::<f32>(s.batch * hkv * t * d);
        for b in 0..s.batch {
            let row = l.rows[b];
            for h in 0..hkv {
                let dst = &mut out[(b * hkv + h) * t * d..][..t * d];
                if let Some(past) = past {
                    let src = &past[(b * hkv + h) * s.past_capacity * d..];
                    dst[..row.cached * d].copy_from_slice(&src[..row.cached * d]);
                }
                for i in 0..s.seq {
                    dst[(row.cached + i) * d..][..d].copy_from_slice(&new[((b * s.seq + i) * hkv + h) * d..][..d]);
                }
            }
        }
        (out, t)
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
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
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
        let mut shape_list: Vec<Option<&[usize]>> = views.iter().map(|v| v.as_ref().map(|v| v.shape())).collect();
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
        let (keys, rows) = self.keys(&shapes, &lengths, past_k.as_deref(), &new.k);
        let (values, _) = self.keys(&shapes, &lengths, past_v.as_deref(), &new.v);
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
