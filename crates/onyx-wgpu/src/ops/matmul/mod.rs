//! MatMul and Gemm. Two kernels do the work:
//!
//! - the tiled kernel of `tiled.rs` (64x64 output tiles, split-K when there are few), with
//!   hooks that read the operands through strides;
//! - the GEMV kernel of `gemv.rs` for products with a single row (M == 1, decoders) or a
//!   single column (N == 1, matrix-vector): lanes of a workgroup split K and reduce in
//!   workgroup memory.
//!
//! `plain.rs` hands a plain product's split-K slices to a consumer that sums them itself
//! (GemmSkipLayerNormalization).
//!
//! Operands are read in place through strides: Gemm's transA/transB and broadcast batch
//! dimensions cost no copy. Products accumulate in f32: the plain kernels widen f16 values as
//! they load them, the cooperative one multiplies f16 fragments into f32 accumulators.

use std::sync::{Arc, OnceLock};

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, Value};

mod coop;
pub(crate) mod epilogue;
mod fused;
mod gemv;
pub(crate) mod plain;
pub(crate) mod tiled;

pub(crate) use epilogue::Activation;
pub(crate) use tiled::{dispatch_z, fill, Tiled, TiledSource, Walk, RESERVED};

use super::{float_inputs, input_dtype, Registry};
use crate::buffer::GpuBuffer;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{
    enables, gpu_input, opt_gpu_input, static_shape, strides, u32_of, wgsl_type, GpuOp, GpuTensor, OnGpu,
};
use crate::run::GpuRun;

pub(crate) fn register(r: &mut Registry) {
    r.add("MatMul", supports_matmul, build_matmul);
    r.add("Gemm", supports_gemm, build_gemm);
    r.add_in("com.microsoft", "FusedMatMul", fused::supports, fused::build);
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "FusedGemm", supports_fused_gemm, build_gemm);
}

/// WGSL: offsets of two operands' matrices for batch `z`, from the params at `at`: rank, the
/// batch dims, then each operand's batch strides (0 where broadcast).
pub(crate) const BATCH_OFFSETS: &str = r#"
fn batch_offsets(z: u32, at: u32) -> vec2<u32> {
    let rank = p[at];
    var rem = z;
    var o = vec2<u32>(0u, 0u);
    for (var d = rank; d > 0u; d--) {
        let i = at + d;
        let c = rem % p[i];
        rem = rem / p[i];
        o += c * vec2<u32>(p[i + rank], p[i + 2u * rank]);
    }
    return o;
}
"#;

/// Hooks of the tiled kernel for a strided product `y = act(alpha * a @ b + beta * c)`.
/// p: the tiled kernel's reserved params, a_m, a_k, b_k, b_n, c_m, c_n, alpha, beta, then the
/// batch offsets (at 16).
const GEMM_HOOKS: &str = r#"
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<$OPERAND>;
@group(0) @binding(2) var<storage, read> b: array<$OPERAND>;
$C_BINDING
$BATCH
var<private> a_off: u32;
var<private> b_off: u32;
var<private> y_off: u32;
var<private> s: vec4<u32>;
struct Col { n: u32 }
fn setup(z: u32) {
    let o = batch_offsets(z, 16u);
    a_off = o.x;
    b_off = o.y;
    y_off = z * p[0] * p[1];
    s = vec4<u32>(p[8], p[9], p[10], p[11]);
}
fn col(n: u32) -> Col { return Col(n); }
$LOADS
$ACT_FN
fn store(m: u32, n: u32, acc: f32) {
    var v = bitcast<f32>(p[14]) * acc;
    $C_TERM
    y[y_off + m * p[1] + n] = $TY(act(v));
}
"#;

/// The GEMM hooks' operand loads, one value at a time.
const LOADS: &str = "fn load_a(m: u32, k: u32) -> f32 { return f32(a[a_off + m * s.x + k * s.y]); }
fn load_b(c: Col, k: u32) -> f32 { return f32(b[b_off + k * s.z + c.n * s.w]); }";

/// The GEMM hooks' operand loads where A and B are bound as vectors of 4 f16 values (see
/// [`TiledSource::packed`]): one value, or the group of 4 from an index along the operand's
/// walk (contiguous, the group aligned).
const PACKED_LOADS: &str =
    "fn load_a(m: u32, k: u32) -> f32 { let i = a_off + m * s.x + k * s.y; return f32(a[i / 4u][i % 4u]); }
