//! The direct NCHWc convolution (every input channel feeds every output channel): register
//! tiles of `P` output pixels of one row by `Q` output channel blocks (3 x 4, 3 x 3, 6 x 2 or
//! 12 x 1 with AVX2; 6 x 4, 8 x 3, 12 x 2 or 24 x 1 with AVX-512). For each input channel of
//! each kernel tap the tile loads one weight vector per output block and broadcasts one input
//! value per pixel: `P * Q` multiply-adds for `P + Q` loads. Where rows are too narrow for
//! wide tiles (a 7x7 map on AVX2) a tile's pixels run on over the next rows
//! (`Tile::run_span`). Pointwise convolutions run as one long row (`flattened`); a plain NCHW
//! input is read through its own strides, or as the interleaved copy of [`super::stem`].
//!
//! Work is split into items of (image, group of output blocks, rows, columns) small enough
//! that their output stays in L1 while every input channel block is added into it; the
//! epilogue then finishes the item while it is still there.

use std::ops::Range;

use super::pack::DenseWeights;
use super::shape::{interior, valid_taps, ConvGeometry, RegisterEpilogue};
use super::{BlockGroups, ConvJob, Items, ITEMS_PER_THREAD, ITEM_BYTES};
use crate::ops::lanes::Lanes;
use crate::ops::prefetch;

/// A direct convolution.
pub(crate) type DirectJob<'a> = ConvJob<'a, DenseWeights>;

/// The work items of a direct convolution and the output block groups they take.
pub(crate) struct DirectItems {
    /// (image, block group, rows, columns).
    pub items: Items,
    /// How output blocks are grouped into register tiles.
    pub groups: BlockGroups,
}

impl DirectJob<'_> {
    /// How the output is split into work items for lanes `V` and `threads` threads
    /// ([`Split::items`]).
    pub(super) fn items<V: Lanes>(&self, threads: usize) -> DirectItems {
        let g = &self.geometry;
        let groups = self.weights.groups;
        debug_assert_eq!(groups, BlockGroups::new(g.out_blocks(), V::BLOCKS));
        // Segments are whole tiles where partial tiles are narrower than full ones.
        let full = full_tile::<V>(groups.widest());
        let split = Split {
            pixel_bytes: groups.widest() * g.block * 4,
            grain: if full > PARTIAL_TILE { full } else { 1 },
            shortest: V::ACCUMULATORS,
            wanted: ITEMS_PER_THREAD * threads,
        };
        DirectItems { items: split.items(g.batch, groups.count, g.rows.output, g.cols.output), groups }
    }
}

/// How [`DirectJob::items`] cuts an output into work items.
#[derive(Clone, Copy, Debug)]
pub(super) struct Split {
    /// Output bytes of one pixel of a block group.
    pub pixel_bytes: usize,
    /// Pixels a row segment is a multiple of (except a row's last).
    pub grain: usize,
    /// Fewest pixels of a segment cut to make more items.
    pub shortest: usize,
    /// Items wanted.
    pub wanted: usize,
}

impl Split {
    /// Items of (image, group, rows, row segment): each item's output fits [`ITEM_BYTES`] (a
    /// long flattened row is cut into segments), and there are `wanted` items where rows and
    /// segments can be cut that fine. A row's segments are as even as the grain allows: a
    /// short remainder would stream the group's weights for a few pixels.
    pub(super) fn items(&self, batch: usize, groups: usize, rows: usize, cols: usize) -> Items {
        let cols = cols.max(1);
        let seg = |segments: usize| cols.div_ceil(segments).next_multiple_of(self.grain).min(cols);
        let shortest = self.shortest.min(cols);
        let mut segments = (cols * self.pixel_bytes).div_ceil(ITEM_BYTES).max(1);
        let mut per_item = (ITEM_BYTES / (seg(segments) * self.pixel_bytes).max(1)).clamp(1, rows.max(1));
        let items = |per_item: usize, segments: usize| Items::new(batch, groups, rows, per_item, cols, seg(segments));
        while items(per_item, segments).count() < self.wanted {
            if per_item > 1 {
                per_item = per_item.div_ceil(2);
            } else if seg(segments + 1) < seg(segments) && seg(segments + 1) >= shortest {
                segments += 1;
            } else {
                break;
            }
        }
        items(per_item, segments)
    }
}

