//! `ai.onyx` NchwcConv(X, W, B?, Z?) = activation(Conv(X, W) + B + Z) on blocked tensors: a
//! 2-D convolution whose input is blocked `[N, ceil(IC/b), H, W, b]` (or plain NCHW, for a
//! stem with few channels) and whose output is blocked `[N, ceil(OC/b), OH, OW, b]`. W is a
//! constant in ONNX's layout, packed once at build ([`pack`]); groups are 1 or depthwise.
//!
//! - [`direct`]: every input channel feeds every output channel (3x3, 7x7, pointwise, strided);
//! - [`stem`]: a plain NCHW input with few channels, copied interleaved for the direct tiles;
//! - [`depthwise`]: one input channel per output channel;
//! - [`scalar`]: both, element by element, for block sizes without a vector form;
//! - [`lanes`]: the channel-block vector (AVX-512, AVX2, portable arrays), shared with the
//!   packed GEMM.

mod depthwise;
mod direct;
mod pack;
mod scalar;
pub(super) mod shape;
mod stem;

use std::ops::Range;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{Node, ONYX_DOMAIN};
use onyx_core::{host_pool, DataType, Error, Location, Result, TensorView, Value};

use self::depthwise::DepthwiseJob;
use self::direct::{DirectItems, DirectJob};
use self::pack::{pad_bias, DenseWeights, DepthwiseWeights};
use self::shape::{BlockEpilogue, ConvGeometry, InputLayout};
use self::stem::{StemInput, StemWeights};
use crate::ops::contrib::Activation;
use crate::ops::conv::geometry::{AutoPad, WindowAttrs};
use crate::ops::lanes::{self, Lanes, Portable};
use crate::ops::util;
use crate::Registry;

/// Registers NchwcConv.
pub fn register(r: &mut Registry) {
    r.add_in(ONYX_DOMAIN, "NchwcConv", build);
}

/// One convolution for the tiles: inputs, packed weights `W`, sizes and where the output goes.
pub(crate) struct ConvJob<'a, W> {
    /// X, blocked or (direct convolutions only) plain NCHW: `geometry.input` tells.
    pub x: &'a [f32],
    /// The packed weights.
    pub weights: &'a W,
    /// Sizes (a pointwise direct convolution's already `flattened`).
    pub geometry: ConvGeometry,
    /// Bias, residual and activation.
    pub epilogue: BlockEpilogue<'a>,
    /// Y, `geometry.out_len()` elements.
    pub y: SharedOut,
}

/// Output bytes one work item covers (in L1 while every input block is added into it).
const ITEM_BYTES: usize = 16 << 10;

/// A pointer to the output that the threads writing disjoint work items share.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(*mut f32);
// SAFETY: every work item writes only its own elements of the output through this pointer
// (items are disjoint by construction: `Items::decode`), and f32 is Send.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// Output channel blocks cut into `count` groups of at most `max` blocks, as even as possible
/// (6 blocks by 4: 3 + 3, not 4 + 2), so that every register tile is wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockGroups {
    blocks: usize,
    count: usize,
}

impl BlockGroups {
    fn new(blocks: usize, max: usize) -> Self {
        BlockGroups { blocks, count: blocks.div_ceil(max.max(1)) }
    }

    /// The widest group.
    fn widest(&self) -> usize {
        self.blocks.div_ceil(self.count.max(1))
    }

    /// First block and number of blocks of group `g`.
    fn group(&self, g: usize) -> (usize, usize) {
        let (base, extra) = (self.blocks / self.count, self.blocks % self.count);
        (g * base + g.min(extra), base + usize::from(g < extra))
    }

    /// First block and number of blocks of the group holding `block`.
    fn of_block(&self, block: usize) -> (usize, usize) {
        let (base, extra) = (self.blocks / self.count, self.blocks % self.count);
        // The first `extra` groups have `base + 1` blocks.
        let wide = extra * (base + 1);
        let g = if block < wide { block / (base + 1) } else { extra + (block - wide) / base.max(1) };
        self.group(g)
    }
}

