//! Pooling: MaxPool (with optional Indices), AveragePool, LpPool and their global forms, for
//! 1-D, 2-D and 3-D inputs, every opset from 1 to 22 (later attributes — ceil_mode, dilations,
//! storage_order, count_include_pad — are read whenever present).

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{AttrValue, Node};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::conv::depthwise::{lay_out_row, RowLayout};
use crate::ops::conv::geometry::{to_3d, Axis, WindowAttrs, MAX_SPATIAL};
use crate::ops::matmul::gemm::PARALLEL_WORK;
use crate::ops::matmul::real::{compute_type, filled, float_output, float_slice, Real};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("MaxPool", |ctx| build_pool(ctx, Reduce::Max));
    r.add("AveragePool", |ctx| build_pool(ctx, Reduce::Average));
    r.add("LpPool", |ctx| build_pool(ctx, Reduce::Lp));
    r.add("GlobalMaxPool", |ctx| build_global(ctx, Reduce::Max));
    r.add("GlobalAveragePool", |ctx| build_global(ctx, Reduce::Average));
    r.add("GlobalLpPool", |ctx| build_global(ctx, Reduce::Lp));
}

/// How a window is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduce {
    Max,
    Average,
    Lp,
}

/// Element types max pooling works on directly.
pub(crate) trait PoolElem: Copy + PartialOrd + Send + Sync + 'static {
    /// The smallest value (the max of an empty or all-NaN window).
    const LOWEST: Self;
    /// True for NaN.
    fn is_nan(self) -> bool {
        false
    }
}

impl PoolElem for i8 {
    const LOWEST: Self = i8::MIN;
}
impl PoolElem for u8 {
    const LOWEST: Self = u8::MIN;
}
impl PoolElem for f32 {
    const LOWEST: Self = f32::NEG_INFINITY;
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
impl PoolElem for f64 {
    const LOWEST: Self = f64::NEG_INFINITY;
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

/// For one output index of one axis: the kernel taps `k0..k1` that read inside the input, and
/// how many taps lie inside the padded input (what `count_include_pad` divides by).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Taps {
    k0: usize,
    k1: usize,
    padded: usize,
}

/// A pooling window resolved against one input plane.
#[derive(Clone, Debug)]
pub(crate) struct PoolGeometry {
    axes: [Axis; 3],
    taps: [Vec<Taps>; 3],
}

impl PoolGeometry {
    /// Tap tables for 3-D axes.
    pub fn new(axes: [Axis; 3]) -> Self {
        PoolGeometry { axes, taps: axes.map(|a| axis_taps(&a)) }
    }

    fn in_len(&self) -> usize {
        self.axes.iter().map(|a| a.input).product()
    }

    fn out_len(&self) -> usize {
        self.axes.iter().map(|a| a.output).product()
    }

    /// Taps of the window (saturating: only used to size work).
    fn k_len(&self) -> usize {
        self.axes.iter().fold(1usize, |n, a| n.saturating_mul(a.kernel))
    }

    /// Calls `add(acc, x[i], i)` for every input element `i` of each window, then
    /// `emit(output index, acc, valid taps, taps inside the padded input)`.
    fn walk<T: Copy, A>(
        &self,
        x: &[T],
        start: impl Fn() -> A,
        add: impl Fn(&mut A, T, usize),
        mut emit: impl FnMut(usize, A, usize, usize),
    ) {
        let [az, ay, ax] = self.axes;
        let [tzs, tys, txs] = &self.taps;
        let mut out = 0;
        for (oz, tz) in tzs.iter().enumerate() {
            for (oy, ty) in tys.iter().enumerate() {
                for (ox, tx) in txs.iter().enumerate() {
                    let mut acc = start();
                    for kz in tz.k0..tz.k1 {
                        let iz = az.input_index(oz, kz) as usize;
                        for ky in ty.k0..ty.k1 {
                            let row = (iz * ay.input + ay.input_index(oy, ky) as usize) * ax.input;
                            for kx in tx.k0..tx.k1 {
                                let i = row + ax.input_index(ox, kx) as usize;
                                add(&mut acc, x[i], i);
                            }
                        }
                    }
                    let valid = (tz.k1 - tz.k0) * (ty.k1 - ty.k0) * (tx.k1 - tx.k0);
                    emit(out, acc, valid, tz.padded * ty.padded * tx.padded);
                    out += 1;
                }
            }
        }
    }