/// Pixels of a full register tile of `blocks` output blocks. AVX2 runs 3 blocks as 3 x 3 with
/// the broadcasts held (13 registers): 4 x 3 with the weights held needs all 16, and LLVM then
/// spills accumulators.
const fn full_tile<V: Lanes>(blocks: usize) -> usize {
    if V::WIDTH == 8 && blocks == 3 {
        return 3;
    }
    V::ACCUMULATORS / if blocks == 0 { 1 } else { blocks }
}

/// True when lanes `V` may be given a tile of `p` pixels by `q` output blocks: `q` up to
/// `V::BLOCKS`, and `p` the full tile's pixels or a partial tile no wider ([`EvenTiles`] never
/// cuts a tile wider than the full one; the pixels beside unmasked padding go one by one).
/// The tile kernels compile only these: `dispatch!` names every size, and the others (a
/// 24-pixel tile of plain 16-float arrays for the portable lanes) took most of this crate's
/// build time.
const fn has_tile<V: Lanes>(p: usize, q: usize) -> bool {
    let full = full_tile::<V>(q);
    q >= 1 && q <= V::BLOCKS && p >= 1 && (p == full || (p <= PARTIAL_TILE && p <= full))
}

/// Multiply-add steps (taps x channels) a tile runs between loading and storing its
/// accumulators: a pointwise convolution's tiles take several input blocks at once.
const CHUNK_STEPS: usize = 64;

/// Multiply-add steps between loading and storing the accumulators of a tile that spans rows
/// (its taps outermost, so each tap's pixel pointers are worked out once for several input
/// blocks; their weights, ~4 KiB each, stay in L1).
const SPAN_CHUNK_STEPS: usize = 288;

/// Most pixels of a tile that spans rows: one pointer each must stay in a register.
const SPAN_PIXELS: usize = 8;

/// Fewest accumulators a row's narrowest tile may have before the tiles span rows instead:
/// below it the multiply-adds wait on each other (AVX2's 4 + 3 pixel tiles of a 7-pixel row by
/// 2 blocks: 8 and 6). Above it the row tiles are as fast (AVX-512's 4 blocks: 16 and 12; on
/// the Xeon spanning rows there was 10-15% slower).
const MIN_ROW_ACCUMULATORS: usize = 10;

/// True when the tiles of an item with columns `cols` (and `full` pixels in a full tile of
/// `blocks` output blocks) run over its whole rows as one run of pixels ([`Tile::run_span`]):
/// the rows are too narrow for wide row tiles, the item covers whole rows of a convolution
/// that [`masks_padding`] and is not a pointwise one run as a single row (already one run).
fn spans_rows(g: &ConvGeometry, cols: &Range<usize>, full: usize, blocks: usize) -> bool {
    let narrowest = cols.len() / EvenTiles::new(cols.len(), full).tiles.max(1);
    narrowest * blocks < MIN_ROW_ACCUMULATORS
        && masks_padding(g)
        && full <= SPAN_PIXELS
        && g.rows.output > 1
        && cols.start == 0
        && cols.end == g.cols.output
}

/// Most pixels of a tile that is not full (the rest of a row).
pub(super) const PARTIAL_TILE: usize = 6;

/// Zeros that the pixels of a tile read for the taps that fall in the padding, when the
/// input's channels are contiguous (the blocked layout; blocks up to 64 channels).
static ZEROS: [f32; 64] = [0.0; 64];

/// True when a tile may cover pixels whose taps fall in the column padding: their reads go
/// to [`ZEROS`], which needs the channels of a block contiguous.
fn masks_padding(g: &ConvGeometry) -> bool {
    g.input.channel == 1 && g.block <= ZEROS.len()
}

/// The tiles of one output row segment `cols`, as (first pixel, pixels, column taps), with
/// `full` pixels in a full tile. When [`masks_padding`], the segment is cut into tiles as even
/// as the kernels allow (7 pixels: 4 + 3, not 6 + 1), each running every column tap;
/// otherwise the pixels next to the padding go one by one with their valid taps.
fn row_tiles(
    g: &ConvGeometry,
    cols: Range<usize>,
    full: usize,
) -> impl Iterator<Item = (usize, usize, (usize, usize))> + '_ {
    let masked = masks_padding(g);
    let (inner_lo, inner_hi) = if masked { (cols.start, cols.end) } else { interior(&g.cols) };
    let mut ow = cols.start;
    let mut even = EvenTiles::new(0, full);
    std::iter::from_fn(move || {
        if ow >= cols.end {
            return None;
        }
        let tile = if (inner_lo..inner_hi).contains(&ow) {
            if even.left == 0 {
                even = EvenTiles::new(inner_hi.min(cols.end) - ow, full);
            }
            (ow, even.next(), (0, g.cols.kernel))
        } else {
            (ow, 1, valid_taps(&g.cols, ow))
        };
        ow += tile.1;
        Some(tile)
    })
}

