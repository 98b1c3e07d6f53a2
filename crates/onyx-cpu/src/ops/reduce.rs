//! Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin and
//! CumSum.
//!
//! The input is viewed as `[outer, r, inner]` with the reduced axes merged into `r` (inputs
//! whose reduced axes are not adjacent are first transposed so that they are). With `inner == 1`
//! every output reduces one contiguous row, folded in 16 independent lanes so that the loop
//! vectorizes; otherwise whole rows of `inner` accumulators are updated at once. Integers use
//! wrapping arithmetic; L2, LogSum and LogSumExp of integers are computed in f64 and truncated
//! back as ONNX Runtime does (LogSumExp truncating each term e^(x − max), as ONNX Runtime computes
//! them in the integer type). f16 and bf16 are computed in f32. Max and Min propagate NaN (as numpy and the
//! ONNX reference do; ONNX Runtime's ReduceMax happens to skip NaN).

mod scan;

use crate::parallel;
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::broadcast::PAR_CHUNK;
use super::elementwise::num::{Int, Num, Real};
use super::elementwise::{bool_out, dispatch_int, dtype_error, narrow, widen, FLOAT_TYPES, INT_TYPES};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    for op in [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ] {
        r.add(op, build_reduce);
    }
    scan::register(r);
}

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl ReduceOp {
    fn from_name(op: &str) -> Option<Self> {
        Some(match op {
            "ReduceSum" => ReduceOp::Sum,
            "ReduceMean" => ReduceOp::Mean,
            "ReduceMax" => ReduceOp::Max,
            "ReduceMin" => ReduceOp::Min,
            "ReduceProd" => ReduceOp::Prod,
            "ReduceL1" => ReduceOp::L1,
            "ReduceL2" => ReduceOp::L2,
            "ReduceLogSum" => ReduceOp::LogSum,
            "ReduceLogSumExp" => ReduceOp::LogSumExp,
            "ReduceSumSquare" => ReduceOp::SumSquare,
            _ => return None,
        })
    }
}

/// The input seen as `[outer, r, inner]`, after permuting the input by `perm` when set.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Layout {
    pub(crate) outer: usize,
    pub(crate) r: usize,
    pub(crate) inner: usize,
    /// Axis order that puts the kept axes first and the reduced ones last, when the reduced
    /// axes are not one block.
    pub(crate) perm: Option<Vec<usize>>,
}

impl Layout {
    /// Plans a reduction of the axes marked in `reduced` of an input of `shape`.
    pub(crate) fn new(shape: &[usize], reduced: &[bool]) -> Self {
        // Blocks of adjacent axes of the same kind (size-1 axes do not matter).
        let mut blocks: Vec<(usize, bool)> = Vec::new();
        for (&size, &red) in shape.iter().zip(reduced) {
            if size == 1 {
                continue;
            }
            match blocks.last_mut() {
                Some((s, r)) if *r == red => *s *= size,
                _ => blocks.push((size, red)),
            }
        }
        let plain = |outer, r, inner| Layout { outer, r, inner, perm: None };
        match blocks.as_slice() {
            [] => plain(1, 1, 1),
            [(k, false)] => plain(*k, 1, 1),
            [(r, true)] => plain(1, *r, 1),
            [(k, false), (r, true)] => plain(*k, *r, 1),
            [(r, true), (k, false)] => plain(1, *r, *k),
            [(k1, false), (r, true), (k2, false)] => plain(*k1, *r, *k2),
            _ => {
                let kept = (0..shape.len()).filter(|&d| !reduced[d]);
                let perm: Vec<usize> = kept.chain((0..shape.len()).filter(|&d| reduced[d])).collect();
                let r = shape.iter().zip(reduced).filter(|(_, &red)| red).map(|(s, _)| s).product();
                let k = shape.iter().zip(reduced).filter(|(_, &red)| !red).map(|(s, _)| s).product();
                Layout { outer: k, r, inner: 1, perm: Some(perm) }
            }
        }
    }
}