    /// Converts a row-major position in the plane to column-major (`storage_order = 1`).
    fn column_major(&self, i: usize) -> usize {
        let [a0, a1, a2] = self.axes;
        let (i0, i1, i2) = (i / (a1.input * a2.input), i / a2.input % a1.input, i % a2.input);
        i0 + a0.input * (i1 + a1.input * i2)
    }
}

/// `ceil(a / b)` for `b > 0`, clamped to `0..=max`.
fn ceil_div_clamped(a: isize, b: isize, max: usize) -> usize {
    if a <= 0 {
        0
    } else {
        ((a + b - 1) / b).min(max as isize) as usize
    }
}

/// The taps of every output index of one axis, in O(1) each: tap `k` reads input index
/// `base + k * dilation` with `base = o * stride - pad_begin`.
fn axis_taps(a: &Axis) -> Vec<Taps> {
    let d = a.dilation as isize;
    (0..a.output)
        .map(|o| {
            let base = a.input_index(o, 0);
            let k0 = ceil_div_clamped(-base, d, a.kernel);
            let k1 = ceil_div_clamped(a.input as isize - base, d, a.kernel).max(k0);
            // Indices from -pad_begin (where base starts at the earliest) to input + pad_end.
            let padded = ceil_div_clamped(a.input as isize + a.pad_end - base, d, a.kernel);
            Taps { k0, k1, padded }
        })
        .collect()
}

/// Runs `f` on every (input plane, output plane, plane number), in parallel when large.
fn for_planes<T: Sync, U: Send>(
    x: &[T],
    in_len: usize,
    y: &mut [U],
    out_len: usize,
    work: usize,
    f: impl Fn(&[T], &mut [U], usize) + Sync + Send,
) {
    let (in_len, out_len) = (in_len.max(1), out_len.max(1));
    if work >= PARALLEL_WORK {
        crate::parallel::for_each_chunk_pair(x, in_len, y, out_len, &|p, xp, yp| f(xp, yp, p));
    } else {
        y.chunks_mut(out_len).zip(x.chunks(in_len)).enumerate().for_each(|(p, (yp, xp))| f(xp, yp, p));
    }
}

/// Max pooling of `planes` planes; with `indices`, also the flat input index of each max
/// (row-major, or column-major within the plane when `column_major`).
pub(crate) fn max_pool<T: PoolElem>(
    x: &[T],
    g: &PoolGeometry,
    indices: bool,
    column_major: bool,
) -> Result<(Vec<T>, Option<Vec<i64>>)> {
    let (in_len, out_len) = (g.in_len(), g.out_len());
    let planes = x.len().checked_div(in_len).unwrap_or(0);
    let mut y = filled(planes * out_len, T::LOWEST)?;
    let start = || (T::LOWEST, usize::MAX);
    // As onnxruntime: NaNs never win; the first of equal maxima does.
    let add = |acc: &mut (T, usize), v: T, i: usize| {
        if acc.1 == usize::MAX {
            *acc = (if v.is_nan() { T::LOWEST } else { v }, i);
        } else if v > acc.0 {
            *acc = (v, i);
        }
    };
    let work = y.len().saturating_mul(g.k_len());
    if !indices {
        let par = work >= PARALLEL_WORK;
        for_planes_init(x, in_len, &mut y, out_len, par, |x, y, rows| {
            util::simd_body(MaxPlane { x, axes: &g.axes, y, rows })
        });
        return Ok((y, None));
    }
    let mut pairs = filled(y.len(), (T::LOWEST, -1i64))?;
    for_planes(x, in_len, &mut pairs, out_len, work, |xp, yp, p| {
        g.walk(xp, start, add, |o, (v, i), _, _| {
            let within = if column_major { g.column_major(i) } else { i };
            yp[o] = (v, if i == usize::MAX { -1 } else { (p * in_len + within) as i64 });
        })
    });
    let idx = pairs.iter().map(|p| p.1).collect();
    for (d, p) in y.iter_mut().zip(&pairs) {
        *d = p.0;
    }
    Ok((y, Some(idx)))
}

/// The max of each window of one plane into `y` (which holds `T::LOWEST`), through rows laid
/// out padded and split by stride phase (as the depthwise convolution does), so the inner loop
/// is a vectorizable max over a run of the output row. NaNs never win, as in [`max_pool`].
#[inline(always)]
fn max_plane<T: PoolElem>(x: &[T], axes: &[Axis; 3], y: &mut [T], rows: &mut Vec<T>) {
    let [az, ay, ax] = *axes;
    let layout = RowLayout::new(&ax);
    let row_len = layout.row_len(&ax);
    if ax.input == 0 || ax.output == 0 {
        return;
    }
    rows.clear();
    rows.resize(az.input * ay.input * row_len, T::LOWEST);
    for (src, dst) in x.chunks_exact(ax.input).zip(rows.chunks_exact_mut(row_len)) {
        lay_out_row(src, &ax, layout, T::LOWEST, dst);
    }
    for (r, y_row) in y.chunks_exact_mut(ax.output).enumerate() {
        let (oz, oy) = (r / ay.output, r % ay.output);
        for kz in 0..az.kernel {
            let iz = az.input_index(oz, kz);
            if iz < 0 || iz as usize >= az.input {
                continue;
            }
            for ky in 0..ay.kernel {
                let iy = ay.input_index(oy, ky);
                if iy < 0 || iy as usize >= ay.input {
                    continue;
                }
                let row = &rows[(iz as usize * ay.input + iy as usize) * row_len..][..row_len];
                for kx in 0..ax.kernel {
                    let run = &row[layout.tap_offset(&ax, kx)..][..y_row.len()];
                    for (m, &v) in y_row.iter_mut().zip(run) {
                        *m = if v > *m { v } else { *m };
                    }
                }
            }
        }
    }
}

/// One plane of [`max_plane`], run through [`util::simd_body`].
struct MaxPlane<'a, T> {
    x: &'a [T],
    axes: &'a [Axis; 3],
    y: &'a mut [T],
    rows: &'a mut Vec<T>,
}