/// A run of `left` pixels cut into as few tiles as the kernels allow, of sizes that differ by
/// at most one: each `full` or at most [`PARTIAL_TILE`].
pub(super) struct EvenTiles {
    pub(super) left: usize,
    tiles: usize,
}

impl EvenTiles {
    pub(super) fn new(run: usize, full: usize) -> Self {
        let fits = |tiles: usize| {
            let big = run.div_ceil(tiles.max(1));
            (big == full || big <= PARTIAL_TILE) && (run / tiles.max(1) == full || run / tiles.max(1) <= PARTIAL_TILE)
        };
        let tiles = (run.div_ceil(full.max(1))..=run).find(|&t| fits(t)).unwrap_or(run);
        EvenTiles { left: run, tiles }
    }

    /// The next tile's pixels.
    pub(super) fn next(&mut self) -> usize {
        let size = self.left.div_ceil(self.tiles.max(1));
        self.left -= size;
        self.tiles -= 1;
        size
    }
}

/// Computes work item `item` of `job` with lanes `V` (`V::WIDTH == job.geometry.block`).
///
/// # Safety
/// The CPU has `V`'s instruction set; `job.x` and `job.weights` match `job.geometry` (the
/// caller checked their lengths); `job.y` points to `geometry.out_len()` writable elements
/// that only this call writes in this item's range (items are disjoint); `items` is
/// `job.items::<V>(..)`.
#[inline(always)]
pub(super) unsafe fn run_item<V: Lanes>(job: &DirectJob<'_>, items: &DirectItems, item: usize) {
    let g = &job.geometry;
    let b = g.block;
    debug_assert_eq!(V::WIDTH, b);
    let (n, group, rows, cols) = items.items.decode(item);
    let (first_block, blocks) = items.groups.group(group);
    let full = full_tile::<V>(blocks);
    let w = &job.weights;
    let out_block_len = g.out_block_len();
    let y_item = n * g.out_blocks() * out_block_len + first_block * out_block_len;
    let in_registers = RegisterEpilogue::new(&job.epilogue, first_block, b, y_item);
    let span = spans_rows(g, &cols, full, blocks);
    let chunk = (if span { SPAN_CHUNK_STEPS } else { CHUNK_STEPS } / (w.taps * w.in_block)).max(1);
    let tiles = if span { (rows.len() * g.cols.output).div_ceil(full) } else { rows.len() * cols.len().div_ceil(full) };
    for first_in in (0..g.in_blocks()).step_by(chunk) {
        let last_in = (first_in + chunk).min(g.in_blocks());
        let mut next_weights = next_chunk_weights(w, first_block, last_in..(last_in + chunk).min(g.in_blocks()), tiles);
        let tile = Tile {
            x: job.x.as_ptr().wrapping_add(n * g.input.image + first_in * g.input.group),
            x_block: g.input.group,
            in_blocks: last_in - first_in,
            last_channels: g.channels_in_block(last_in - 1),
            w: w.data.as_ptr().wrapping_add(w.at(first_block, first_in, 0, 0)),
            w_block: w.taps * w.in_block * blocks * b,
            w_tap: w.in_block * blocks * b,
            w_channel: blocks * b,
            y_block: out_block_len,
            accumulate: first_in > 0,
            finish: if last_in == g.in_blocks() { in_registers } else { None },
        };
        let y_item = job.y.0.wrapping_add(y_item);
        if span {
            let width = g.cols.output;
            let (mut at, end) = (rows.start * width, rows.end * width);
            let mut even = EvenTiles::new(end - at, full);
            while at < end {
                let count = even.next();
                // SAFETY: `count` pixels from flat index `at` lie in this item's rows (whole
                // rows), and every tap reads inside X or `ZEROS` (`spans_rows` checked
                // `masks_padding`); the caller's contract covers the rest.
                unsafe { tile.run_span_dyn::<V>(count, blocks, g, (at / width, at % width), y_item, at * b) };
                next_weights.step();
                at += count;
            }
            continue;
        }
        for oh in rows.clone() {
            let taps_h = valid_taps(&g.rows, oh);
            for (ow, count, taps_w) in row_tiles(g, cols.clone(), full) {
                let at = (oh * g.cols.output + ow) * b;
                // SAFETY: `count` pixels from `ow` lie in this item's columns and, with the
                // taps `taps_h` x `taps_w`, read inside X or `ZEROS` (see `Tile::run`); the
                // caller's contract covers the rest.
                unsafe { tile.run_dyn::<V>(count, blocks, g, (oh, ow), (taps_h, taps_w), y_item, at) };
                next_weights.step();
            }
        }
    }
    if in_registers.is_none() {
        finish(job, n, first_block, blocks, rows, cols);
    }
}