fn load_b(c: Col, k: u32) -> f32 { let i = b_off + k * s.z + c.n * s.w; return f32(b[i / 4u][i % 4u]); }
fn load_a4(m: u32, k: u32) -> vec4<f16> { return a[(a_off + m * s.x + k) / 4u]; }
fn load_b4(c: Col, k: u32) -> vec4<f16> { return b[(b_off + k * s.z + c.n) / 4u]; }";

/// The WGSL storage type of `dtype`, or an error for dtypes the kernels do not take.
pub(crate) fn storage_type(dtype: DataType) -> Result<&'static str> {
    match dtype {
        DataType::Float | DataType::Float16 => {
            wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {dtype:?}")))
        }
        _ => Err(Error::Unsupported(format!("wgpu: matrix products in {dtype:?}"))),
    }
}

/// The optional C binding and term of the GEMM kernels (binding 3, output at 4), or none
/// (output at 3); `beta` is the params index of beta, `c_index` C's index expression.
fn c_parts(ty: &str, has_c: bool, beta: usize, c_index: &str) -> (String, String, String) {
    if has_c {
        (
            format!(
                "@group(0) @binding(3) var<storage, read> c: array<{ty}>;\n@group(0) @binding(4) var<storage, read_write> y: array<{ty}>;"
            ),
            format!("v += bitcast<f32>(p[{beta}]) * f32(c[{c_index}]);"),
            "c".into(),
        )
    } else {
        (format!("@group(0) @binding(3) var<storage, read_write> y: array<{ty}>;"), String::new(), "noc".into())
    }
}

/// The tiled kernel's description for a strided product in `dtype` with these load orders, C
/// and activation; `packed` reads the operands 4 values at a time (see
/// [`TiledSource::packed`]; f16 only).
pub(crate) fn gemm_source(
    dtype: DataType,
    a: Walk,
    b: Walk,
    has_c: bool,
    act: Activation,
    packed: bool,
) -> Result<TiledSource> {
    let ty = storage_type(dtype)?;
    let packed = packed && dtype == DataType::Float16;
    let (binding, term, tag) = c_parts(ty, has_c, 15, "m * p[12] + n * p[13]");
    let suffix = if packed { "/p4" } else { "" };
    let key = format!("matmul/tiled/{ty}/{}{}/{tag}/{}{suffix}", a.name(), b.name(), act.key());
    let (operand, loads) = if packed { ("vec4<f16>", PACKED_LOADS) } else { (ty, LOADS) };
    let hooks = fill(
        GEMM_HOOKS,
        &[
            ("$C_BINDING", &binding),
            ("$C_TERM", &term),
            ("$BATCH", BATCH_OFFSETS),
            ("$LOADS", loads),
            ("$ACT_FN", &act.function()),
            ("$OPERAND", operand),
            ("$TY", ty),
        ],
    );
    Ok(TiledSource { key, dtype, hooks, a, b, buffers: 3 + has_c as usize, cooperative: true, packed })
}

/// The pipelines one MatMul or Gemm node may use (shared between nodes through the context's
/// cache). [`Pipelines::prepare`] makes, when the node is built, those its static shape will
/// use (all of them when the shape is not known); a run makes any other on first use.
struct Pipelines {
    dtype: DataType,
    /// Load orders of the tiled kernel.
    a: Walk,
    b: Walk,
    has_c: bool,
    /// Applied to each output as it is stored (FusedGemm).
    act: Activation,
    /// The tiled kernel reading its operands one value at a time, and 4 at a time.
    tiled: [OnceLock<Tiled>; 2],
    /// GEMVs for any batch, with lanes walking N, then K.
    gemv: [OnceLock<Arc<Pipeline>>; 2],
    /// Single-batch GEMVs, lanes walking N, then K: made only for a shape known to have one
    /// batch, taken by any run of one batch once made.
    gemv_single: [OnceLock<Arc<Pipeline>>; 2],
}

impl Pipelines {
    fn new(dtype: DataType, a: Walk, b: Walk, has_c: bool, act: Activation) -> Pipelines {
        let (tiled, gemv, gemv_single) = Default::default();
        Pipelines { dtype, a, b, has_c, act, tiled, gemv, gemv_single }
    }