impl<T: PoolElem> util::SimdBody for MaxPlane<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        max_plane(self.x, self.axes, self.y, self.rows)
    }
}

/// Runs `f` on every (input plane, output plane, scratch), in parallel when `parallel`.
fn for_planes_init<T: Sync, U: Send>(
    x: &[T],
    in_len: usize,
    y: &mut [U],
    out_len: usize,
    parallel: bool,
    f: impl Fn(&[T], &mut [U], &mut Vec<T>) + Sync + Send,
) where
    T: Send,
{
    let (in_len, out_len) = (in_len.max(1), out_len.max(1));
    if parallel {
        y.par_chunks_mut(out_len).zip(x.par_chunks(in_len)).for_each_init(Vec::new, |s, (yp, xp)| f(xp, yp, s));
    } else {
        let mut s = Vec::new();
        y.chunks_mut(out_len).zip(x.chunks(in_len)).for_each(|(yp, xp)| f(xp, yp, &mut s));
    }
}

/// Average pooling: each window's sum divided by its valid taps, or by its taps inside the
/// padded input when `count_include_pad`.
pub(crate) fn average_pool<T: Real>(x: &[T], g: &PoolGeometry, count_include_pad: bool) -> Result<Vec<T>> {
    let (in_len, out_len) = (g.in_len(), g.out_len());
    let planes = x.len().checked_div(in_len).unwrap_or(0);
    let mut y = filled(planes * out_len, T::ZERO)?;
    let work = y.len().saturating_mul(g.k_len());
    for_planes(x, in_len, &mut y, out_len, work, |xp, yp, _| {
        g.walk(
            xp,
            || T::ZERO,
            |s, v, _| *s += v,
            |o, s, valid, padded| {
                yp[o] = s / T::from_usize(if count_include_pad { padded } else { valid });
            },
        )
    });
    Ok(y)
}

