//! f32 convolution as an implicit GEMM on AVX-512: `C[M, N] = A[M, K] * B[K, N]` per (image,
//! group), with M the output channels, K = C_in/group * kernel taps and N the output positions.
//! A is the weight tensor read in place (no packing: its rows are already contiguous); B is
//! never materialized as an im2col matrix: panels of [`NR`] output positions are packed
//! straight from the NCHW input (zeros where the window reads padding) into a per-thread
//! buffer that stays in cache while every row tile of A runs over it ([`microkernel::tile`]).
//!
//! Threads split C into blocks of columns (a few panels each) and, when there are too few of
//! those, of rows too; each thread finishes its block with the [`Epilogue`] while it is in cache.

use rayon::prelude::*;

use super::geometry::Axis;
use super::kernels::{ConvShape, Epilogue};
use super::microkernel::{self, MR, NR};

/// Bytes of packed B one work item keeps (it should stay in the core's L2).
const PANEL_BYTES: usize = 384 << 10;
/// Taps of one slice of the reduction: a slice of a panel is `KC * NR * 4` = 24 KiB (L1).
const KC: usize = 192;
/// Most panels in one work item.
const MAX_PANELS: usize = 8;
/// Products with fewer multiply-adds run on the calling thread.
const SERIAL_WORK: usize = 1 << 19;

/// True when [`conv`] can run on this CPU (else callers take the generic GEMM path).
pub(crate) fn available() -> bool {
    microkernel::available()
}

/// Sizes of one (image, group) product.
#[derive(Clone, Copy, Debug)]
struct Dims {
    m: usize,
    k: usize,
    n: usize,
}

/// Finishes the row segment of C at (row, first column).
type Post<'a> = &'a (dyn Fn(usize, usize, &mut [f32]) + Sync);

/// A pointer to one item's output that threads writing disjoint blocks share.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: each work item writes only its own rows x columns block of the output through this
// pointer (blocks are disjoint), and f32 is Send.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// Convolution of `x` by `w` into `y` (every element overwritten), each block then finished by
/// `epi`. The caller has checked the buffer sizes ([`ConvShape::check`]) and [`available`].
pub(crate) fn conv(x: &[f32], w: &[f32], s: &ConvShape, y: &mut [f32], epi: &Epilogue<'_, f32>) {
    let d = Dims { m: s.mg(), k: s.cg() * s.k_len(), n: s.out_len() };
    if d.m == 0 || d.n == 0 {
        return;
    }
    let item_len = d.m * d.n;
    let threads =
        if d.m.saturating_mul(d.n).saturating_mul(d.k) < SERIAL_WORK { 1 } else { rayon::current_num_threads() };
    for (i, y_ng) in y.chunks_mut(item_len).enumerate() {
        let (n, g) = (i / s.group, i % s.group);
        let x_ng = &x[(n * s.c_in + g * s.cg()) * s.in_len()..][..s.cg() * s.in_len()];
        let w_g = &w[g * d.m * d.k..][..d.m * d.k];
        let post = |r: usize, col: usize, seg: &mut [f32]| epi.apply(g * d.m + r, i * item_len + r * d.n + col, seg);
        item(x_ng, w_g, s, d, y_ng, threads, (!epi.is_identity()).then_some(&post));
    }
}

