//! Encoder attention on the packed register tiles of [`PackedB`]: the case BERT-style models
//! run (f32 3-D Q, K and V, no past, softcap, causal mask or padding lengths, a mask that
//! varies along the keys only, only Y wanted). Per (batch, head), Kᵀ times the scale and V are
//! packed straight from the 3-D inputs, the mask row enters the product as its bias, and the
//! tiles read Q's rows in place: no copies into the 4-D layout and no packing of Q or P.

use onyx_core::{DataType, Result, Value};
use rayon::prelude::*;

use super::{softmax_row, AttentionOp, Dims, Inputs, Mask};
use crate::ops::matmul::gemm::{MatRef, PARALLEL_WORK};
use crate::ops::matmul::packed::{Isa, PackedB};
use crate::ops::matmul::real::{float_output, float_slice, overwritten};

/// Y for `x` when this path applies, `None` when the general path must compute it.
pub(super) fn attention(op: &AttentionOp, x: &Inputs<'_>, d: &Dims, wanted: &[bool]) -> Option<Result<Vec<Value>>> {
    let only_y = wanted.iter().skip(1).all(|w| !w);
    let plain = x.q.dtype() == DataType::Float && d.three_d && d.past == 0 && x.nonpad.is_none();
    if !(only_y && plain && !op.is_causal && op.softcap == 0.0) {
        return None;
    }
    let mask = match x.mask.as_ref().map(|m| Mask::<f32>::new(m, d, &op.at)).transpose() {
        Ok(m) => m,
        Err(e) => return Some(Err(e)),
    };
    let bias_rows = match &mask {
        Some(m) => Some(m.key_rows(d)?),
        None => None,
    };
    Some(run(op, x, d, bias_rows.as_deref()))
}

impl Mask<f32> {
    /// The mask as one row of `total` values per batch entry, when it varies along the keys
    /// (and the batch) only.
    fn key_rows(&self, d: &Dims) -> Option<Vec<f32>> {
        let [sb, sh, sq, sk] = self.strides;
        if sh != 0 || sq != 0 || self.len != d.total() {
            return None;
        }
        Some((0..d.batch).flat_map(|b| (0..self.len).map(move |j| self.values[b * sb + j * sk])).collect())
    }
}

/// Query rows per task: a block's scores (`ROW_BLOCK x total`) stay in L1 between the
/// product, the softmax and the product by V, and heads split into tasks for many cores.
const ROW_BLOCK: usize = 24;

/// Computes Y `[batch, q_seq, q_heads * v_head]`; `bias_rows` holds `total` values per batch
/// entry. Kᵀ and V are packed once per (batch, KV head), then every (batch, head, block of
/// query rows) is a task.
fn run(op: &AttentionOp, x: &Inputs<'_>, d: &Dims, bias_rows: Option<&[f32]>) -> Result<Vec<Value>> {
    let (q, k, v) = (float_slice::<f32>(&x.q)?, float_slice::<f32>(&x.k)?, float_slice::<f32>(&x.v)?);
    let scale = op.scale.unwrap_or(1.0 / (d.head as f64).sqrt()) as f32;
    let total = d.total();
    let (q_row, k_row, v_row) = (d.q_heads * d.head, d.kv_heads * d.head, d.kv_heads * d.v_head);
    let work = [d.batch, d.q_heads, d.q_seq, total, d.head + d.v_head].into_iter().fold(1usize, usize::saturating_mul);
    let parallel = work >= PARALLEL_WORK;
    let pack = |bk: usize| -> Result<(PackedB, PackedB)> {
        let (b, kvh) = (bk / d.kv_heads, bk % d.kv_heads);
        let kt =
            MatRef { data: from(&k, b * total * k_row + kvh * d.head), rows: total, cols: d.head, rs: k_row, cs: 1 };
        let vm = MatRef {
            data: from(&v, b * total * v_row + kvh * d.v_head),
            rows: total,
            cols: d.v_head,
            rs: v_row,
            cs: 1,
        };
        Ok((PackedB::new(kt.t(), scale, Isa::best())?, PackedB::new(vm, 1.0, Isa::best())?))
    };
    let packed = map(d.batch * d.kv_heads, parallel, &pack)?;
    let blocks = d.q_seq.div_ceil(ROW_BLOCK);
    let rows_of = |blk: usize| blk * ROW_BLOCK..((blk + 1) * ROW_BLOCK).min(d.q_seq);
    let task = |t: usize| -> Result<Vec<f32>> {
        let (b, h, rows) = (t / blocks / d.q_heads, t / blocks % d.q_heads, rows_of(t % blocks));
        let (kt, vp) = &packed[b * d.kv_heads + h / (d.q_heads / d.kv_heads)];
        let mut s = overwritten::<f32>(rows.len() * total)?;
        let bias = bias_rows.map(|r| &r[b * total..(b + 1) * total]);
        let qs = from(&q, (b * d.q_seq + rows.start) * q_row + h * d.head);
        kt.matmul_strided(qs, q_row, rows.len(), bias, &mut s, total, false)?;
        s.chunks_mut(total.max(1)).for_each(softmax_row);
        let mut y = overwritten::<f32>(rows.len() * d.v_head)?;
        vp.matmul_strided(&s, total, rows.len(), None, &mut y, d.v_head, false)?;
        Ok(y)
    };
    let ys = map(d.batch * d.q_heads * blocks, parallel, &task)?;
    let width = d.q_heads * d.v_head;
    let mut y = overwritten::<f32>(d.batch * d.q_seq * width)?;
    for (t, block) in ys.iter().enumerate() {
        let (b, h, rows) = (t / blocks / d.q_heads, t / blocks % d.q_heads, rows_of(t % blocks));
        for (i, row) in rows.zip(block.chunks_exact(d.v_head.max(1))) {
            let at = (b * d.q_seq + i) * width + h * d.v_head;
            y[at..at + d.v_head].copy_from_slice(row);
        }
    }
    Ok(vec![float_output(DataType::Float, vec![d.batch, d.q_seq, width], y)?])
}

/// `(0..n).map(f)`, in parallel when `parallel`, stopping at the first error.
fn map<T: Send>(n: usize, parallel: bool, f: &(dyn Fn(usize) -> Result<T> + Sync)) -> Result<Vec<T>> {
    if parallel {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// `x` from `start` on; empty past its end (an empty operand's head offsets).
fn from(x: &[f32], start: usize) -> &[f32] {
    x.get(start..).unwrap_or(&[])
}