/// How an output is cut into work items: (image, group of output blocks, rows, columns), the
/// columns fastest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Items {
    batch: usize,
    groups: usize,
    rows: usize,
    rows_per_item: usize,
    cols: usize,
    cols_per_item: usize,
}

impl Items {
    fn new(batch: usize, groups: usize, rows: usize, rows_per_item: usize, cols: usize, cols_per_item: usize) -> Self {
        Items { batch, groups, rows, rows_per_item: rows_per_item.max(1), cols, cols_per_item: cols_per_item.max(1) }
    }

    fn row_items(&self) -> usize {
        self.rows.div_ceil(self.rows_per_item)
    }

    fn col_items(&self) -> usize {
        self.cols.div_ceil(self.cols_per_item)
    }

    /// Number of items.
    fn count(&self) -> usize {
        self.batch * self.groups * self.row_items() * self.col_items()
    }

    /// Item `i` as (image, group, output rows, output columns).
    fn decode(&self, i: usize) -> (usize, usize, Range<usize>, Range<usize>) {
        let (col, rest) = (i % self.col_items(), i / self.col_items());
        let (row, rest) = (rest % self.row_items(), rest / self.row_items());
        let (group, n) = (rest % self.groups, rest / self.groups);
        let rows = row * self.rows_per_item..((row + 1) * self.rows_per_item).min(self.rows);
        let cols = col * self.cols_per_item..((col + 1) * self.cols_per_item).min(self.cols);
        (n, group, rows, cols)
    }
}

/// Items per thread wanted, so that uneven items even out.
const ITEMS_PER_THREAD: usize = 4;

/// Multiply-adds below which a convolution runs on the calling thread.
const SERIAL_WORK: usize = 1 << 17;

/// Runs `run(item)` for every item, on the thread pool when the work pays for it.
fn for_each_item(count: usize, work: usize, run: impl Fn(usize) + Sync + Send) {
    if count > 1 && work >= SERIAL_WORK && rayon::current_num_threads() > 1 {
        crate::parallel::for_each_index(count, &run);
    } else {
        (0..count).for_each(run);
    }
}

/// Which form of the tiles runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// AVX-512F, block 16.
    Avx512,
    /// AVX2 with FMA, block 8.
    Avx2,
    /// Plain arrays (any CPU), blocks 8 and 16.
    Portable,
    /// Element by element, any block.
    Scalar,
}

impl Path {
    /// Most output blocks of one register tile on this path.
    fn blocks(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => lanes::Avx512::BLOCKS,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => lanes::Avx2::BLOCKS,
            #[cfg(not(target_arch = "x86_64"))]
            Path::Avx512 | Path::Avx2 => 1,
            Path::Portable => Portable::<8>::BLOCKS,
            Path::Scalar => 1,
        }
    }

    /// The fastest path this CPU has for `block`.
    pub fn best(block: usize) -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if block == 16 && std::arch::is_x86_feature_detected!("avx512f") {
                return Path::Avx512;
            }
            if block == 8 && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Path::Avx2;
            }
        }
        if matches!(block, 8 | 16) {
            Path::Portable
        } else {
            Path::Scalar
        }
    }

    /// True when this CPU can take the path for `block`.
    #[cfg(test)]
    pub fn runs(self, block: usize) -> bool {
        match self {
            Path::Avx512 | Path::Avx2 => Path::best(block) == self,
            Path::Portable => matches!(block, 8 | 16),
            Path::Scalar => true,
        }
    }
}

/// The AVX-512 and AVX2 forms of the work items: each compiled for its instruction set.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::depthwise::{self, DepthwiseJob};
    use super::direct::{self, DirectItems, DirectJob};
    use crate::ops::lanes::{Avx2, Avx512};

    /// # Safety
    /// AVX-512F, and `direct::run_item`'s contract.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn direct_avx512(job: &DirectJob<'_>, items: &DirectItems, item: usize) {
        // SAFETY: the caller's contract.
        unsafe { direct::run_item::<Avx512>(job, items, item) }
    }

    /// # Safety
    /// AVX2 and FMA, and `direct::run_item`'s contract.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn direct_avx2(job: &DirectJob<'_>, items: &DirectItems, item: usize) {
        // SAFETY: the caller's contract.
        unsafe { direct::run_item::<Avx2>(job, items, item) }
    }

    /// # Safety
    /// AVX-512F, and `depthwise::run_item`'s contract.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn depthwise_avx512(job: &DepthwiseJob<'_>, item: usize) {
        // SAFETY: the caller's contract.
        unsafe { depthwise::run_item::<Avx512>(job, item) }
    }

    /// # Safety
    /// AVX2 and FMA, and `depthwise::run_item`'s contract.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn depthwise_avx2(job: &DepthwiseJob<'_>, item: usize) {
        // SAFETY: the caller's contract.
        unsafe { depthwise::run_item::<Avx2>(job, item) }
    }
}