    /// The tiled kernel, reading its operands 4 values at a time or not.
    fn tiled(&self, gpu: &GpuContext, packed: bool) -> Result<&Tiled> {
        let cell = &self.tiled[packed as usize];
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let tiled = Tiled::new(gpu, gemm_source(self.dtype, self.a, self.b, self.has_c, self.act, packed)?)?;
        Ok(cell.get_or_init(|| tiled))
    }

    /// Whether products of these pipelines may read their operands 4 values at a time
    /// ([`TiledSource::packed`]), shapes allowing: f16 on cooperative matrices, A walking K and
    /// B walking N.
    fn may_pack(&self, gpu: &GpuContext) -> bool {
        self.dtype == DataType::Float16 && gpu.has_cooperative_matrix() && (self.a, self.b) == (Walk::K, Walk::Outer)
    }

    /// The GEMV pipeline of lane layout `k_walk` for one batch (`single`) or any: the
    /// single-batch one if it was made, else the one for any batch (made on first use).
    fn gemv(&self, gpu: &GpuContext, k_walk: bool, single: bool) -> Result<&Arc<Pipeline>> {
        match self.gemv_single[k_walk as usize].get() {
            Some(p) if single => Ok(p),
            _ => self.make_gemv(gpu, k_walk, false),
        }
    }

    fn make_gemv(&self, gpu: &GpuContext, k_walk: bool, single: bool) -> Result<&Arc<Pipeline>> {
        let cell = &(if single { &self.gemv_single } else { &self.gemv })[k_walk as usize];
        if let Some(p) = cell.get() {
            return Ok(p);
        }
        let pipeline = gemv::gemv_pipeline(gpu, self, k_walk, single)?;
        Ok(cell.get_or_init(|| pipeline))
    }

    /// Starts compiling what `product` (when its shape is known as the session is built) will
    /// use, or every kernel when it is not known.
    fn prepare(&self, gpu: &GpuContext, product: Option<&Product>) -> Result<()> {
        match product {
            None => {
                self.tiled(gpu, false)?;
                if self.may_pack(gpu) {
                    self.tiled(gpu, true)?;
                }
                self.make_gemv(gpu, false, false)?;
                self.make_gemv(gpu, true, false).map(drop)
            }
            Some(p) => match p.gemv_walk() {
                Some(k_walk) => self.make_gemv(gpu, k_walk, p.batches() == 1).map(drop),
                None => self.tiled(gpu, p.packed_layout(self, gpu))?.prepare(gpu, p.sizes()),
            },
        }
    }
}

/// One (batched) product `y = alpha * a @ b + beta * c` in the terms the kernels take: sizes,
/// element strides of the operands and the broadcast batch.
#[derive(Clone, Debug, Default)]
struct Product {
    m: usize,
    n: usize,
    k: usize,
    /// A's strides along M and K.
    a: (usize, usize),
    /// B's strides along K and N.
    b: (usize, usize),
    /// C's strides along M and N (0 where broadcast), when C takes part.
    c: Option<(usize, usize)>,
    alpha: f32,
    beta: f32,
    /// Batch dims of the output (the output is contiguous: batch, M, N).
    batch: Vec<usize>,
    /// A's and B's matrix offsets per batch dim (0 where broadcast).
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
}

/// Buffers of a product.
struct Operands<'a> {
    a: &'a GpuBuffer,
    b: &'a GpuBuffer,
    c: Option<&'a GpuBuffer>,
    y: &'a GpuBuffer,
}

impl Operands<'_> {
    /// The bindings of the tiled kernel's hooks: A, B, C when present, Y.
    fn buffers(&self) -> Vec<&GpuBuffer> {
        let mut buffers = vec![self.a, self.b];
        buffers.extend(self.c);
        buffers.push(self.y);
        buffers
    }
}

/// Pushes `values` as u32 params, or an error when one does not fit.
fn push_all(p: &mut Vec<u32>, values: &[usize], at: &Location) -> Result<()> {
    for &v in values {
        p.push(u32_of(v, at)?);
    }
    Ok(())
}