/// Lp pooling: `(sum |x|^p)^(1/p)` over each window (padding contributes nothing).
pub(crate) fn lp_pool<T: Real>(x: &[T], g: &PoolGeometry, p: f64) -> Result<Vec<T>> {
    let (in_len, out_len) = (g.in_len(), g.out_len());
    let planes = x.len().checked_div(in_len).unwrap_or(0);
    let mut y = filled(planes * out_len, T::ZERO)?;
    let work = y.len().saturating_mul(g.k_len());
    let (pt, inv) = (T::from_f64(p), T::from_f64(1.0 / p));
    for_planes(x, in_len, &mut y, out_len, work, |xp, yp, _| {
        if p == 2.0 {
            g.walk(xp, || T::ZERO, |s, v, _| *s += v * v, |o, s, _, _| yp[o] = s.sqrt());
        } else {
            g.walk(xp, || T::ZERO, |s, v, _| *s += v.abs().powf(pt), |o, s, _, _| yp[o] = s.powf(inv));
        }
    });
    Ok(y)
}

/// The `p` attribute of LpPool: an int since opset 2, a float in opset 1.
fn lp_exponent(node: &Node, at: &Location) -> Result<f64> {
    let p = match node.attr("p").map(|a| &a.value) {
        None => 2.0,
        Some(AttrValue::Int(p)) => *p as f64,
        Some(AttrValue::Float(p)) => f64::from(*p),
        Some(other) => {
            return Err(Error::attribute(at, "p", "an int", format!("an attribute of type {}", other.type_name())))
        }
    };
    if p <= 0.0 || !p.is_finite() {
        return Err(Error::attribute(at, "p", "a positive number", p.to_string()));
    }
    Ok(p)
}

/// A decoded pooling node (windowed or global).
pub(crate) struct PoolOp {
    at: Location,
    reduce: Reduce,
    /// `None` for the global ops.
    window: Option<WindowAttrs>,
    ceil_mode: bool,
    count_include_pad: bool,
    column_major: bool,
    p: f64,
}

fn flag(node: &Node, name: &str, at: &Location) -> Result<bool> {
    match node.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::attribute(at, name, "0 or 1", v.to_string())),
    }
}

fn build_pool(ctx: &NodeContext<'_>, reduce: Reduce) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(pool_op(ctx.node, reduce)?))
}

/// The windowed pool `reduce` with `node`'s attributes.
pub(crate) fn pool_op(node: &Node, reduce: Reduce) -> Result<PoolOp> {
    let at = node.location();
    let window = WindowAttrs::from_node(node)?;
    if window.kernel_shape.is_none() {
        return Err(Error::attribute(&at, "kernel_shape", "a list of kernel sizes", "no attribute"));
    }
    Ok(PoolOp {
        reduce,
        window: Some(window),
        ceil_mode: flag(node, "ceil_mode", &at)?,
        count_include_pad: flag(node, "count_include_pad", &at)?,
        column_major: flag(node, "storage_order", &at)?,
        p: if reduce == Reduce::Lp { lp_exponent(node, &at)? } else { 2.0 },
        at,
    })
}

fn build_global(ctx: &NodeContext<'_>, reduce: Reduce) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let p = if reduce == Reduce::Lp { lp_exponent(ctx.node, &at)? } else { 2.0 };
    Ok(Box::new(PoolOp {
        at,
        reduce,
        window: None,
        ceil_mode: false,
        count_include_pad: false,
        column_major: false,
        p,
    }))
}