/// `x` (of `shape`) with its axes permuted by `perm`.
pub(crate) fn transpose<T: Copy + Send + Sync + Default>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let strides = util::strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let mut out = vec![T::default(); x.len()];
    let inner = out_shape.last().copied().unwrap_or(1).max(1);
    let inner_stride = src_strides.last().copied().unwrap_or(0);
    let outer_shape = &out_shape[..out_shape.len().saturating_sub(1)];
    let mut index = vec![0usize; outer_shape.len()];
    for row in out.chunks_mut(inner) {
        let base: usize = index.iter().zip(&src_strides).map(|(i, s)| i * s).sum();
        for (j, o) in row.iter_mut().enumerate() {
            *o = x[base + j * inner_stride];
        }
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < outer_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// Folds a row in 16 lanes (so that the loop vectorizes), then the lanes together.
#[inline(always)]
pub(crate) fn fold_lanes<T: Copy>(row: &[T], init: T, pre: &impl Fn(T) -> T, comb: &impl Fn(T, T) -> T) -> T {
    const LANES: usize = 16;
    let mut lanes = [init; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = comb(*l, pre(v));
        }
    }
    let acc = chunks.remainder().iter().fold(init, |a, &v| comb(a, pre(v)));
    lanes.iter().fold(acc, |a, &l| comb(a, l))
}

/// Folds a row, splitting a long one into parallel pieces combined in order.
fn fold_row<T: Copy + Send + Sync>(
    row: &[T],
    init: T,
    pre: &(impl Fn(T) -> T + Sync),
    comb: &(impl Fn(T, T) -> T + Sync),
    parallel: bool,
) -> T {
    if !parallel || row.len() < 2 * PAR_CHUNK {
        return fold_lanes(row, init, pre, comb);
    }
    let chunk = |i: usize| &row[i * PAR_CHUNK..((i + 1) * PAR_CHUNK).min(row.len())];
    let partials = parallel::map_indices(row.len().div_ceil(PAR_CHUNK), &|i| fold_lanes(chunk(i), init, pre, comb));
    partials.into_iter().fold(init, comb)
}

/// Runs `work(row)` for every row of `r` elements of `x`, in parallel when large.
fn for_rows<T: Sync, O: Send + Clone + Default>(
    x: &[T],
    r: usize,
    outer: usize,
    work: impl Fn(&[T]) -> O + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); outer];
    let row = |o: usize| &x[o * r..(o + 1) * r];
    if outer * r < 2 * PAR_CHUNK || outer < 2 {
        out.iter_mut().enumerate().for_each(|(o, v)| *v = work(row(o)));
    } else {
        let per_task = (PAR_CHUNK / r.max(1)).max(1);
        parallel::for_each_chunk_mut(&mut out, per_task, &|t, chunk| {
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = work(row(t * per_task + j));
            }
        });
    }
    out
}

/// Runs `work(o, first_column, segment)` over the `[outer, inner]` output in column blocks, in
/// parallel when the work (`outer * r * inner`) is large.
fn for_column_blocks<O: Send + Clone + Default>(
    outer: usize,
    r: usize,
    inner: usize,
    work: impl Fn(usize, usize, &mut [O]) + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); outer * inner];
    if inner == 0 {
        return out; // an empty output (chunks of 0 elements do not exist)
    }
    if outer * r * inner < 2 * PAR_CHUNK {
        out.chunks_mut(inner).enumerate().for_each(|(o, seg)| work(o, 0, seg));
        return out;
    }
    let block = (PAR_CHUNK / r.max(1)).clamp(64, inner.max(64));
    let mut tasks: Vec<(usize, usize, &mut [O])> = Vec::new();
    for (o, row) in out.chunks_mut(inner).enumerate() {
        for (b, seg) in row.chunks_mut(block).enumerate() {
            tasks.push((o, b * block, seg));
        }
    }
    parallel::for_each_task(tasks, &|(o, i0, seg)| work(o, i0, seg));
    out
}