/// Workgroups along x and y for `groups` groups of a one-dimensional grid.
fn grid_2d(groups: usize, at: &Location) -> Result<[u32; 2]> {
    let x = groups.min(65535);
    let y = groups.div_ceil(x.max(1));
    Ok([u32_of(x, at)?, u32_of(y, at)?])
}

impl Product {
    fn batches(&self) -> usize {
        self.batch.iter().product()
    }

    /// For a product of one row or one column, the GEMV kernel's lane layout (whether lanes
    /// walk K); `None` for the tiled kernel.
    fn gemv_walk(&self) -> Option<bool> {
        let (outputs, w_n, w_k) = if self.m == 1 {
            (self.n, self.b.1, self.b.0)
        } else if self.n == 1 {
            (self.m, self.a.0, self.a.1)
        } else {
            return None;
        };
        Some(w_k == 1 && (w_n != 1 || outputs == 1))
    }

    /// Batch params: rank, dims, then the strides of the two operands given.
    fn batch_params(&self, p: &mut Vec<u32>, first: &[usize], second: &[usize], at: &Location) -> Result<()> {
        p.push(self.batch.len() as u32);
        push_all(p, &self.batch, at)?;
        push_all(p, first, at)?;
        push_all(p, second, at)
    }

    /// Records the product with the kernel that fits its shape.
    fn record(&self, run: &mut GpuRun, pipes: &Pipelines, ops: &Operands<'_>, at: &Location) -> Result<()> {
        if self.m * self.n * self.batches() == 0 {
            return Ok(());
        }
        if self.m == 1 {
            let c_n = self.c.map_or(0, |c| c.1);
            self.record_gemv(
                run,
                pipes,
                [ops.a, ops.b],
                (self.n, self.a.1, self.b.1, self.b.0, c_n),
                [&self.a_batch, &self.b_batch],
                ops,
                at,
            )
        } else if self.n == 1 {
            let c_m = self.c.map_or(0, |c| c.0);
            self.record_gemv(
                run,
                pipes,
                [ops.b, ops.a],
                (self.m, self.b.0, self.a.0, self.a.1, c_m),
                [&self.b_batch, &self.a_batch],
                ops,
                at,
            )
        } else {
            let tiled = self.tiled_kernel(pipes, run.context(), ops)?;
            let mut p = self.tiled_params(at)?;
            tiled.record(run, &mut p, &ops.buffers(), self.sizes(), at)
        }
    }

    /// The tiled kernel for these operands: reading them 4 values at a time
    /// ([`TiledSource::packed`]) where the layout allows it and both bindings start on, and
    /// hold whole, groups of 4.
    fn tiled_kernel<'p>(&self, pipes: &'p Pipelines, gpu: &GpuContext, ops: &Operands<'_>) -> Result<&'p Tiled> {
        let whole_groups = |b: &GpuBuffer| {
            b.offset().is_multiple_of(8) && onyx_core::device::DeviceStorage::byte_len(b).is_multiple_of(8)
        };
        let packed = self.packed_layout(pipes, gpu) && whole_groups(ops.a) && whole_groups(ops.b);
        pipes.tiled(gpu, packed)
    }

    /// The conditions of [`Product::tiled_kernel`]'s packed reads on the kernel and the layout:
    /// [`Pipelines::may_pack`], A and B contiguous along their walks, and every group of 4
    /// along the walks aligned (K, N, the other strides and the batch offsets multiples of 4;
    /// the strides and offsets follow from K and N for contiguous operands, checked anyway).
    /// K is not 0: an empty operand has no group of 4 to bind.
    fn packed_layout(&self, pipes: &Pipelines, gpu: &GpuContext) -> bool {
        let fours = |values: &[usize]| values.iter().all(|v| v % 4 == 0);
        pipes.may_pack(gpu)
            && self.k > 0
            && self.a.1 == 1
            && self.b.1 == 1
            && fours(&[self.k, self.n, self.a.0, self.b.0])
            && fours(&self.a_batch)
            && fours(&self.b_batch)
    }