/// # Safety
/// `direct::run_item`'s contract (no instruction set needed).
unsafe fn direct_portable<const N: usize>(job: &DirectJob<'_>, items: &DirectItems, item: usize) {
    // SAFETY: the caller's contract; plain arrays need no instruction set.
    unsafe { direct::run_item::<Portable<N>>(job, items, item) }
}

/// # Safety
/// `depthwise::run_item`'s contract (no instruction set needed).
unsafe fn depthwise_portable<const N: usize>(job: &DepthwiseJob<'_>, item: usize) {
    // SAFETY: the caller's contract; plain arrays need no instruction set.
    unsafe { depthwise::run_item::<Portable<N>>(job, item) }
}

/// Runs every work item of a direct convolution with lanes `V` through `item` (`V`'s form).
fn drive_direct<V: Lanes>(job: &DirectJob<'_>, item: unsafe fn(&DirectJob<'_>, &DirectItems, usize)) {
    let items = job.items::<V>(rayon::current_num_threads());
    // SAFETY: the caller picked `item` for a path this CPU runs and `V` of the job's block;
    // X, the weights and Y were checked against the geometry (`NchwcConv::run`); items are
    // disjoint.
    for_each_item(items.items.count(), job.geometry.work(false), |i| unsafe { item(job, &items, i) });
}

/// Runs every work item of a depthwise convolution through `item`.
fn drive_depthwise(job: &DepthwiseJob<'_>, item: unsafe fn(&DepthwiseJob<'_>, usize)) {
    let items = job.items();
    // SAFETY: as in `drive_direct`.
    for_each_item(items.count(), job.geometry.work(true), |i| unsafe { item(job, i) });
}

/// The direct convolution of `job` (into its output) on `path`.
fn run_direct(job: &DirectJob<'_>, path: Path) {
    match (path, job.geometry.block) {
        #[cfg(target_arch = "x86_64")]
        (Path::Avx512, 16) => drive_direct::<lanes::Avx512>(job, x86::direct_avx512),
        #[cfg(target_arch = "x86_64")]
        (Path::Avx2, 8) => drive_direct::<lanes::Avx2>(job, x86::direct_avx2),
        (Path::Portable, 16) => drive_direct::<Portable<16>>(job, direct_portable::<16>),
        (Path::Portable, 8) => drive_direct::<Portable<8>>(job, direct_portable::<8>),
        _ => scalar::direct(job),
    }
}

/// The depthwise convolution of `job` (into its output) on `path`.
fn run_depthwise(job: &DepthwiseJob<'_>, path: Path) {
    match (path, job.geometry.block) {
        #[cfg(target_arch = "x86_64")]
        (Path::Avx512, 16) => drive_depthwise(job, x86::depthwise_avx512),
        #[cfg(target_arch = "x86_64")]
        (Path::Avx2, 8) => drive_depthwise(job, x86::depthwise_avx2),
        (Path::Portable, 16) => drive_depthwise(job, depthwise_portable::<16>),
        (Path::Portable, 8) => drive_depthwise(job, depthwise_portable::<8>),
        _ => scalar::depthwise(job),
    }
}

/// The packed weights of either kind.
#[derive(Debug)]
enum Weights {
    Dense(DenseWeights),
    Depthwise(DepthwiseWeights),
}