/// The reduction `post(fold(comb, init, pre(x)))` of every output of a layout.
fn reduce_with<T: Num>(
    x: &[T],
    l: &Layout,
    init: T,
    pre: impl Fn(T) -> T + Sync,
    comb: impl Fn(T, T) -> T + Sync,
    post: impl Fn(T) -> T + Sync,
) -> Vec<T> {
    let (r, inner) = (l.r, l.inner);
    if inner == 1 {
        let parallel = l.outer < rayon::current_num_threads();
        return for_rows(x, r, l.outer, |row| post(fold_row(row, init, &pre, &comb, parallel)));
    }
    for_column_blocks(l.outer, r, inner, |o, i0, seg: &mut [T]| {
        seg.fill(init);
        let n = seg.len();
        for k in 0..r {
            let start = (o * r + k) * inner + i0;
            for (a, &v) in seg.iter_mut().zip(&x[start..start + n]) {
                *a = comb(*a, pre(v));
            }
        }
        seg.iter_mut().for_each(|a| *a = post(*a));
    })
}

/// The larger of two values, NaN when either is.
#[inline]
fn max_nan<T: Num>(a: T, v: T) -> T {
    if v > a || v.is_nan() {
        v
    } else {
        a
    }
}

/// The smaller of two values, NaN when either is.
#[inline]
fn min_nan<T: Num>(a: T, v: T) -> T {
    if v < a || v.is_nan() {
        v
    } else {
        a
    }
}

/// log Σ e^x, stable: m + log Σ e^(x − m) with m the maximum (±∞ and NaN maxima are the result).
/// With `truncate` (integer inputs, as ONNX Runtime computes them in the integer type) every
/// term e^(x − m) is truncated toward zero.
fn log_sum_exp<T: Real>(x: &[T], l: &Layout, truncate: bool) -> Vec<T> {
    let cut = move |v: T| if truncate { v.trunc() } else { v };
    let finish = move |m: T, s: T| if m.is_nan() || m.is_infinite() { m } else { m + s.ln() };
    let (r, inner) = (l.r, l.inner);
    if inner == 1 {
        return for_rows(x, r, l.outer, |row| {
            let m = fold_lanes(row, T::LOWEST, &|v| v, &max_nan);
            finish(m, fold_lanes(row, T::ZERO, &|v: T| cut((v - m).exp()), &|a, b| a + b))
        });
    }
    for_column_blocks(l.outer, r, inner, |o, i0, seg: &mut [T]| {
        let n = seg.len();
        let rows = |k: usize| &x[(o * r + k) * inner + i0..][..n];
        let mut m = vec![T::LOWEST; n];
        for k in 0..r {
            m.iter_mut().zip(rows(k)).for_each(|(a, &v)| *a = max_nan(*a, v));
        }
        seg.fill(T::ZERO);
        for k in 0..r {
            seg.iter_mut().zip(rows(k)).zip(&m).for_each(|((a, &v), &mx)| *a = *a + cut((v - mx).exp()));
        }
        seg.iter_mut().zip(&m).for_each(|(a, &mx)| *a = finish(mx, *a));
    })
}

/// Every reduction on f32 or f64.
fn reduce_real<T: Real>(op: ReduceOp, x: &[T], l: &Layout) -> Vec<T> {
    let id = |v: T| v;
    let add = |a: T, b: T| a + b;
    let n = T::from_f64(l.r as f64);
    let r = l.r;
    match op {
        ReduceOp::Sum => reduce_with(x, l, T::ZERO, id, add, id),
        ReduceOp::Mean => reduce_with(x, l, T::ZERO, id, add, |a| if r == 0 { a } else { a / n }),
        ReduceOp::SumSquare => reduce_with(x, l, T::ZERO, |v| v * v, add, id),
        ReduceOp::L1 => reduce_with(x, l, T::ZERO, |v| v.abs(), add, id),
        ReduceOp::L2 => reduce_with(x, l, T::ZERO, |v| v * v, add, |a| a.sqrt()),
        ReduceOp::LogSum => reduce_with(x, l, T::ZERO, id, add, |a| a.ln()),
        ReduceOp::Prod => reduce_with(x, l, T::ONE, id, |a, b| a * b, id),
        ReduceOp::Max => reduce_with(x, l, T::LOWEST, id, max_nan, id),
        ReduceOp::Min => reduce_with(x, l, T::HIGHEST, id, min_nan, id),
        ReduceOp::LogSumExp => log_sum_exp(x, l, false),
    }
}