impl PoolOp {
    /// The window over X's spatial axes (the whole plane for the global ops) and Y's shape.
    fn geometry(&self, x: &[usize]) -> Result<(PoolGeometry, Vec<usize>)> {
        let at = &self.at;
        let rank = x.len();
        let min_rank = if self.window.is_some() { 3 } else { 2 };
        if rank < min_rank {
            return Err(Error::input(
                at,
                0,
                format!("a tensor of rank {min_rank} or more ([N, C, spatial...])"),
                format!("shape {x:?}"),
            ));
        }
        if rank > MAX_SPATIAL + 2 {
            return Err(Error::Unsupported(format!(
                "{at} (pooling over {} spatial dimensions; at most {MAX_SPATIAL})",
                rank - 2
            )));
        }
        let axes = match &self.window {
            Some(w) => w.resolve(x, w.kernel_shape.as_deref().unwrap_or_default(), self.ceil_mode, at)?,
            None => x[2..].iter().map(|&d| Axis { input: d, kernel: d, output: 1, ..Axis::UNIT }).collect(),
        };
        let mut shape = x[..2].to_vec();
        shape.extend(axes.iter().map(|a| a.output));
        onyx_core::element_count(&shape).map_err(|e| e.at(at))?;
        Ok((PoolGeometry::new(to_3d(&axes)), shape))
    }

    fn run_float<T: Real + PoolElem>(
        &self,
        x: &TensorView<'_>,
        g: &PoolGeometry,
        shape: Vec<usize>,
        indices: bool,
    ) -> Result<Vec<Value>> {
        let xs = float_slice::<T>(x)?;
        let (y, idx) = match self.reduce {
            Reduce::Max => max_pool(&xs, g, indices, self.column_major)?,
            Reduce::Average => (average_pool(&xs, g, self.count_include_pad)?, None),
            Reduce::Lp => (lp_pool(&xs, g, self.p)?, None),
        };
        let mut out = vec![float_output(x.dtype(), shape.clone(), y)?];
        if let Some(idx) = idx {
            out.push(util::out(shape, idx)?);
        }
        Ok(out)
    }

    fn run_int<T: PoolElem + onyx_core::Element>(
        &self,
        x: &TensorView<'_>,
        g: &PoolGeometry,
        shape: Vec<usize>,
        indices: bool,
    ) -> Result<Vec<Value>> {
        let (y, idx) = max_pool(x.as_slice::<T>()?, g, indices, self.column_major)?;
        let mut out = vec![util::out(shape.clone(), y)?];
        if let Some(idx) = idx {
            out.push(util::out(shape, idx)?);
        }
        Ok(out)
    }
}

impl Kernel for PoolOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let (g, shape) = self.geometry(x.shape())?;
        let indices = self.reduce == Reduce::Max && self.window.is_some() && wanted.get(1).copied().unwrap_or(false);
        let windowed_max = self.reduce == Reduce::Max && self.window.is_some();
        match (compute_type(x.dtype()), x.dtype()) {
            (Some(DataType::Double), _) => self.run_float::<f64>(&x, &g, shape, indices),
            (Some(_), _) => self.run_float::<f32>(&x, &g, shape, indices),
            (None, DataType::Int8) if windowed_max => self.run_int::<i8>(&x, &g, shape, indices),
            (None, DataType::Uint8) if windowed_max => self.run_int::<u8>(&x, &g, shape, indices),
            (None, other) => {
                let allowed = if windowed_max {
                    "a float, double, float16, bfloat16, int8 or uint8 tensor"
                } else {
                    "a float, double, float16 or bfloat16 tensor"
                };
                Err(Error::input(&self.at, 0, allowed, other.name()))
            }
        }
    }
}

#[cfg(test)]
mod tests;