/// Weight bytes from which a convolution prefetches its next chunk's weights
/// ([`next_chunk_weights`]): smaller ones stay in L2 from one item and run to the next.
const PREFETCH_WEIGHT_BYTES: usize = 1 << 20;

/// The packed weights of the group at `first_block` for input blocks `in_blocks`, prefetched
/// into L2 over `tiles` tiles of the chunk before them. Every tile of a chunk rereads its
/// weights from L1, so the hardware prefetchers see no misses to run ahead of, and each chunk
/// would start by waiting for its weights from memory: the 512-channel convs of a 7x7 map
/// read 36 KiB per chunk that only 49 pixels use. Weights that stay in L2 are not prefetched
/// (the hints then cost the 64-channel convs 4%).
fn next_chunk_weights(w: &DenseWeights, first_block: usize, in_blocks: Range<usize>, tiles: usize) -> prefetch::Stream {
    if in_blocks.is_empty() || w.data.len() * size_of::<f32>() < PREFETCH_WEIGHT_BYTES {
        return prefetch::Stream::none();
    }
    let (start, end) = (w.at(first_block, in_blocks.start, 0, 0), w.at(first_block, in_blocks.end - 1, w.taps, 0));
    w.data.get(start..end).map_or_else(prefetch::Stream::none, |run| prefetch::Stream::new(run, tiles))
}

/// Applies the epilogue to the item's output.
#[inline(always)]
fn finish(job: &DirectJob<'_>, n: usize, first_block: usize, blocks: usize, rows: Range<usize>, cols: Range<usize>) {
    let g = &job.geometry;
    let b = g.block;
    for block in first_block..first_block + blocks {
        for oh in rows.clone() {
            let offset = ((n * g.out_blocks() + block) * g.rows.output + oh) * g.cols.output * b + cols.start * b;
            // SAFETY: the row segment lies inside Y and belongs to this item (the caller's
            // contract of `run_item`), whose tiles are done writing it.
            let y = unsafe { std::slice::from_raw_parts_mut(job.y.0.add(offset), cols.len() * b) };
            job.epilogue.apply(block, b, offset, y);
        }
    }
}

/// What stays fixed while the tiles of one chunk of input channel blocks run.
struct Tile {
    /// X at this image and the chunk's first input block.
    x: *const f32,
    /// Elements between input blocks in X.
    x_block: usize,
    /// Input blocks of the chunk.
    in_blocks: usize,
    /// Real channels of the chunk's last input block (the others have `b`).
    last_channels: usize,
    /// Packed weights at the item's block group and the chunk's first input block.
    w: *const f32,
    /// Elements between input blocks in the packed weights.
    w_block: usize,
    /// Elements between taps in the packed weights.
    w_tap: usize,
    /// Elements between input channels in the packed weights (the group's output blocks are
    /// contiguous between them).
    w_channel: usize,
    /// Elements between output blocks in Y.
    y_block: usize,
    /// Add to Y (not the first input block) rather than overwrite it.
    accumulate: bool,
    /// The epilogue applied in registers (the last input block), if any.
    finish: Option<RegisterEpilogue>,
}

/// Calls `Tile::$run` with `P` and `Q` fixed at compile time: the partial tiles (`pixels <=
/// 6`, `blocks <= 4`) and the full ones of each lane type (24 x 1, 12 x 2, 8 x 3; 12 x 1;
/// 8 x 1).
macro_rules! dispatch {
    ($self:ident . $run:ident, $pixels:ident, $blocks:ident, $args:tt, [$($p:literal),*], $qs:tt) => {
        match ($pixels, $blocks) {
            (24, 1) => $self.$run::<V, 24, 1> $args,
            (12, 1) => $self.$run::<V, 12, 1> $args,
            (8, 1) => $self.$run::<V, 8, 1> $args,
            (12, 2) => $self.$run::<V, 12, 2> $args,
            (8, 3) => $self.$run::<V, 8, 3> $args,
            $(($p, _) => dispatch!(@q $self.$run, $p, $blocks, $args, $qs),)*
            _ => unreachable!("tile of {} pixels", $pixels),
        }
    };
    (@q $self:ident . $run:ident, $p:literal, $blocks:ident, $args:tt, [$($q:literal),*]) => {
        match $blocks {
            $($q => $self.$run::<V, $p, $q> $args,)*
            _ => unreachable!("tile of {} blocks", $blocks),
        }
    };
}

