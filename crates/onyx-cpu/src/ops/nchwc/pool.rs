//! `ai.onyx` pooling on blocked NCHWc tensors: NchwcMaxPool and NchwcAveragePool (the ONNX
//! ops' attributes, explicit pads) and NchwcGlobalAveragePool / NchwcGlobalMaxPool.
//!
//! NchwcMaxPool takes, for each output pixel, the lane-wise max of the `b`-lane vectors of its
//! window's pixels. A blocked `[N, C/b, H, W, b]` tensor is also a 3-D pooling input whose last
//! axis (the lanes) has a unit window, so NchwcAveragePool runs the plain pooling kernel with
//! that axis added. The global ones sum (or take the max of) every pixel's lane vector.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{AttrValue, Node, ONYX_DOMAIN};
use onyx_core::{host_pool, DataType, Error, Location, Result, Value};

use super::conv::shape::{interior, valid_taps};
use super::reorder::block_attr;
use crate::ops::conv::geometry::{Axis, WindowAttrs};
use crate::ops::matmul::gemm::PARALLEL_WORK;
use crate::ops::pool::{pool_op, PoolOp, Reduce};
use crate::ops::util;
use crate::Registry;

/// Registers the NCHWc pools.
pub fn register(r: &mut Registry) {
    r.add_in(ONYX_DOMAIN, "NchwcMaxPool", |ctx| windowed(ctx, Reduce::Max));
    r.add_in(ONYX_DOMAIN, "NchwcAveragePool", |ctx| windowed(ctx, Reduce::Average));
    r.add_in(ONYX_DOMAIN, "NchwcGlobalMaxPool", |ctx| global(ctx, Reduce::Max));
    r.add_in(ONYX_DOMAIN, "NchwcGlobalAveragePool", |ctx| global(ctx, Reduce::Average));
}

/// A windowed pool on blocked tensors: the plain pool with a unit lane axis.
struct BlockedPool {
    at: Location,
    block: usize,
    pool: PoolOp,
}

/// `node`'s window attributes with a unit axis appended (the lanes).
fn with_lane_axis(node: &Node) -> Result<Node> {
    let at = node.location();
    let mut plain = node.clone();
    for a in &mut plain.attributes {
        if let AttrValue::Ints(v) = &mut a.value {
            match a.name.as_str() {
                "kernel_shape" | "strides" | "dilations" => v.push(1),
                "pads" if v.len() % 2 == 0 => {
                    let end = v.split_off(v.len() / 2);
                    v.push(0);
                    v.extend(end);
                    v.push(0);
                }
                "pads" => return Err(Error::attribute(&at, "pads", "begin and end values per axis", format!("{v:?}"))),
                _ => {}
            }
        }
    }
    if node.get_string("auto_pad")?.is_some_and(|p| p != "NOTSET") {
        return Err(Error::attribute(&at, "auto_pad", "NOTSET (explicit pads)", "another mode"));
    }
    if node.int_or("storage_order", 0)? != 0 {
        return Err(Error::attribute(&at, "storage_order", "0", "1 (no Indices output on blocked tensors)"));
    }
    plain.attributes.retain(|a| a.name != "block");
    if plain.get_ints("kernel_shape")?.is_some_and(|k| k.len() != 3) {
        return Err(Error::attribute(
            &at,
            "kernel_shape",
            "two kernel sizes (H, W)",
            format!("{:?}", node.get_ints("kernel_shape")?),
        ));
    }
    Ok(plain)
}

fn windowed(ctx: &NodeContext<'_>, reduce: Reduce) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let block = block_attr(node)?;
    // The checks of the plain op (and its kernel, for AveragePool).
    let pool = pool_op(&with_lane_axis(node)?, reduce)?;
    if reduce == Reduce::Max {
        let window = WindowAttrs::from_node(node)?;
        let ceil_mode = node.int_or("ceil_mode", 0)? != 0;
        return Ok(Box::new(BlockedMaxPool { at: node.location(), block, window, ceil_mode }));
    }
    Ok(Box::new(BlockedPool { at: node.location(), block, pool }))
}