    /// The tiled kernel's params: [`RESERVED`] zeros, then the hooks' (see `GEMM_HOOKS`).
    fn tiled_params(&self, at: &Location) -> Result<Vec<u32>> {
        let mut p = vec![0; RESERVED];
        push_all(&mut p, &[self.a.0, self.a.1, self.b.0, self.b.1], at)?;
        let (c_m, c_n) = self.c.unwrap_or((0, 0));
        push_all(&mut p, &[c_m, c_n], at)?;
        p.extend([self.alpha.to_bits(), self.beta.to_bits()]);
        self.batch_params(&mut p, &self.a_batch, &self.b_batch, at)?;
        Ok(p)
    }

    /// M, N, K and the batches, as the tiled kernel takes them.
    fn sizes(&self) -> [usize; 4] {
        [self.m, self.n, self.k, self.batches()]
    }
}

/// Whether input `i`'s shape is known to have a rank in `ranks`, or unknown.
fn rank_in(ctx: &NodeContext<'_>, i: usize, ranks: std::ops::RangeInclusive<usize>) -> bool {
    match ctx.input_types.get(i) {
        Some(ValueType::Tensor(t)) => t.shape.as_ref().is_none_or(|s| ranks.contains(&s.len())),
        _ => true,
    }
}

/// Whether the present inputs among `0..n` all have the dtype of input 0.
fn same_dtypes(ctx: &NodeContext<'_>, n: usize) -> bool {
    let first = input_dtype(ctx, 0);
    (1..n).filter(|&i| ctx.node.input(i).is_some()).all(|i| input_dtype(ctx, i) == first)
}

fn supports_matmul(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    ctx.node.inputs.len() == 2
        && float_inputs(ctx, gpu, 0..2)
        && same_dtypes(ctx, 2)
        && rank_in(ctx, 0, 1..=usize::MAX)
        && rank_in(ctx, 1, 1..=usize::MAX)
}

fn supports_gemm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let attrs_ok = n.float_or("alpha", 1.0).is_ok()
        && n.float_or("beta", 1.0).is_ok()
        && n.int_or("transA", 0).is_ok()
        && n.int_or("transB", 0).is_ok();
    (2..=3).contains(&n.inputs.len())
        && attrs_ok
        && float_inputs(ctx, gpu, 0..3)
        && same_dtypes(ctx, 3)
        && rank_in(ctx, 0, 2..=2)
        && rank_in(ctx, 1, 2..=2)
        && rank_in(ctx, 2, 0..=2)
}

/// The dtype of input 0, which the kernels compute in.
fn node_dtype(ctx: &NodeContext<'_>) -> Result<DataType> {
    input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {} has an untyped input", ctx.node.location())))
}

/// Checks that input `i` has the dtype of input 0.
fn check_dtype(want: DataType, got: DataType, i: usize, at: &Location) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(Error::input(at, i, format!("{} like input 0", want.name()), got.name()))
    }
}

/// MatMul: numpy-style matrix product; with `alpha` and `trans`, com.microsoft FusedMatMul.
struct MatMul {
    pipes: Pipelines,
    alpha: f32,
    /// Whether A and B are read transposed (last two dims swapped).
    trans: [bool; 2],
    at: Location,
}

impl MatMul {
    /// The op and its pipelines, whose load orders follow the transposes.
    fn new(ctx: &NodeContext<'_>, gpu: &GpuContext, alpha: f32, trans: [bool; 2]) -> Result<MatMul> {
        let a = if trans[0] { Walk::Outer } else { Walk::K };
        let b = if trans[1] { Walk::K } else { Walk::Outer };
        let pipes = Pipelines::new(node_dtype(ctx)?, a, b, false, Activation::Identity);
        let at = ctx.node.location();
        let product = static_shape(ctx, 0)
            .zip(static_shape(ctx, 1))
            .and_then(|(a, b)| plan_transposed(&a, &b, trans, &at).ok())
            .map(|(product, _)| product);
        pipes.prepare(gpu, product.as_ref())?;
        Ok(MatMul { pipes, alpha, trans, at })
    }
}

fn build_matmul(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(MatMul::new(ctx, gpu, 1.0, [false, false])?))
}

/// `shape` with its last two dims swapped when `transpose` (and it has two).
fn swap_last(shape: &[usize], transpose: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if transpose && s.len() >= 2 {
        let r = s.len();
        s.swap(r - 1, r - 2);
    }
    s
}