impl Tile {
    /// [`Tile::run`] for `pixels` and `blocks` known at run time.
    ///
    /// # Safety
    /// As [`Tile::run`]; `pixels` and `blocks` one of the sizes of `dispatch!`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_dyn<V: Lanes>(
        &self,
        pixels: usize,
        blocks: usize,
        g: &ConvGeometry,
        at: (usize, usize),
        taps: ((usize, usize), (usize, usize)),
        y_item: *mut f32,
        offset: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe { dispatch!(self.run, pixels, blocks, (g, at, taps, y_item, offset), [1, 2, 3, 4, 5, 6], [1, 2, 3, 4]) }
    }

    /// [`Tile::run_span`] for `pixels` and `blocks` known at run time.
    ///
    /// # Safety
    /// As [`Tile::run_span`]; `pixels` and `blocks` one of the sizes of `dispatch!`.
    #[inline(always)]
    unsafe fn run_span_dyn<V: Lanes>(
        &self,
        pixels: usize,
        blocks: usize,
        g: &ConvGeometry,
        at: (usize, usize),
        y_item: *mut f32,
        offset: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe { dispatch!(self.run_span, pixels, blocks, (g, at, y_item, offset), [1, 2, 3, 4, 5, 6], [1, 2, 3, 4]) }
    }

    /// Adds (or writes, for the first chunk) the products of this chunk's input blocks into
    /// the `P` pixels from `(oh, ow)` of output row `oh`, for `Q` output blocks, over taps
    /// `taps_h` x `taps_w`. `y_item` is Y at the item's first output block and `offset` the
    /// first pixel's offset from there (`(oh * OW + ow) * b`).
    ///
    /// # Safety
    /// The CPU has `V`'s instruction set. Every row tap in `taps_h` reads inside X; every
    /// column tap in `taps_w` of each of the `P` pixels reads inside X or, when
    /// [`masks_padding`], falls in the padding (`row_tiles` gives such taps); the `Q` blocks
    /// exist in the weights and in Y.
    #[inline(always)]
    unsafe fn run<V: Lanes, const P: usize, const Q: usize>(
        &self,
        g: &ConvGeometry,
        (oh, ow): (usize, usize),
        (taps_h, taps_w): ((usize, usize), (usize, usize)),
        y_item: *mut f32,
        offset: usize,
    ) {
        if const { !has_tile::<V>(P, Q) } {
            unreachable!("no tile of {P} x {Q} for lanes of {}", V::WIDTH);
        }
        let b = g.block;
        // SAFETY: the tile's pixels of its Q blocks are inside Y (the caller's contract).
        let mut acc = unsafe { self.start::<V, P, Q>(y_item, offset, b) };
        let layout = g.input;
        let (first, last) = (g.cols.input_index(ow, 0), g.cols.input_index(ow + P - 1, 0));
        if g.rows.kernel == 1 && g.cols.kernel == 1 && taps_h == (0, 1) && first >= 0 && last < g.cols.input as isize {
            // Pointwise with every pixel inside X: the pixels' pointers move by one input
            // block at a time, with no taps to walk.
            let row = self.x.wrapping_offset(g.rows.input_index(oh, 0) * layout.row as isize);
            let start = row.wrapping_offset(first * layout.pixel as isize);
            let pixel_step = g.cols.stride * layout.pixel;
            for in_block in 0..self.in_blocks {
                let x = start.wrapping_add(in_block * self.x_block);
                let w = self.w.wrapping_add(in_block * self.w_block);
                // SAFETY: the pixels and the weights of this input block are inside X and the
                // packed weights (the caller's contract; the pixels checked above).
                unsafe {
                    Self::strided_pixels::<V, P, Q>(
                        &mut acc,
                        x,
                        pixel_step,
                        w,
                        self.channels_of(in_block, b),
                        layout.channel,
                    )
                };
            }
        } else {
            for in_block in 0..self.in_blocks {
                let x = self.x.wrapping_add(in_block * self.x_block);
                let w = self.w.wrapping_add(in_block * self.w_block);
                let channels = self.channels_of(in_block, b);
                // SAFETY: the caller's contract, for each input block of the chunk.
                unsafe { self.block::<V, P, Q>(&mut acc, x, w, channels, g, oh, ow, taps_h, taps_w) };
            }
        }
        // SAFETY: as for `start`.
        unsafe { self.store(&acc, y_item, offset, b) };
    }

    /// [`Tile::run`] for `P` pixels that may span output rows: from `(oh, ow)` on, row after
    /// row. Each pixel reads every tap, `ZEROS` where it falls in the padding; the taps are the
    /// outer loop, so each tap's pixel pointers are worked out once for all input blocks.
    ///
    /// # Safety
    /// The CPU has `V`'s instruction set; [`masks_padding`]; the `P` pixels lie in the
    /// output, and the `Q` blocks exist in the weights and in Y.
    #[inline(always)]
    unsafe fn run_span<V: Lanes, const P: usize, const Q: usize>(
        &self,
        g: &ConvGeometry,
        (oh, ow): (usize, usize),
        y_item: *mut f32,
        offset: usize,
    ) {
        if const { !has_tile::<V>(P, Q) } {
            unreachable!("no tile of {P} x {Q} for lanes of {}", V::WIDTH);
        }
        let b = g.block;
        let layout = g.input;
        // SAFETY: the tile's pixels of its Q blocks are inside Y (the caller's contract).
        let mut acc = unsafe { self.start::<V, P, Q>(y_item, offset, b) };
        // Where each pixel's window starts in X (row, column), possibly in the padding.
        let mut next = (oh, ow);
        let origins: [(isize, isize); P] = std::array::from_fn(|_| {
            let (r, c) = next;
            next = if c + 1 == g.cols.output { (r + 1, 0) } else { (r, c + 1) };
            (g.rows.input_index(r, 0), g.cols.input_index(c, 0))
        });
        let (rows, cols) = (0..g.rows.input as isize, 0..g.cols.input as isize);
        let last_tap =
            (((g.rows.kernel - 1) * g.rows.dilation) as isize, ((g.cols.kernel - 1) * g.cols.dilation) as isize);
        if origins.iter().all(|&(r, c)| {
            rows.contains(&r)
                && rows.contains(&(r + last_tap.0))
                && cols.contains(&c)
                && cols.contains(&(c + last_tap.1))
        }) {
            // Every tap of every pixel inside X (most tiles): no checks.
            let starts: [*const f32; P] = std::array::from_fn(|p| {
                self.x.wrapping_offset(origins[p].0 * layout.row as isize + origins[p].1 * layout.pixel as isize)
            });
            for kh in 0..g.rows.kernel {
                for kw in 0..g.cols.kernel {
                    let tap = kh * g.rows.dilation * layout.row + kw * g.cols.dilation * layout.pixel;
                    let w_tap = self.w.wrapping_add((kh * g.cols.kernel + kw) * self.w_tap);
                    for in_block in 0..self.in_blocks {
                        let x = tap + in_block * self.x_block;
                        let pixels: [*const f32; P] = std::array::from_fn(|p| starts[p].wrapping_add(x));
                        let w = w_tap.wrapping_add(in_block * self.w_block);
                        // SAFETY: every tap of every pixel reads this input block inside X
                        // (checked above); the weights as below.
                        unsafe {
                            Self::all_channels::<V, P, Q>(&mut acc, &pixels, w, self.channels_of(in_block, b), 1)
                        };
                    }
                }
            }
            // SAFETY: as for `start`.
            return unsafe { self.store(&acc, y_item, offset, b) };
        }
        for kh in 0..g.rows.kernel {
            for kw in 0..g.cols.kernel {
                let (dh, dw) = ((kh * g.rows.dilation) as isize, (kw * g.cols.dilation) as isize);
                let mut steps = [0usize; P];
                let mut pixels: [*const f32; P] = std::array::from_fn(|p| {
                    let (ih, iw) = (origins[p].0 + dh, origins[p].1 + dw);
                    if rows.contains(&ih) && cols.contains(&iw) {
                        steps[p] = self.x_block;
                        self.x.wrapping_offset(ih * layout.row as isize + iw * layout.pixel as isize)
                    } else {
                        ZEROS.as_ptr()
                    }
                });
                let w_tap = self.w.wrapping_add((kh * g.cols.kernel + kw) * self.w_tap);
                debug_assert_eq!(self.w_channel, Q * b);
                for in_block in 0..self.in_blocks {
                    let w = w_tap.wrapping_add(in_block * self.w_block);
                    // SAFETY: each pixel reads this input block at the tap inside X, or
                    // `ZEROS` (contiguous channels: `masks_padding`); the weights of the tap
                    // and block are inside the packed weights (the caller's contract).
                    unsafe { Self::all_channels::<V, P, Q>(&mut acc, &pixels, w, self.channels_of(in_block, b), 1) };
                    for (pixel, step) in pixels.iter_mut().zip(&steps) {
                        *pixel = pixel.wrapping_add(*step);
                    }
                }
            }
        }
        // SAFETY: as for `start`.
        unsafe { self.store(&acc, y_item, offset, b) };
    }

    /// Real channels of the chunk's input block `in_block`.
    #[inline(always)]
    fn channels_of(&self, in_block: usize, b: usize) -> usize {
        if in_block + 1 == self.in_blocks {
            self.last_channels
        } else {
            b
        }
    }

    /// A tile's accumulators at the start of a chunk: zero for the first one, else what the
    /// earlier chunks left in Y (the tile's pixels from `offset` on, past `y_item`).
    ///
    /// # Safety
    /// `V`'s instruction set; the `P` pixels of the `Q` blocks inside Y.
    #[inline(always)]
    unsafe fn start<V: Lanes, const P: usize, const Q: usize>(
        &self,
        y_item: *mut f32,
        offset: usize,
        b: usize,
    ) -> [[V; Q]; P] {
        let mut acc = [[V::zero(); Q]; P];
        if self.accumulate {
            for (p, acc) in acc.iter_mut().enumerate() {
                for (q, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: the caller's contract.
                    *acc = unsafe { V::load(y_item.wrapping_add(q * self.y_block + offset + p * b)) };
                }
            }
        }
        acc
    }

    /// Stores a tile's accumulators where [`Tile::start`] read them, finished by the register
    /// epilogue after the last chunk (with its steps chosen once per tile, the epilogue no
    /// longer pushes a wide tile's accumulators out of registers).
    ///
    /// # Safety
    /// As [`Tile::start`]; the epilogue's bias holds the Q blocks' lanes and its residual is
    /// laid out as Y (`RegisterEpilogue::new`).
    #[inline(always)]
    unsafe fn store<V: Lanes, const P: usize, const Q: usize>(
        &self,
        acc: &[[V; Q]; P],
        y_item: *mut f32,
        offset: usize,
        b: usize,
    ) {
        let at = |p: usize, q: usize| q * self.y_block + offset + p * b;
        let mut acc = *acc;
        if let Some(e) = &self.finish {
            // SAFETY: the caller's contract.
            unsafe { e.apply_tile::<V, P, Q>(&mut acc, b, at) };
        }
        for (p, acc) in acc.iter().enumerate() {
            for (q, acc) in acc.iter().enumerate() {
                // SAFETY: the caller's contract.
                unsafe { acc.store(y_item.wrapping_add(at(p, q))) };
            }
        }
    }

    /// Adds the products of one input block (X at `x`, packed weights at `w`, `channels` real
    /// channels) into `acc`, the tile of [`Tile::run`].
    ///
    /// # Safety
    /// As [`Tile::run`], for this input block.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block<V: Lanes, const P: usize, const Q: usize>(
        &self,
        acc: &mut [[V; Q]; P],
        x: *const f32,
        w: *const f32,
        channels: usize,
        g: &ConvGeometry,
        oh: usize,
        ow: usize,
        taps_h: (usize, usize),
        taps_w: (usize, usize),
    ) {
        let (b, layout) = (g.block, g.input);
        let pixel_step = g.cols.stride * layout.pixel;
        for kh in taps_h.0..taps_h.1 {
            let ih = g.rows.input_index(oh, kh);
            let row = x.wrapping_offset(ih * layout.row as isize);
            for kw in taps_w.0..taps_w.1 {
                let first = g.cols.input_index(ow, kw);
                let w_tap = w.wrapping_add((kh * g.cols.kernel + kw) * self.w_tap);
                debug_assert_eq!(self.w_channel, Q * b);
                if first >= 0 && g.cols.input_index(ow + P - 1, kw) < g.cols.input as isize {
                    let x = row.wrapping_offset(first * layout.pixel as isize);
                    // SAFETY: the caller's contract (every pixel's tap inside X).
                    unsafe { Self::strided_pixels::<V, P, Q>(acc, x, pixel_step, w_tap, channels, layout.channel) };
                    continue;
                }
                // Zeros where the tap falls in the padding (only with `masks_padding`: the
                // callers give the other tiles valid taps).
                let pixels: [*const f32; P] = std::array::from_fn(|p| {
                    let iw = g.cols.input_index(ow + p, kw);
                    if (0..g.cols.input as isize).contains(&iw) {
                        row.wrapping_offset(iw * layout.pixel as isize)
                    } else {
                        ZEROS.as_ptr()
                    }
                });
                // SAFETY: the caller's contract (see `Tile::channels`).
                unsafe { Self::all_channels::<V, P, Q>(acc, &pixels, w_tap, channels, layout.channel) };
            }
        }
    }

    /// [`Tile::all_channels`] for pixels `pixel_step` elements apart from `x`. Pixels one
    /// block apart (stride 1 over a blocked input, the common case) get the step as a
    /// constant, so that every pixel's address is one register plus a displacement: a wide
    /// tile's 12 or 24 pointers no longer spill to the stack.
    ///
    /// # Safety
    /// As [`Tile::channels`], for the pixels `x + p * pixel_step`.
    #[inline(always)]
    unsafe fn strided_pixels<V: Lanes, const P: usize, const Q: usize>(
        acc: &mut [[V; Q]; P],
        x: *const f32,
        pixel_step: usize,
        w_tap: *const f32,
        channels: usize,
        channel: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            if pixel_step == V::WIDTH {
                let pixels: [*const f32; P] = std::array::from_fn(|p| x.wrapping_add(p * V::WIDTH));
                Self::all_channels::<V, P, Q>(acc, &pixels, w_tap, channels, channel);
            } else {
                let pixels: [*const f32; P] = std::array::from_fn(|p| x.wrapping_add(p * pixel_step));
                Self::all_channels::<V, P, Q>(acc, &pixels, w_tap, channels, channel);
            }
        }
    }

    /// [`Tile::channels`], unrolled in the common case of a whole block of contiguous
    /// channels (every address then a constant offset).
    ///
    /// # Safety
    /// As [`Tile::channels`].
    #[inline(always)]
    unsafe fn all_channels<V: Lanes, const P: usize, const Q: usize>(
        acc: &mut [[V; Q]; P],
        pixels: &[*const f32; P],
        w_tap: *const f32,
        channels: usize,
        channel: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            if channels == V::WIDTH && channel == 1 {
                Self::channels::<V, P, Q>(acc, pixels, w_tap, V::WIDTH, 1);
            } else {
                Self::channels::<V, P, Q>(acc, pixels, w_tap, channels, channel);
            }
        }
    }

    /// Adds the products of `channels` input channels (`channel` elements apart in X) at one
    /// tap: `pixels[p]` is pixel p's input at the tap, `w_tap` the tap's packed weights (the
    /// `Q` blocks of a channel contiguous, channels `Q * b` apart).
    ///
    /// # Safety
    /// The CPU has `V`'s instruction set; `pixels[p] + c * channel` is readable for every
    /// channel `c`, as are the `Q * b` weights of every channel from `w_tap`.
    #[inline(always)]
    unsafe fn channels<V: Lanes, const P: usize, const Q: usize>(
        acc: &mut [[V; Q]; P],
        pixels: &[*const f32; P],
        w_tap: *const f32,
        channels: usize,
        channel: usize,
    ) {
        for c in 0..channels {
            // SAFETY: the caller's contract.
            unsafe {
                let w_c = w_tap.wrapping_add(c * Q * V::WIDTH);
                if P <= Q && V::WIDTH == 8 {
                    // AVX2's 16 registers with no more pixels than blocks (3 x 4, 3 x 3): the
                    // broadcasts stay in registers and one weight vector at a time meets them
                    // (12 + 3 + 1 registers). AVX-512 holds the weights (its 32 registers
                    // suffice).
                    let x: [V; P] = std::array::from_fn(|p| V::splat(pixels[p].wrapping_add(c * channel)));
                    for q in 0..Q {
                        let w = V::load(w_c.wrapping_add(q * V::WIDTH));
                        for (acc, &x) in acc.iter_mut().zip(&x) {
                            acc[q] = V::mul_add(x, w, acc[q]);
                        }
                    }
                    continue;
                }
                let w: [V; Q] = std::array::from_fn(|q| V::load(w_c.wrapping_add(q * V::WIDTH)));
                for (acc, &x_p) in acc.iter_mut().zip(pixels) {
                    let x = V::splat(x_p.wrapping_add(c * channel));
                    for (acc, &w) in acc.iter_mut().zip(&w) {
                        *acc = V::mul_add(x, w, *acc);
                    }
                }
            }
        }
    }
}