/// One (image, group): splits C into work items and runs them on `threads` threads.
fn item(x: &[f32], w: &[f32], s: &ConvShape, d: Dims, y: &mut [f32], threads: usize, post: Option<Post<'_>>) {
    let panels = d.n.div_ceil(NR);
    let per_block = (PANEL_BYTES / d.k.saturating_mul(NR * 4).max(1)).clamp(1, MAX_PANELS).min(panels);
    let col_blocks = panels.div_ceil(per_block);
    let m_tiles = d.m.div_ceil(MR);
    // Enough items for every thread to get several (so that uneven ones even out).
    let row_blocks = if threads == 1 { 1 } else { (4 * threads).div_ceil(col_blocks).min(m_tiles) };
    let tiles_per_row_block = m_tiles.div_ceil(row_blocks);
    let row_blocks = m_tiles.div_ceil(tiles_per_row_block);
    let out = SharedOut(y.as_mut_ptr());
    debug_assert_eq!(y.len(), d.m * d.n);
    let taps = Taps::new(s);
    let run = |scratch: &mut Vec<f32>, job: usize| {
        let out = out;
        let (cb, rb) = (job / row_blocks, job % row_blocks);
        let cols = cb * per_block * NR..((cb + 1) * per_block * NR).min(d.n);
        let rows = rb * tiles_per_row_block * MR..((rb + 1) * tiles_per_row_block * MR).min(d.m);
        block(x, w, &taps, d, rows, cols, out, scratch, post);
    };
    let jobs = col_blocks * row_blocks;
    if threads == 1 || jobs == 1 {
        let mut scratch = Vec::new();
        (0..jobs).for_each(|j| run(&mut scratch, j));
    } else {
        (0..jobs).into_par_iter().for_each_init(Vec::new, run);
    }
}

/// Computes and finishes the block `rows x cols` of C (through `out`, the item's output).
#[allow(clippy::too_many_arguments)]
fn block(
    x: &[f32],
    w: &[f32],
    taps: &Taps,
    d: Dims,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    out: SharedOut,
    scratch: &mut Vec<f32>,
    post: Option<Post<'_>>,
) {
    let panels = cols.len().div_ceil(NR);
    let panel_len = d.k * NR;
    // A full panel of a pointwise convolution is read from X in place (rows of stride n).
    let direct = |p: usize| taps.pointwise && cols.start + (p + 1) * NR <= cols.end;
    scratch.resize(panels * panel_len, 0.0);
    for (p, panel) in scratch.chunks_exact_mut(panel_len).enumerate().filter(|(p, _)| !direct(*p)) {
        let j0 = cols.start + p * NR;
        pack_panel(x, taps, j0, NR.min(cols.end - j0), panel);
    }
    let mut edge = [0.0f32; MR * NR];
    // Slices of KC taps: the slice of a panel (KC x NR) stays in L1 while every row tile of
    // the block runs over it; tiles after the first slice add to C.
    for k0 in (0..d.k).step_by(KC) {
        let kc = KC.min(d.k - k0);
        for p in 0..panels {
            let j0 = cols.start + p * NR;
            let valid_cols = NR.min(cols.end - j0);
            let (b, b0, ldb) =
                if direct(p) { (x, j0 + k0 * d.n, d.n) } else { (&scratch[..], p * panel_len + k0 * NR, NR) };
            for r0 in rows.clone().step_by(MR) {
                let valid_rows = MR.min(rows.end - r0);
                let a_rows: [usize; MR] = std::array::from_fn(|r| (r0 + r.min(valid_rows - 1)) * d.k + k0);
                let acc = k0 > 0;
                if valid_rows == MR && valid_cols == NR {
                    // SAFETY: `available()` holds (the caller's contract); rows a_rows[r]..+kc lie
                    // in W (r0 + r < m rows of k elements, k0 + kc <= k); B: a packed panel holds
                    // k * NR elements from p * panel_len, and a direct one reads X's k rows of n
                    // elements at columns j0..j0 + NR <= n (`x` is the item's k x n input,
                    // checked by the caller); the tile's rows r0..r0 + MR, columns j0..j0 + NR
                    // are inside this item's m x n output (pointer from `y`, which `item`
                    // borrows mutably until every block is done) and belong to this block only.
                    unsafe { microkernel::tile(kc, w, &a_rows, b, b0, ldb, out.0.add(r0 * d.n + j0), d.n, acc) };
                    continue;
                }
                for r in 0..valid_rows {
                    // SAFETY: row r0 + r < m, columns j0..j0 + valid_cols <= n: inside the
                    // item's output and owned by this block.
                    let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add((r0 + r) * d.n + j0), valid_cols) };
                    if acc {
                        edge[r * NR..][..valid_cols].copy_from_slice(dst);
                    }
                }
                // SAFETY: as above for A and B; the tile is read and written in `edge` (MR rows
                // of NR elements, ldc = NR).
                unsafe { microkernel::tile(kc, w, &a_rows, b, b0, ldb, edge.as_mut_ptr(), NR, acc) };
                for r in 0..valid_rows {
                    // SAFETY: as above.
                    let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add((r0 + r) * d.n + j0), valid_cols) };
                    dst.copy_from_slice(&edge[r * NR..][..valid_cols]);
                }
            }
        }
    }
    let Some(post) = post else { return };
    for r in rows {
        // SAFETY: row r < m, columns cols (inside 0..n): this block's elements, all written above.
        let seg = unsafe { std::slice::from_raw_parts_mut(out.0.add(r * d.n + cols.start), cols.len()) };
        post(r, cols.start, seg);
    }
}