/// Plans `op(a) @ op(b)` with numpy semantics (1-D operands promoted, batch dims broadcast),
/// where op swaps the last two dims of an operand of rank 2 or more whose `trans` flag is set
/// (read in place through strides; 1-D operands are never transposed): the product and the
/// output shape. A whose batches are consecutive times a B shared by all batches folds into
/// one product of `batches * m` rows.
fn plan_transposed(a: &[usize], b: &[usize], trans: [bool; 2], at: &Location) -> Result<(Product, Vec<usize>)> {
    if a.is_empty() || b.is_empty() {
        return Err(Error::node(at, format!("cannot multiply shapes {a:?} and {b:?}: scalars are not matrices")));
    }
    let [ta, tb] = [trans[0] && a.len() >= 2, trans[1] && b.len() >= 2];
    let (a, b) = (&swap_last(a, ta)[..], &swap_last(b, tb)[..]);
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (ab, am) = a2.split_at(a2.len() - 2);
    let (bb, bm) = b2.split_at(b2.len() - 2);
    let (m, k, kb, n) = (am[0], am[1], bm[0], bm[1]);
    if k != kb {
        return Err(Error::node(
            at,
            format!("cannot multiply shapes {a:?} and {b:?}: A has {k} columns but B has {kb} rows"),
        ));
    }
    let rank = ab.len().max(bb.len());
    let mut batch = vec![1usize; rank];
    for s in [ab, bb] {
        for (d, &x) in s.iter().enumerate() {
            let o = &mut batch[d + rank - s.len()];
            if *o == 1 {
                *o = x;
            } else if x != 1 && x != *o {
                return Err(Error::node(
                    at,
                    format!("cannot multiply shapes {a:?} and {b:?}: batch dimensions do not broadcast"),
                ));
            }
        }
    }
    let mut out_shape = batch.clone();
    if a.len() > 1 {
        out_shape.push(m);
    }
    if b.len() > 1 {
        out_shape.push(n);
    }
    let batch_strides = |s: &[usize], mat: usize| -> Vec<usize> {
        let own = strides(s);
        (0..rank)
            .map(|d| match (d + s.len()).checked_sub(rank) {
                Some(j) if s[j] != 1 => own[j] * mat,
                _ => 0,
            })
            .collect()
    };
    let a_strides = if ta { (1, m) } else { (k, 1) };
    let b_strides = if tb { (1, k) } else { (n, 1) };
    let mut p = Product { m, n, k, a: a_strides, b: b_strides, alpha: 1.0, beta: 0.0, ..Default::default() };
    let b_shared = bb.iter().all(|&d| d == 1);
    let a_full = ab.len() == rank && ab == batch.as_slice();
    if b_shared && a_full && !ta {
        p.m = m * batch.iter().product::<usize>();
    } else {
        p.a_batch = batch_strides(ab, m * k);
        p.b_batch = batch_strides(bb, k * n);
        p.batch = batch;
    }
    Ok((p, out_shape))
}