/// The reductions computed natively on integers (wrapping); the others go through f64.
fn reduce_int<T: Int>(op: ReduceOp, x: &[T], l: &Layout) -> Vec<T> {
    let id = |v: T| v;
    let r = l.r;
    match op {
        ReduceOp::Sum => reduce_with(x, l, T::ZERO, id, Num::add, id),
        ReduceOp::Mean => reduce_with(x, l, T::ZERO, id, Num::add, |a| if r == 0 { a } else { a.div_count(r) }),
        ReduceOp::SumSquare => reduce_with(x, l, T::ZERO, |v| v.mul(v), Num::add, id),
        ReduceOp::L1 => reduce_with(x, l, T::ZERO, Num::abs, Num::add, id),
        ReduceOp::Prod => reduce_with(x, l, T::ONE, id, Num::mul, id),
        ReduceOp::Max => reduce_with(x, l, T::LOWEST, id, Num::max_of, id),
        ReduceOp::Min => reduce_with(x, l, T::HIGHEST, id, Num::min_of, id),
        _ => {
            let wide: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
            let y = if op == ReduceOp::LogSumExp { log_sum_exp(&wide, l, true) } else { reduce_real(op, &wide, l) };
            y.into_iter().map(T::from_f64).collect()
        }
    }
}

/// The input's elements in layout order (transposed when the layout says so).
fn arranged<'a, T: Copy + Send + Sync + Default>(x: &'a [T], shape: &[usize], l: &Layout) -> std::borrow::Cow<'a, [T]> {
    match &l.perm {
        Some(perm) => std::borrow::Cow::Owned(transpose(x, shape, perm)),
        None => std::borrow::Cow::Borrowed(x),
    }
}

/// A Reduce* op with its attributes decoded.
struct Reduce {
    op: ReduceOp,
    /// Axes from the attribute (`None`: all, or from input 1 when `axes_input`).
    axes: Option<Vec<i64>>,
    /// Axes come from the optional input 1 (ReduceSum from opset 13, the others from 18).
    axes_input: bool,
    keepdims: bool,
    noop_with_empty_axes: bool,
    at: Location,
}

fn build_reduce(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let op = ReduceOp::from_name(&node.op_type).ok_or_else(|| Error::node(&at, "not a Reduce op"))?;
    let axes_input = ctx.since_version >= if op == ReduceOp::Sum { 13 } else { 18 };
    let axes = if axes_input { None } else { node.get_ints("axes")?.map(<[i64]>::to_vec) };
    Ok(Box::new(Reduce {
        op,
        axes,
        axes_input,
        keepdims: node.int_or("keepdims", 1)? != 0,
        noop_with_empty_axes: node.int_or("noop_with_empty_axes", 0)? != 0,
        at,
    }))
}

/// Marks the axes to reduce: `axes` normalized (an error for out-of-range or repeated axes);
/// all axes when `axes` is empty, unless `noop` asks to reduce none.
pub(crate) fn reduced_axes(axes: &[i64], rank: usize, noop: bool, at: &Location) -> Result<Vec<bool>> {
    if axes.is_empty() {
        return Ok(vec![!noop; rank]);
    }
    let mut mask = vec![false; rank];
    for &a in axes {
        let d = util::normalize_axis(a, rank, at)?;
        if rank == 0 || std::mem::replace(&mut mask[d], true) {
            return Err(Error::node(at, format!("axis {a} is repeated or invalid for rank {rank} (axes {axes:?})")));
        }
    }
    Ok(mask)
}

/// The output shape: reduced axes kept as 1 or dropped.
pub(crate) fn reduced_shape(shape: &[usize], mask: &[bool], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&s, &red)| match (red, keepdims) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