/// Where each row of B reads the input: one entry per (channel, kz, ky, kx) tap, worked out
/// once per convolution so that packing does no divisions.
struct Taps {
    /// The window geometry.
    axes: [Axis; 3],
    /// True for a 1x1, stride-1, unpadded window: B is X itself.
    pointwise: bool,
    rows: Vec<TapRow>,
}

/// One row of B: `x[plane + (iz * H + iy) * W + ix]` with `iz = oz * sz + dz` (likewise y, x).
#[derive(Clone, Copy)]
struct TapRow {
    plane: usize,
    dz: isize,
    dy: isize,
    dx: isize,
    /// Output columns `x0..x1` read inside the input along W.
    x0: usize,
    x1: usize,
}

impl Taps {
    fn new(s: &ConvShape) -> Self {
        let [az, ay, ax] = s.axes;
        let shift = |a: &Axis, k: usize| (k * a.dilation) as isize - a.pad_begin;
        let mut rows = Vec::with_capacity(s.cg() * s.k_len());
        for c in 0..s.cg() {
            for kz in 0..az.kernel {
                for ky in 0..ay.kernel {
                    for kx in 0..ax.kernel {
                        let (x0, x1) = ax.valid_outputs(kx);
                        let (dz, dy, dx) = (shift(&az, kz), shift(&ay, ky), shift(&ax, kx));
                        rows.push(TapRow { plane: c * s.in_len(), dz, dy, dx, x0, x1 });
                    }
                }
            }
        }
        let pointwise =
            s.axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.output == a.input);
        Taps { axes: s.axes, pointwise, rows }
    }
}

/// Packs the panel of B for output positions `j0..j0 + width` (`width <= NR`): row p of the
/// panel (`NR` elements, zero past `width`) holds, for each of those positions, the input value
/// that tap p reads, or zero where it reads padding. Works one run of output positions along W
/// (inside one output row) at a time, over every tap.
fn pack_panel(x: &[f32], taps: &Taps, j0: usize, width: usize, panel: &mut [f32]) {
    let [az, ay, ax] = taps.axes;
    panel.fill(0.0);
    let mut done = 0;
    while done < width {
        let j = j0 + done;
        let (row, ox) = (j / ax.output, j % ax.output);
        let len = (ax.output - ox).min(width - done);
        let (oz, oy) = (row / ay.output, row % ay.output);
        let (bz, by) = ((oz * az.stride) as isize, (oy * ay.stride) as isize);
        for (t, dst) in taps.rows.iter().zip(panel.chunks_exact_mut(NR)) {
            let (iz, iy) = (bz + t.dz, by + t.dy);
            let (lo, hi) = (t.x0.max(ox), t.x1.min(ox + len));
            if iz < 0 || iz >= az.input as isize || iy < 0 || iy >= ay.input as isize || lo >= hi {
                continue;
            }
            let ix = (lo * ax.stride) as isize + t.dx;
            let start = t.plane + (iz as usize * ay.input + iy as usize) * ax.input + ix as usize;
            // SAFETY: `available()` holds (the caller's contract); the function checks its own
            // bounds.
            unsafe { microkernel::copy_run(x, start, ax.stride, hi - lo, &mut dst[done + lo - ox..]) };
        }
        done += len;
    }
}

#[cfg(test)]
mod tests;