/// NchwcMaxPool: lane-wise max over each window.
struct BlockedMaxPool {
    at: Location,
    block: usize,
    window: WindowAttrs,
    ceil_mode: bool,
}

impl Kernel for BlockedMaxPool {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let (at, b) = (&self.at, self.block);
        let x = util::input(inputs, 0, at)?;
        check_blocked(&x, b, at)?;
        let &[n, blocks, h, w, _] = x.shape() else { unreachable!("checked rank 5") };
        let kernel = self.window.kernel_shape.as_deref().unwrap_or_default();
        let axes = self.window.resolve(&[n, blocks, h, w], kernel, self.ceil_mode, at)?;
        let (rows, cols) = (axes[0], axes[1]);
        let shape = vec![n, blocks, rows.output, cols.output, b];
        let mut y = host_pool::take::<f32>(onyx_core::element_count(&shape).map_err(|e| e.at(at))?);
        let xs = x.as_slice::<f32>()?;
        let row_len = (cols.output * b).max(1);
        let one = |(r, dst): (usize, &mut [f32])| {
            let (plane, oh) = (r / rows.output, r % rows.output);
            let src = &xs[plane * h * w * b..][..h * w * b];
            util::simd_body(MaxRow { src, rows: &rows, cols: &cols, oh, b, dst })
        };
        if y.len().saturating_mul(rows.kernel * cols.kernel) >= PARALLEL_WORK {
            crate::parallel::for_each_chunk_mut(&mut y, row_len, &|r, dst| one((r, dst)));
        } else {
            y.chunks_mut(row_len).enumerate().for_each(one);
        }
        Ok(vec![util::out(shape, y)?])
    }
}

/// One output row of NchwcMaxPool: `dst[ow][lane]` = the max over the window of (oh, ow) in
/// `src` (one blocked plane); NaNs never win, as in the plain MaxPool.
struct MaxRow<'a> {
    src: &'a [f32],
    rows: &'a Axis,
    cols: &'a Axis,
    oh: usize,
    b: usize,
    dst: &'a mut [f32],
}

impl util::SimdBody for MaxRow<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        match self.b {
            16 => self.run_lanes::<16>(),
            8 => self.run_lanes::<8>(),
            _ => self.run_any(),
        }
    }
}

impl MaxRow<'_> {
    /// The row with `B` lanes known at compile time (one vector max per tap). Each window
    /// row is sliced once (one bounds check), then its taps are consecutive chunks of it.
    #[inline(always)]
    fn run_lanes<const B: usize>(self) {
        let MaxRow { src, rows, cols, oh, dst, .. } = self;
        let (h0, h1) = valid_taps(rows, oh);
        let inside = interior(cols);
        let (line, step) = (cols.input * B, cols.dilation * B);
        for (ow, out) in dst.chunks_exact_mut(B).enumerate() {
            let mut m = [f32::NEG_INFINITY; B];
            let (w0, w1) = if (inside.0..inside.1).contains(&ow) { (0, cols.kernel) } else { valid_taps(cols, ow) };
            if w0 < w1 {
                let first = cols.input_index(ow, w0) as usize * B;
                let span = (w1 - w0 - 1) * step + B;
                for kh in h0..h1 {
                    let ih = rows.input_index(oh, kh) as usize;
                    let Some(window) = src.get(ih * line + first..).and_then(|s| s.get(..span)) else { continue };
                    for pixel in window.chunks(step).filter_map(|p| p.first_chunk::<B>()) {
                        for (m, &v) in m.iter_mut().zip(pixel) {
                            *m = if v > *m { v } else { *m };
                        }
                    }
                }
            }
            out.copy_from_slice(&m);
        }
    }

    /// The row for any block size.
    #[inline(always)]
    fn run_any(self) {
        let MaxRow { src, rows, cols, oh, b, dst } = self;
        let (h0, h1) = valid_taps(rows, oh);
        for (ow, out) in dst.chunks_exact_mut(b).enumerate() {
            out.fill(f32::NEG_INFINITY);
            let (w0, w1) = valid_taps(cols, ow);
            for kh in h0..h1 {
                let ih = rows.input_index(oh, kh) as usize;
                for kw in w0..w1 {
                    let iw = cols.input_index(ow, kw) as usize;
                    let pixel = &src[(ih * cols.input + iw) * b..][..b];
                    for (m, &v) in out.iter_mut().zip(pixel) {
                        *m = if v > *m { v } else { *m };
                    }
                }
            }
        }
    }
}