impl GpuOp for MatMul {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let a = gpu_input(run, inputs, 0, &self.at)?;
        let b = gpu_input(run, inputs, 1, &self.at)?;
        check_dtype(a.dtype(), b.dtype(), 1, &self.at)?;
        storage_type(a.dtype())
            .map_err(|_| Error::input(&self.at, 0, "a float or float16 tensor", a.dtype().name()))?;
        let (mut product, out_shape) = plan_transposed(a.shape(), b.shape(), self.trans, &self.at)?;
        product.alpha = self.alpha;
        let y = run.alloc(a.dtype(), out_shape)?;
        product.record(run, &self.pipes, &Operands { a: a.buffer, b: b.buffer, c: None, y: y.gpu()? }, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// Gemm: `Y = alpha * op(A) * op(B) + beta * C`.
struct Gemm {
    pipes: Pipelines,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    /// Whether the pipelines add C (present when built, and beta != 0).
    has_c: bool,
    at: Location,
}

/// Onyx's FusedGemm: Gemm, then an activation it applies as it stores each output.
fn supports_fused_gemm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    supports_gemm(ctx, gpu) && Activation::from_node(ctx.node).is_ok()
}

/// Gemm, or FusedGemm (whose `activation` a Gemm node does not have).
fn build_gemm(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let n = ctx.node;
    let act = if n.op_type == "FusedGemm" { Activation::from_node(n)? } else { Activation::Identity };
    let (alpha, beta) = (n.float_or("alpha", 1.0)?, n.float_or("beta", 1.0)?);
    let (trans_a, trans_b) = (n.int_or("transA", 0)? != 0, n.int_or("transB", 0)? != 0);
    let has_c = n.input(2).is_some() && beta != 0.0;
    let a = if trans_a { Walk::Outer } else { Walk::K };
    let b = if trans_b { Walk::K } else { Walk::Outer };
    let pipes = Pipelines::new(node_dtype(ctx)?, a, b, has_c, act);
    let gemm = Gemm { pipes, alpha, beta, trans_a, trans_b, has_c, at: n.location() };
    let product = static_shape(ctx, 0).zip(static_shape(ctx, 1)).and_then(|(a, b)| gemm.product(&a, &b).ok());
    gemm.pipes.prepare(gpu, product.as_ref())?;
    Ok(Box::new(gemm))
}

/// Strides that read a C of shape `c` as an `m x n` matrix under unidirectional broadcasting,
/// `None` when `c` does not broadcast to `[m, n]`.
fn c_broadcast_strides(c: &[usize], m: usize, n: usize) -> Option<(usize, usize)> {
    let (cr, cc) = match *c {
        [] => (1, 1),
        [x] => (1, x),
        [r, x] => (r, x),
        _ => return None,
    };
    let ok = (cr == m || cr == 1) && (cc == n || cc == 1);
    ok.then_some((if cr == 1 { 0 } else { cc }, if cc == 1 { 0 } else { 1 }))
}

impl Gemm {
    /// The product for A and B of these shapes (C is added by the caller).
    fn product(&self, a: &[usize], b: &[usize]) -> Result<Product> {
        let matrix = |s: &[usize], i: usize| match *s {
            [r, c] => Ok((r, c)),
            _ => Err(Error::input(&self.at, i, "a 2-D tensor", format!("shape {s:?}"))),
        };
        let (ar, ac) = matrix(a, 0)?;
        let (br, bc) = matrix(b, 1)?;
        let (m, k, a_strides) = if self.trans_a { (ac, ar, (1, ac)) } else { (ar, ac, (ac, 1)) };
        let (kb, n, b_strides) = if self.trans_b { (bc, br, (1, bc)) } else { (br, bc, (bc, 1)) };
        if k != kb {
            return Err(Error::node(
                &self.at,
                format!(
                    "cannot multiply A {a:?} (transA={}) by B {b:?} (transB={}): inner dimensions {k} and {kb} differ",
                    self.trans_a as u8, self.trans_b as u8
                ),
            ));
        }
        Ok(Product { m, n, k, a: a_strides, b: b_strides, alpha: self.alpha, beta: self.beta, ..Default::default() })
    }
}

impl GpuOp for Gemm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let a = gpu_input(run, inputs, 0, &self.at)?;
        let b = gpu_input(run, inputs, 1, &self.at)?;
        let c = if self.beta != 0.0 { opt_gpu_input(run, inputs, 2, &self.at)? } else { None };
        check_dtype(a.dtype(), b.dtype(), 1, &self.at)?;
        storage_type(a.dtype())
            .map_err(|_| Error::input(&self.at, 0, "a float or float16 tensor", a.dtype().name()))?;
        let mut product = self.product(a.shape(), b.shape())?;
        if let Some(c) = &c {
            check_dtype(a.dtype(), c.dtype(), 2, &self.at)?;
            product.c = Some(c_broadcast_strides(c.shape(), product.m, product.n).ok_or_else(|| {
                Error::input(
                    &self.at,
                    2,
                    format!("a shape broadcastable to [{}, {}]", product.m, product.n),
                    format!("shape {:?}", c.shape()),
                )
            })?);
        }
        if self.has_c != c.is_some() {
            return Err(Error::node(
                &self.at,
                "input C was present when the node was built but is missing now (or the reverse)",
            ));
        }
        let y = run.alloc(a.dtype(), vec![product.m, product.n])?;
        let ops = Operands { a: a.buffer, b: b.buffer, c: c.map(|c| c.buffer), y: y.gpu()? };
        product.record(run, &self.pipes, &ops, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
pub(crate) mod tests;