/// A built NchwcConv node.
#[derive(Debug)]
pub(crate) struct NchwcConv {
    at: Location,
    window: WindowAttrs,
    block: usize,
    activation: Activation,
    c_in: usize,
    c_out: usize,
    kernel: [usize; 2],
    weights: Weights,
    /// The weights packed for an NCHW input read as a stem ([`stem`]), when that form applies.
    stem: Option<StemWeights>,
    /// The constant bias, padded to whole blocks.
    bias: Option<Vec<f32>>,
    path: Path,
}

/// Builds an NchwcConv kernel: checks the attributes and packs the constant weights.
fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let w = ctx.constant(1).map(|w| w.view()).transpose()?;
    let mut conv = NchwcConv::new(ctx.node, w, |block| Path::best(block))?;
    if let Some(b) = ctx.constant(2) {
        let b = b.view()?;
        conv.check_bias(&b)?;
        conv.bias = Some(pad_bias(b.as_slice::<f32>()?, conv.block));
    }
    Ok(Box::new(conv))
}

impl NchwcConv {
    /// Decodes `node` with its constant weights `w` (`None`: not a constant, an error), packed
    /// for the path `path(block)` will run.
    fn new(node: &Node, w: Option<TensorView<'_>>, path: impl Fn(usize) -> Path) -> Result<Self> {
        let at = node.location();
        let block =
            node.get_int("block")?.ok_or_else(|| Error::attribute(&at, "block", "a channel block size", "none"))?;
        if !(1..=64).contains(&block) {
            return Err(Error::attribute(&at, "block", "a block size from 1 to 64", block.to_string()));
        }
        let window = WindowAttrs::from_node(node)?;
        if window.auto_pad != AutoPad::NotSet {
            return Err(Error::attribute(&at, "auto_pad", "NOTSET (explicit pads)", format!("{:?}", window.auto_pad)));
        }
        let w =
            w.ok_or_else(|| Error::input(&at, 1, "constant weights (an initializer)", "a value computed at run time"))?;
        util::expect_dtype(&w, &[DataType::Float], 1, &at)?;
        let &[c_out, per_group, kh, kw] = w.shape() else {
            return Err(Error::input(
                &at,
                1,
                "weights of rank 4 [OC, IC/group, kH, kW]",
                format!("shape {:?}", w.shape()),
            ));
        };
        if c_out == 0 || per_group == 0 || kh == 0 || kw == 0 {
            return Err(Error::input(&at, 1, "weights with no zero dimension", format!("shape {:?}", w.shape())));
        }
        if window.kernel_shape.as_ref().is_some_and(|k| k.as_slice() != [kh, kw]) {
            return Err(Error::attribute(
                &at,
                "kernel_shape",
                format!("[{kh}, {kw}] like W"),
                format!("{:?}", window.kernel_shape),
            ));
        }
        let group = node.int_or("group", 1)?;
        let depthwise = group > 1 && per_group == 1 && group as usize == c_out;
        if group != 1 && !depthwise {
            return Err(Error::attribute(
                &at,
                "group",
                format!("1, or {c_out} (depthwise: one input channel per output channel) for W {:?}", w.shape()),
                group.to_string(),
            ));
        }
        let (block, data) = (block as usize, w.as_slice::<f32>()?);
        let path = path(block);
        let c_in = if depthwise { c_out } else { per_group };
        let weights = if depthwise {
            Weights::Depthwise(DepthwiseWeights::pack(data, c_out, kh * kw, block))
        } else {
            Weights::Dense(DenseWeights::pack(data, [c_out, c_in, kh, kw], [block, block], path.blocks()))
        };
        let stem = (!depthwise && StemWeights::applies(c_in, block, kw))
            .then(|| StemWeights::pack(data, [c_out, c_in, kh, kw], block, path.blocks()));
        let activation = Activation::from_node(node)?;
        Ok(NchwcConv { at, window, block, activation, c_in, c_out, kernel: [kh, kw], weights, stem, bias: None, path })
    }

    fn check_bias(&self, b: &TensorView<'_>) -> Result<()> {
        util::expect_dtype(b, &[DataType::Float], 2, &self.at)?;
        if b.shape() != [self.c_out] {
            return Err(Error::input(
                &self.at,
                2,
                format!("a bias of shape [{}]", self.c_out),
                format!("shape {:?}", b.shape()),
            ));
        }
        Ok(())
    }