/// Checks that `x` is a blocked f32 tensor of block `b`.
fn check_blocked(x: &onyx_core::TensorView<'_>, b: usize, at: &Location) -> Result<()> {
    util::expect_dtype(x, &[DataType::Float], 0, at)?;
    match *x.shape() {
        [_, _, _, _, lanes] if lanes == b => Ok(()),
        _ => Err(Error::input(
            at,
            0,
            format!("a blocked tensor [N, C/{b}, H, W, {b}]"),
            format!("shape {:?}", x.shape()),
        )),
    }
}

impl Kernel for BlockedPool {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        check_blocked(&util::input(inputs, 0, &self.at)?, self.block, &self.at)?;
        let mut out = self.pool.run(inputs, &[true, false])?;
        out.truncate(1);
        Ok(out)
    }
}

/// A global pool on blocked tensors.
struct GlobalPool {
    at: Location,
    block: usize,
    reduce: Reduce,
}

fn global(ctx: &NodeContext<'_>, reduce: Reduce) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GlobalPool { at: ctx.node.location(), block: block_attr(ctx.node)?, reduce }))
}

impl Kernel for GlobalPool {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let (at, b) = (&self.at, self.block);
        let x = util::input(inputs, 0, at)?;
        check_blocked(&x, b, at)?;
        let &[n, blocks, h, w, _] = x.shape() else { unreachable!("checked rank 5") };
        let pixels = h * w;
        if pixels == 0 {
            return Err(Error::input(at, 0, "at least one pixel", format!("shape {:?}", x.shape())));
        }
        let xs = x.as_slice::<f32>()?;
        let mut y = host_pool::take::<f32>(n * blocks * b);
        let reduce = self.reduce;
        let one = |(plane, dst): (usize, &mut [f32])| {
            util::simd(|| reduce_plane(&xs[plane * pixels * b..][..pixels * b], reduce, pixels, dst))
        };
        if xs.len() >= PARALLEL_WORK {
            crate::parallel::for_each_chunk_mut(&mut y, b, &|p, dst| one((p, dst)));
        } else {
            y.chunks_mut(b).enumerate().for_each(one);
        }
        Ok(vec![util::out(vec![n, blocks, 1, 1, b], y)?])
    }
}

/// The mean (or max: NaNs never win, as the plain pools) over the pixels of one blocked plane,
/// lane by lane, into `dst` (`b` lanes).
#[inline(always)]
fn reduce_plane(plane: &[f32], reduce: Reduce, pixels: usize, dst: &mut [f32]) {
    match reduce {
        Reduce::Max => {
            dst.fill(f32::NEG_INFINITY);
            for pixel in plane.chunks_exact(dst.len()) {
                for (m, &v) in dst.iter_mut().zip(pixel) {
                    *m = if v > *m { v } else { *m };
                }
            }
        }
        _ => {
            dst.fill(0.0);
            for pixel in plane.chunks_exact(dst.len()) {
                for (s, &v) in dst.iter_mut().zip(pixel) {
                    *s += v;
                }
            }
            let scale = 1.0 / pixels as f32;
            dst.iter_mut().for_each(|s| *s *= scale);
        }
    }
}

#[cfg(test)]
mod tests;