impl Reduce {
    fn axes(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<i64>> {
        if !self.axes_input {
            return Ok(self.axes.clone().unwrap_or_default());
        }
        match util::opt_input(inputs, 1, &self.at)? {
            None => Ok(vec![]),
            Some(a) if a.dtype() == DataType::Int64 && a.rank() <= 1 => Ok(a.as_slice::<i64>()?.to_vec()),
            Some(a) => {
                Err(Error::input(&self.at, 1, "a 1-D int64 tensor of axes", format!("{}{:?}", a.dtype(), a.shape())))
            }
        }
    }

    fn compute(&self, x: &TensorView<'_>, axes: &[i64]) -> Result<Value> {
        let shape = x.shape();
        let mask = reduced_axes(axes, shape.len(), self.noop_with_empty_axes, &self.at)?;
        let out_shape = reduced_shape(shape, &mask, self.keepdims);
        let l = Layout::new(shape, &mask);
        let op = self.op;
        match x.dtype() {
            DataType::Float => util::out(out_shape, reduce_real(op, &arranged(x.as_slice::<f32>()?, shape, &l), &l)),
            DataType::Double => util::out(out_shape, reduce_real(op, &arranged(x.as_slice::<f64>()?, shape, &l), &l)),
            DataType::Float16 | DataType::BFloat16 => {
                let wide = widen(x)?;
                narrow(x.dtype(), out_shape, reduce_real(op, &arranged(&wide, shape, &l), &l))
            }
            DataType::Bool if matches!(op, ReduceOp::Max | ReduceOp::Min) => {
                let y = reduce_int(op, &arranged(x.bytes()?, shape, &l), &l);
                bool_out(out_shape, y)
            }
            other => dispatch_int!(other,
                T => util::out(out_shape, reduce_int(op, &arranged(x.as_slice::<T>()?, shape, &l), &l)),
                _ => Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
        }
    }
}

impl Kernel for Reduce {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let axes = self.axes(inputs)?;
        Ok(vec![self.compute(&x, &axes).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::testing::*;
    use super::*;
    use onyx_core::Tensor;

    type Reference = fn(&[f64]) -> f64;

    fn reference(op: &str) -> Reference {
        match op {
            "ReduceSum" => |v| v.iter().sum(),
            "ReduceMean" => |v| v.iter().sum::<f64>() / v.len() as f64,
            "ReduceMax" => |v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            "ReduceMin" => |v| v.iter().copied().fold(f64::INFINITY, f64::min),
            "ReduceProd" => |v| v.iter().product(),
            "ReduceL1" => |v| v.iter().map(|x| x.abs()).sum(),
            "ReduceL2" => |v| v.iter().map(|x| x * x).sum::<f64>().sqrt(),
            "ReduceLogSum" => |v| v.iter().sum::<f64>().ln(),
            "ReduceLogSumExp" => |v| v.iter().map(|x| x.exp()).sum::<f64>().ln(),
            _ => |v| v.iter().map(|x| x * x).sum(),
        }
    }

    const OPS: [&str; 10] = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];

    /// Groups the input elements by output position and applies the reference to each group.
    fn naive_reduce(x: &[f64], shape: &[usize], mask: &[bool], f: Reference) -> Vec<f64> {
        let out_shape: Vec<usize> = shape.iter().zip(mask).map(|(&s, &m)| if m { 1 } else { s }).collect();
        let n_out: usize = out_shape.iter().product();
        let mut groups = vec![Vec::new(); n_out];
        for (i, &v) in x.iter().enumerate() {
            let idx = unravel(i, shape);
            let o = idx.iter().zip(&out_shape).fold(0, |acc, (&k, &s)| acc * s + if s == 1 { 0 } else { k });
            groups[o].push(v);
        }
        groups.iter().map(|g| f(g)).collect()
    }

    /// (shape, axes) pairs: rows, columns, middle axes, transposed blocks, all, scalar, big.
    const CASES: &[(&[usize], &[i64])] = &[
        (&[3, 4, 5], &[1]),
        (&[3, 4, 5], &[-1]),
        (&[3, 4, 5], &[0]),
        (&[3, 4, 5], &[0, 2]),
        (&[2, 3, 4, 5], &[1, 3]),
        (&[3, 4, 5], &[]),
        (&[7], &[0]),
        (&[2, 1, 3], &[1]),
        (&[], &[]),
        (&[130, 517], &[1]),
        (&[3, 40_001], &[0]),
        (&[1, 150_001], &[1]),
        (&[5, 31, 1_001], &[1]),
    ];

    #[test]
    fn float_reductions_match_naive_references() {
        let mut rng = fastrand::Rng::with_seed(21);
        for op in OPS {
            let (lo, hi) = match op {
                "ReduceProd" => (0.9, 1.1),
                "ReduceLogSum" => (0.1, 3.0),
                _ => (-3.0, 3.0),
            };
            for &(shape, axes) in CASES {
                let n: usize = shape.iter().product();
                let x = random_f32(&mut rng, n, lo, hi);
                let t = tensor(shape, x.clone());
                let mask = reduced_axes(axes, shape.len(), false, &Location::default()).unwrap();
                let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                let want = naive_reduce(&xf, shape, &mask, reference(op));
                let axes_t = tensor(&[axes.len()], axes.to_vec());
                for keepdims in [0, 1] {
                    let attrs = vec![attr_i("keepdims", keepdims)];
                    let y =
                        run_opt(op, 18, attrs, &[Some(&t), (!axes.is_empty()).then_some(&axes_t)]).unwrap().remove(0);
                    assert_eq!(y.shape(), reduced_shape(shape, &mask, keepdims == 1), "{op} {shape:?} {axes:?}");
                    let rtol = if n > 100_000 { 2e-5 } else { 2e-6 };
                    assert_close(
                        &floats(&y),
                        &want,
                        rtol,
                        1e-5,
                        &format!("{op} {shape:?} {axes:?} keepdims={keepdims}"),
                    );
                }
                // Axes as an attribute (ReduceSum before 13, the others before 18), in f64.
                let since = if op == "ReduceSum" { 11 } else { 13 };
                let attrs = if axes.is_empty() { vec![] } else { vec![attr_ints("axes", axes)] };
                let y = run(op, since, attrs, &[&tensor(shape, xf.clone())]).unwrap();
                assert_close(&floats(&y), &want, 1e-12, 1e-12, &format!("{op}-{since} f64 {shape:?} {axes:?}"));
            }
            // Half types are computed in f32.
            let x = random_f32(&mut rng, 60, lo, hi);
            let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
            let hf: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
            let want = naive_reduce(&hf, &[6, 10], &[false, true], reference(op));
            let y = run(op, 18, vec![], &[&tensor(&[6, 10], h), &tensor(&[1], vec![1i64])]).unwrap();
            assert_eq!(y.dtype(), DataType::Float16);
            assert_close(&floats(&y), &want, 2e-3, 2e-3, &format!("{op} f16"));
        }
    }

    #[test]
    fn integer_reductions_as_onnx_runtime() {
        let x = tensor(&[2, 2], vec![1i32, 2, 4, 4]);
        let neg = tensor(&[2, 2], vec![-1i32, -2, 4, 4]);
        let axis = tensor(&[1], vec![1i64]);
        let cases: &[(&str, &Tensor, &[i64])] = &[
            ("ReduceMean", &x, &[1, 4]),
            ("ReduceMean", &neg, &[-1, 4]),
            ("ReduceL2", &x, &[2, 5]),
            ("ReduceLogSumExp", &x, &[2, 4]),
            ("ReduceLogSumExp", &tensor(&[2, 4], vec![1i32, 2, 20, 3, 50, 50, 50, 1]), &[20, 51]),
            ("ReduceLogSum", &x, &[1, 2]),
            ("ReduceSum", &neg, &[-3, 8]),
            ("ReduceProd", &neg, &[2, 16]),
            ("ReduceL1", &neg, &[3, 8]),
            ("ReduceSumSquare", &neg, &[5, 32]),
            ("ReduceMax", &neg, &[-1, 4]),
            ("ReduceMin", &neg, &[-2, 4]),
        ];
        for &(op, t, want) in cases {
            let y = run(op, 18, vec![], &[t, &axis]).unwrap();
            assert_eq!((y.dtype(), y.shape(), ints(&y)), (DataType::Int32, &[2, 1][..], want.to_vec()), "{op}");
        }
        let many = tensor(&[256], vec![3u8; 256]);
        assert_eq!(ints(&run("ReduceMean", 18, vec![], &[&many]).unwrap()), vec![0]);
        let big = tensor(&[3], vec![u8::MAX, 1, 7]);
        assert_eq!(ints(&run("ReduceMax", 18, vec![attr_i("keepdims", 0)], &[&big]).unwrap()), vec![255]);
        let wrap = tensor(&[2], vec![i64::MAX, 1]);
        assert_eq!(ints(&run("ReduceSum", 13, vec![], &[&wrap]).unwrap()), vec![i64::MIN]);
        // ONNX Runtime's integer LogSumExp truncates every term: trunc(max + ln(#maxima)).
        let small = tensor(&[2, 4], vec![0i64, 0, 0, 0, -2, -2, -2, -5]);
        assert_eq!(ints(&run("ReduceLogSumExp", 18, vec![], &[&small, &axis]).unwrap()), vec![1, 0]);
        let b = bools(&[2, 3], &[false, true, false, false, false, false]);
        let y = run("ReduceMax", 20, vec![], &[&b, &axis]).unwrap();
        assert_eq!((y.dtype(), bool_values(&y)), (DataType::Bool, vec![true, false]));
    }

    #[test]
    fn empty_reductions_as_onnx_runtime() {
        let f = Tensor::zeros(DataType::Float, vec![2, 0, 3]).unwrap();
        let i = Tensor::zeros(DataType::Int32, vec![2, 0, 3]).unwrap();
        let axis = tensor(&[1], vec![1i64]);
        let cases: &[(&str, f64, i64)] = &[
            ("ReduceSum", 0.0, 0),
            ("ReduceMean", 0.0, 0),
            ("ReduceMax", f64::NEG_INFINITY, i32::MIN as i64),
            ("ReduceMin", f64::INFINITY, i32::MAX as i64),
            ("ReduceProd", 1.0, 1),
            ("ReduceL1", 0.0, 0),
            ("ReduceL2", 0.0, 0),
            ("ReduceLogSum", f64::NEG_INFINITY, i32::MIN as i64),
            ("ReduceLogSumExp", f64::NEG_INFINITY, i32::MIN as i64),
            ("ReduceSumSquare", 0.0, 0),
        ];
        for &(op, fv, iv) in cases {
            let y = run(op, 18, vec![], &[&f, &axis]).unwrap();
            assert_eq!((y.shape(), floats(&y)), (&[2, 1, 3][..], vec![fv; 6]), "{op}");
            let y = run(op, 18, vec![], &[&i, &axis]).unwrap();
            assert_eq!(ints(&y), vec![iv; 6], "{op} int");
            // Reducing a kept empty axis gives an empty output.
            let y = run(op, 18, vec![attr_i("keepdims", 0)], &[&f, &tensor(&[1], vec![2i64])]).unwrap();
            assert_eq!(y.shape(), &[2, 0]);
        }
    }

    #[test]
    fn special_values() {
        let x = tensor(&[3, 2], vec![f32::INFINITY, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0, f32::NAN]);
        let axis = tensor(&[1], vec![1i64]);
        let y = run("ReduceLogSumExp", 18, vec![], &[&x, &axis]).unwrap();
        assert_close(&floats(&y), &[f64::INFINITY, f64::NEG_INFINITY, f64::NAN], 0.0, 0.0, "LogSumExp");
        let y = run("ReduceMax", 18, vec![], &[&x, &axis]).unwrap();
        assert_close(&floats(&y), &[f64::INFINITY, f64::NEG_INFINITY, f64::NAN], 0.0, 0.0, "Max");
        let y = run("ReduceMin", 18, vec![attr_i("keepdims", 0)], &[&x]).unwrap();
        assert!(y.shape().is_empty() && floats(&y)[0].is_nan());
        // A large row: the stable form does not overflow.
        let big = tensor(&[3], vec![1000f32, 1000.0, 999.0]);
        let y = run("ReduceLogSumExp", 18, vec![], &[&big]).unwrap();
        assert_close(&floats(&y), &[1000.0 + (2.0 + (-1f64).exp()).ln()], 1e-6, 0.0, "stable");
    }

    #[test]
    fn noop_and_empty_axes() {
        let x = tensor(&[2, 3], vec![1f32, -2.0, 3.0, -4.0, 5.0, -6.0]);
        let empty = tensor(&[0], Vec::<i64>::new());
        let noop = vec![attr_i("noop_with_empty_axes", 1)];
        let y = run("ReduceSum", 13, noop.clone(), &[&x, &empty]).unwrap();
        assert_eq!((y.shape(), floats(&y)), (&[2, 3][..], vec![1.0, -2.0, 3.0, -4.0, 5.0, -6.0]));
        // As the ONNX reference: no axes reduced, the element-wise part still applies.
        let y = run_opt("ReduceSumSquare", 18, noop.clone(), &[Some(&x), None]).unwrap().remove(0);
        assert_eq!(floats(&y), vec![1.0, 4.0, 9.0, 16.0, 25.0, 36.0]);
        let y = run("ReduceL1", 18, noop, &[&x, &empty]).unwrap();
        assert_eq!(floats(&y), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = run("ReduceSum", 13, vec![], &[&x, &empty]).unwrap();
        assert_eq!((y.shape(), floats(&y)), (&[1, 1][..], vec![-3.0]));
        let y = run("ReduceMean", 13, vec![attr_i("keepdims", 0)], &[&x]).unwrap();
        assert_eq!((y.shape(), floats(&y)), (&[][..], vec![-0.5]));
    }

    #[test]
    fn invalid_axes_and_types_are_errors() {
        let x = tensor(&[2, 3], vec![1f32; 6]);
        let err = run("ReduceSum", 13, vec![], &[&x, &tensor(&[1], vec![2i64])]).unwrap_err().to_string();
        assert!(err.contains("ReduceSum node 'n'") && err.contains("axis 2"), "{err}");
        let err = run("ReduceMax", 18, vec![], &[&x, &tensor(&[2], vec![1i64, -1])]).unwrap_err().to_string();
        assert!(err.contains("repeated"), "{err}");
        let err = run("ReduceMax", 18, vec![], &[&x, &tensor(&[1], vec![1i32])]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("int64"), "{err}");
        let err = run("ReduceMean", 13, vec![attr_ints("axes", &[-3])], &[&x]).unwrap_err().to_string();
        assert!(err.contains("axis -3"), "{err}");
        let s = Tensor::from_strings(vec![1], vec!["a".into()]).unwrap();
        assert!(run("ReduceSum", 13, vec![], &[&s]).unwrap_err().to_string().contains("input 0"));
        let b = bools(&[1], &[true]);
        assert!(run("ReduceSum", 13, vec![], &[&b]).is_err());
    }

    #[test]
    fn layouts_merge_and_transpose() {
        assert_eq!(Layout::new(&[2, 3, 4], &[false, true, true]), Layout { outer: 2, r: 12, inner: 1, perm: None });
        assert_eq!(Layout::new(&[2, 1, 4], &[true, false, false]), Layout { outer: 1, r: 2, inner: 4, perm: None });
        let l = Layout::new(&[2, 3, 4], &[true, false, true]);
        assert_eq!((l.outer, l.r, l.perm.as_deref()), (3, 8, Some(&[1, 0, 2][..])));
        let x: Vec<i32> = (0..24).collect();
        let t = transpose(&x, &[2, 3, 4], &[1, 0, 2]);
        assert_eq!(&t[..8], &[0, 1, 2, 3, 12, 13, 14, 15]);
    }
}