    /// X's layout and the geometry, from X's shape.
    fn geometry(&self, x: &[usize]) -> Result<ConvGeometry> {
        let (b, at) = (self.block, &self.at);
        let depthwise = matches!(self.weights, Weights::Depthwise(_));
        let (n, h, w, input) = match *x {
            [n, blocks, h, w, lanes] if lanes == b && blocks == self.c_in.div_ceil(b) => {
                (n, h, w, InputLayout::blocked(self.c_in, h, w, b))
            }
            [n, c, h, w] if c == self.c_in && !depthwise => (n, h, w, InputLayout::nchw(c, h, w, b)),
            _ => {
                let nchw = if depthwise { String::new() } else { format!(" or NCHW [N, {}, H, W]", self.c_in) };
                return Err(Error::input(
                    at,
                    0,
                    format!("a blocked tensor [N, {}, H, W, {b}]{nchw}", self.c_in.div_ceil(b)),
                    format!("shape {x:?}"),
                ));
            }
        };
        let axes = self.window.resolve(&[n, self.c_in, h, w], &self.kernel, false, at)?;
        let g = ConvGeometry {
            batch: n,
            c_in: self.c_in,
            c_out: self.c_out,
            block: b,
            in_block: b,
            rows: axes[0],
            cols: axes[1],
            input,
        };
        onyx_core::element_count(&[n, g.out_blocks(), g.rows.output, g.cols.output, b]).map_err(|e| e.at(at))?;
        Ok(g)
    }

    /// The output shape.
    fn out_shape(&self, g: &ConvGeometry) -> Vec<usize> {
        vec![g.batch, g.out_blocks(), g.rows.output, g.cols.output, self.block]
    }

    /// The convolution.
    fn run_on(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<Value> {
        let path = self.path;
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float], 0, at)?;
        let g = self.geometry(x.shape())?;
        let plain_input = x.shape().len() == 4;
        let run_bias;
        let bias = match (&self.bias, util::opt_input(inputs, 2, at)?) {
            (Some(b), _) => Some(b.as_slice()),
            (None, Some(b)) => {
                self.check_bias(&b)?;
                run_bias = pad_bias(b.as_slice::<f32>()?, self.block);
                Some(run_bias.as_slice())
            }
            (None, None) => None,
        };
        let out_shape = self.out_shape(&g);
        let residual = util::opt_input(inputs, 3, at)?;
        if let Some(z) = &residual {
            if z.dtype() != DataType::Float || z.shape() != out_shape.as_slice() {
                return Err(Error::input(
                    at,
                    3,
                    format!("a residual float{out_shape:?} like the output"),
                    format!("{}{:?}", z.dtype(), z.shape()),
                ));
            }
        }
        let epilogue = BlockEpilogue {
            bias,
            residual: residual.as_ref().map(|z| z.as_slice::<f32>()).transpose()?,
            activation: self.activation,
        };
        let x = x.as_slice::<f32>()?;
        let mut y = host_pool::take::<f32>(g.out_len());
        let out = SharedOut(y.as_mut_ptr());
        match (&self.weights, &self.stem) {
            (Weights::Dense(_), Some(StemWeights(weights))) if plain_input && g.cols.dilation == 1 => {
                let stem = StemInput::new(x, &g);
                let job = DirectJob { x: &stem.x, weights, geometry: stem.geometry.clone(), epilogue, y: out };
                run_direct(&job, path);
                stem.release();
            }
            (Weights::Dense(weights), _) => {
                let job = DirectJob { x, weights, geometry: g.clone().flattened(), epilogue, y: out };
                run_direct(&job, path);
            }
            (Weights::Depthwise(weights), _) => {
                let job = DepthwiseJob { x, weights, geometry: g.clone(), epilogue, y: out };
                run_depthwise(&job, path);
            }
        }
        util::out(out_shape, y)
    }
}

impl Kernel for NchwcConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        Ok(vec![self.run_on(inputs)?])
    }
}

#[cfg(test)]
mod tests;
