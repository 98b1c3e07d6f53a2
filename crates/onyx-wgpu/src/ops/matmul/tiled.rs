//! The tiled GEMM kernel every matrix product and implicit-GEMM convolution runs on: each
//! workgroup of 16x16 threads computes a 64x64 tile of the output, 4x4 per thread, staging
//! 64x16 tiles of both operands in workgroup memory. Operand loads and the output store are
//! WGSL "hooks" the caller supplies (a strided product in `mod.rs`, input windows gathered on
//! the fly in `conv/`).
//!
//! Split-K: when the output has too few tiles to fill the GPU (late convolutions at batch 1,
//! products of 128 rows), the K loop is cut into slices that run in parallel workgroups and
//! write f32 partial tiles; a second dispatch sums the slices and applies the hook's store (the
//! epilogue: bias, activation, residual) once per output.
//!
//! On f16 operands, where the GPU has cooperative matrices, the tiles are multiplied as 16x16
//! fragments instead (the kernel's WGSL is in `coop.rs`).
//!
//! Startup: the tuned pipelines take the driver 0.1-0.3 s each to compile. Until they are
//! ready, runs use a startup kernel on the same hooks ([`STARTUP`]: one thread per output, no
//! tiles, nothing unrolled), which compiles in a fraction of that time.

use std::sync::{Arc, OnceLock};

use onyx_core::{DataType, Location, Result};

use super::coop::{packed_k_loop, COOP_HALF_TILES, COOP_PACKED_TILES, COOP_PRODUCT, COOP_STAGING, COOP_TILED};
use crate::buffer::GpuBuffer;
use crate::compile::Priority;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, grid, u32_of, OnGpu};
use crate::run::GpuRun;

/// Rows (and columns) of the output tile one workgroup computes.
pub(crate) const TILE: usize = 64;

/// Params the tiled kernel reserves at the front: M, N, K, first z, K slices, K per slice,
/// batches in the dispatch, unused. The hooks' own params start at this index.
pub(crate) const RESERVED: usize = 8;

/// Workgroups a product should have to keep the GPU busy; fewer output tiles than this split
/// K (a few per streaming multiprocessor of a large GPU; more only adds partial traffic).
const TARGET_WORKGROUPS: usize = 512;

/// Fewest K elements per slice (4 steps of the K loop).
const MIN_SLICE: usize = 64;

/// Most K slices.
const MAX_SLICES: usize = 64;

/// Which tile dimension consecutive threads walk when the tiled kernel loads an operand: the
/// one contiguous in memory, so that loads coalesce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Along K (A row-major, or B transposed).
    K,
    /// Along M for A, along N for B.
    Outer,
}

impl Walk {
    /// One letter for pipeline keys.
    pub fn name(self) -> &'static str {
        match self {
            Walk::K => "k",
            Walk::Outer => "o",
        }
    }
}

/// Replaces each `$NAME` of `template` by its value (longest names first is the caller's
/// business: no name here is a prefix of another).
pub(crate) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (name, value) in values {
        s = s.replace(name, value);
    }
    s
}

/// The tiled kernel. The hooks (`$HOOKS`) declare the bindings (binding 0 being the params
/// `p`, see [`RESERVED`]) and define: `setup(z)` (per-workgroup state for batch or group `z`),
/// `struct Col` and `col(n)` (what the B loads need of output column `n`, computed once per
/// thread before the K loop), `load_a(m, k)` and `load_b(col, k)` (called only in bounds) and
/// `store(m, n, acc)`. `$SLICE` picks the K range and `$STORE` writes the accumulators.
const TILED: &str = r#"$ENABLE
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const THREADS: u32 = 256u;
// Tiles are stored k-major with rows padded by 4 floats (fewer bank conflicts, vec4 reads).
const ROW: u32 = 68u;
const ROW4: u32 = 17u;
var<workgroup> As: array<vec4<f32>, 272>;
var<workgroup> Bs: array<vec4<f32>, 272>;
$HOOKS
$PART
$STORE_ROW
@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let M = p[0];
    let N = p[1];
    $SLICE
    setup(z + p[3]);
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    let tx = t % 16u;
    let ty = t / 16u;
    $B_COLS
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    $K_LOOP
    let m = m0 + ty * 4u;
    let n = n0 + tx * 4u;
    $STORE(m, n, acc0);
    $STORE(m + 1u, n, acc1);
    $STORE(m + 2u, n, acc2);
    $STORE(m + 3u, n, acc3);
}
"#;

/// The K loop both kernels share: each step stages the operand values loaded into registers,
/// loads the next step's while this one computes (`$INNER`).
pub(super) const K_LOOP: &str = r#"$REGS
    $LOAD(kbeg)
    for (var k0 = kbeg; k0 < kend; k0 += BK) {
        $STAGE
        workgroupBarrier();
        let kn = k0 + BK;
        if (kn < kend) {
            $LOAD(kn)
        }
        $INNER
        workgroupBarrier();
    }"#;

/// Stores one row of 4 accumulators through the hooks.
const STORE_ROW: &str = r#"fn store_row(m: u32, n: u32, v: vec4<f32>) {
    if (m >= p[0]) { return; }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < p[1]) { store(m, n + j, v[j]); }
    }
}"#;

/// The K range of a workgroup without split-K.
const WHOLE_K: &str = "let z = wid.z; let kbeg = 0u; let kend = p[2];";

/// The K range of a workgroup of split-K: z counts (batch, slice) pairs.
const SLICE_K: &str =
    "let z = wid.z / p[4]; let kbeg = (wid.z % p[4]) * p[5]; let kend = min(p[2], kbeg + p[5]);\n    \
                       // Never true: keeps the store's bindings in the layout both split-K shaders share.\n    \
                       if (p[4] == 0u) { store(0u, 0u, 0.0); }";

/// The partial tiles of split-K, at binding `$BINDING`, and the store of one row into them.
/// Bound as vectors of 4 (the allocation is rounded up to whole ones): a row's 4 values go in
/// one store where N is a multiple of 4 (`n` always is), value by value elsewhere.
const PART: &str = r#"
@group(0) @binding($BINDING) var<storage, read_write> part: array<vec4<f32>>;
fn part_row(m: u32, n: u32, v: vec4<f32>) {
    let M = p[0];
    let N = p[1];
    if (m >= M) { return; }
    let i = (part_z * M + m) * N + n;
    if (N % 4u == 0u && n < N) { part[i / 4u] = v; return; }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < N) { part[(i + j) / 4u][(i + j) % 4u] = v[j]; }
    }
}
"#;

/// Split-K's second pass: one thread per output sums its slices and stores through the hooks.
const REDUCE: &str = r#"
@group(0) @binding($BINDING) var<storage, read_write> part: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let MN = p[0] * p[1];
    let slices = p[4];
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= MN * p[6]) { return; }
    let z = i / MN;
    let mn = i - z * MN;
    var acc = 0.0;
    for (var s = 0u; s < slices; s++) { acc += part[(z * slices + s) * MN + mn]; }
    setup(z + p[3]);
    store(mn / p[1], mn % p[1], acc);
    // Never true: keeps the operands' bindings in the layout both split-K shaders share.
    if (slices == 0u) { part[0] = load_a(0u, 0u) + load_b(col(0u), 0u); }
}
"#;

/// The startup kernel: one thread per output element (x: column, y: row, z: batch), its K
/// loop calling the hooks directly. Several times slower than the tiled kernel, but quick to
/// compile: runs use it while the tiled pipelines compile.
const STARTUP: &str = r#"$ENABLE
$HOOKS
@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = gid.x;
    let m = wid.y;
    setup(wid.z + p[3]);
    if (n >= p[1]) { return; }
    let c = col(n);
    var acc = 0.0;
    for (var k = 0u; k < p[2]; k++) {
        acc += load_a(m, k) * load_b(c, k);
    }
    store(m, n, acc);
}
"#;

/// Columns of the output one workgroup of the startup kernel computes.
const STARTUP_COLUMNS: usize = 64;

/// What one generated shader of a [`Tiled`] kernel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The whole K loop, stored through the hooks.
    Whole,
    /// One K slice per workgroup, into the partial tiles.
    Slice,
    /// The sum of the slices, stored through the hooks.
    Reduce,
    /// The startup kernel.
    Startup,
}

/// The products of one staged K step, unrolled in the source: the loop the WGSL compiler
/// emits (with its iteration guard) is not unrolled on every driver. One block per k of the
/// template's `BK` (16).
fn inner_product() -> String {
    (0..16)
        .map(|k| {
            format!(
                "{{ let a = As[{k}u * ROW4 + ty]; let b = Bs[{k}u * ROW4 + tx]; \
                 acc0 += a.x * b; acc1 += a.y * b; acc2 += a.z * b; acc3 += a.w * b; }}"
            )
        })
        .collect::<Vec<_>>()
        .join("\n        ")
}

/// A tiled kernel's description: everything its shaders are generated from.
#[derive(Clone, Debug)]
pub(crate) struct TiledSource {
    /// Pipeline key prefix (the hooks' variant).
    pub key: String,
    pub dtype: DataType,
    /// The hooks, with their bindings.
    pub hooks: String,
    /// Load order of A and B.
    pub a: Walk,
    pub b: Walk,
    /// Bindings the hooks declare after the params (the partial tiles come next).
    pub buffers: usize,
    /// Whether f16 products may run on cooperative matrices (where the GPU has them).
    pub cooperative: bool,
    /// Whether the cooperative kernel reads its operands 4 f16 values at a time and stages
    /// them as they are: two loads and two stores a thread and K step instead of eight of each
    /// and sixteen conversions (on an H200: split-K slices of bert and ViT 18-22% faster,
    /// larger products 20-25%). For A walking K and B walking N, both contiguous along their walk, K
    /// and N multiples of 4 and the groups of 4 aligned: the hooks then bind A and B as
    /// `array<vec4<f16>>` and also define `load_a4(m, k)` and `load_b4(col, k)`, the group of
    /// 4 starting there.
    pub packed: bool,
}

/// K per step of the K loop (the templates' `BK`).
const BK: usize = 16;

/// How a kernel stages its operand tiles: where a loaded value goes.
pub(super) struct Staging {
    /// WGSL storing register `ra{i}` at tile position (`am`, `ak`), and `rb{i}` at (`bk`, `bn`).
    pub put_a: &'static str,
    pub put_b: &'static str,
}

/// The plain kernel's staging: k-major vec4<f32> tiles (f16 operands widened).
const PLAIN_STAGING: Staging = Staging {
    put_a: "As[(ak * ROW + am) / 4u][am % 4u] = ra{i};",
    put_b: "Bs[(bk * ROW + bn) / 4u][bn % 4u] = rb{i};",
};

impl TiledSource {
    /// The per-thread columns of B (`$B_COLS`) and the K loop (`$K_LOOP`) for `staging`, whose
    /// step products are `inner`: every thread loads 4 values of each operand a step.
    fn k_loop(&self, staging: &Staging, inner: &str) -> (String, String) {
        let loads = BK * TILE / 256;
        let a_idx = match self.a {
            Walk::K => "let ak = idx % BK; let am = idx / BK;",
            Walk::Outer => "let am = idx % BM; let ak = idx / BM;",
        };
        // Walking N, each thread loads one column for the whole K loop; walking K, `loads`.
        let (b_cols, b_idx) = match self.b {
            Walk::Outer => (
                "let bn_t = t % BN; let col_t = col(n0 + bn_t);".to_string(),
                "let bn = bn_t; let bk = idx / BN; let c = col_t;",
            ),
            Walk::K => (
                format!(
                    "var cols: array<Col, {loads}>; for (var i = 0u; i < {loads}u; i++) {{ cols[i] = col(n0 + (t + i * THREADS) / BK); }}"
                ),
                "let bk = idx % BK; let bn = idx / BK; let c = cols[i];",
            ),
        };
        let load = |k: &str| {
            (0..loads)
                .map(|i| {
                    let b_idx = b_idx.replace("cols[i]", &format!("cols[{i}]"));
                    format!(
                        "{{ let idx = t + {i}u * THREADS; {a_idx} let gm = m0 + am; let gk = {k} + ak; ra{i} = 0.0; \
                         if (gm < M && gk < kend) {{ ra{i} = load_a(gm, gk); }} }}\n        \
                         {{ let idx = t + {i}u * THREADS; {b_idx} let gk = {k} + bk; rb{i} = 0.0; \
                         if (n0 + bn < N && gk < kend) {{ rb{i} = load_b(c, gk); }} }}\n        "
                    )
                })
                .collect::<String>()
        };
        let stage: String = (0..loads)
            .map(|i| {
                let b_idx = b_idx.replace("cols[i]", &format!("cols[{i}]"));
                let (put_a, put_b) =
                    (staging.put_a.replace("{i}", &i.to_string()), staging.put_b.replace("{i}", &i.to_string()));
                format!(
                    "{{ let idx = t + {i}u * THREADS; {a_idx} {put_a} }}\n        \
                     {{ let idx = t + {i}u * THREADS; {b_idx} {put_b} }}\n        "
                )
            })
            .collect();
        // The operands of the next K step are loaded into registers while this step computes.
        let regs: String = (0..loads).map(|i| format!("var ra{i} = 0.0; var rb{i} = 0.0; ")).collect();
        let k_loop = fill(
            K_LOOP,
            &[
                ("$REGS", &regs),
                ("$LOAD(kbeg)", &load("kbeg")),
                ("$LOAD(kn)", &load("kn")),
                ("$STAGE", &stage),
                ("$INNER", inner),
            ],
        );
        (b_cols, k_loop)
    }

    fn shader(&self, mode: Mode, cooperative: bool) -> String {
        let (template, staging, inner) = if cooperative {
            (COOP_TILED, &COOP_STAGING, COOP_PRODUCT.to_string())
        } else {
            (TILED, &PLAIN_STAGING, inner_product())
        };
        let packed = cooperative && self.packed;
        let (b_cols, k_loop) = if packed { packed_k_loop(&inner) } else { self.k_loop(staging, &inner) };
        let tiles = if packed { COOP_PACKED_TILES } else { COOP_HALF_TILES };
        let binding = (self.buffers + 1).to_string();
        let part = fill(PART, &[("$BINDING", &binding)]);
        let enable = enables(self.dtype);
        let (part, slice, store) = match mode {
            Mode::Whole => (String::new(), WHOLE_K.to_string(), "store_row"),
            Mode::Slice => {
                (format!("var<private> part_z: u32;\n{part}"), format!("{SLICE_K}\n    part_z = wid.z;"), "part_row")
            }
            Mode::Reduce => return format!("{enable}{}\n{}", self.hooks, REDUCE.replace("$BINDING", &binding)),
            Mode::Startup => return fill(STARTUP, &[("$ENABLE", enable), ("$HOOKS", &self.hooks)]),
        };
        fill(
            template,
            &[
                ("$HOOKS", &self.hooks),
                ("$PART", &part),
                ("$STORE_ROW", STORE_ROW),
                ("$ENABLE", enable),
                ("$SLICE", &slice),
                ("$STORE", store),
                ("$B_COLS", &b_cols),
                ("$K_LOOP", &k_loop),
                ("$OPERAND_TILES", tiles),
            ],
        )
    }
}

/// The pipelines of one tiled kernel: the plain one (made with the node), split-K's two (made
/// when the shape says they will be used) and the startup one (see [`STARTUP`]).
pub(crate) struct Tiled {
    source: TiledSource,
    /// Whether the products run on cooperative matrices (f16 on a GPU that has them).
    cooperative: bool,
    whole: Arc<Pipeline>,
    split: OnceLock<[Arc<Pipeline>; 2]>,
    /// The startup kernel, where the context makes them.
    startup: Option<Arc<Pipeline>>,
}

impl Tiled {
    /// Compiles (or reuses) the plain pipeline of `source`: the cooperative kernel for f16
    /// operands where the GPU has cooperative matrices.
    pub fn new(gpu: &GpuContext, mut source: TiledSource) -> Result<Tiled> {
        let cooperative = source.cooperative && source.dtype == DataType::Float16 && gpu.has_cooperative_matrix();
        // Requested first: the compiler threads take it before the tiled pipelines.
        let startup = if gpu.startup_kernels() {
            Some(gpu.pipeline(&format!("{}/startup", source.key), || source.shader(Mode::Startup, false))?)
        } else {
            None
        };
        if cooperative {
            source.key.push_str("/coop");
        }
        let priority = Self::priority(&startup);
        let whole = gpu.pipeline_with(&source.key, || source.shader(Mode::Whole, cooperative), priority)?;
        Ok(Tiled { source, cooperative, whole, split: OnceLock::new(), startup })
    }

    /// The tuned pipelines compile after every urgent one where a startup kernel stands in.
    fn priority(startup: &Option<Arc<Pipeline>>) -> Priority {
        if startup.is_some() {
            Priority::Background
        } else {
            Priority::Urgent
        }
    }

    fn split_pipelines(&self, gpu: &GpuContext) -> Result<&[Arc<Pipeline>; 2]> {
        if let Some(p) = self.split.get() {
            return Ok(p);
        }
        let (s, cooperative, priority) = (&self.source, self.cooperative, Self::priority(&self.startup));
        let slice = gpu.pipeline_with(&format!("{}/slice", s.key), || s.shader(Mode::Slice, cooperative), priority)?;
        let reduce =
            gpu.pipeline_with(&format!("{}/reduce", s.key), || s.shader(Mode::Reduce, cooperative), priority)?;
        Ok(self.split.get_or_init(|| [slice, reduce]))
    }

    /// The startup pipeline, when the tuned pipelines a product of `slices` K slices needs are
    /// still compiling and an `m x n` output fits the startup kernel's grid.
    fn startup_for(&self, gpu: &GpuContext, slices: usize, [m, n]: [usize; 2]) -> Result<Option<&Arc<Pipeline>>> {
        let Some(startup) = &self.startup else { return Ok(None) };
        let slices = if gpu.forces_startup() { 0 } else { slices };
        let ready = if slices == 0 {
            false
        } else if slices == 1 {
            self.whole.is_ready()
        } else {
            self.split_pipelines(gpu)?.iter().all(|p| p.is_ready())
        };
        let limit = gpu.device().limits().max_compute_workgroups_per_dimension as usize;
        Ok((!ready && m <= limit && n.div_ceil(STARTUP_COLUMNS) <= limit).then_some(startup))
    }

    /// Starts compiling split-K's pipelines when a product of these sizes (known when the
    /// session is built) will use them, so that the first run does not wait for them.
    pub fn prepare(&self, gpu: &GpuContext, sizes: [usize; 4]) -> Result<()> {
        if split_k(gpu, sizes) > 1 {
            self.split_pipelines(gpu)?;
        }
        Ok(())
    }

    /// Records the product: `params` are the hooks' params after [`RESERVED`] zeros, `buffers`
    /// the hooks' bindings; `z` batches (or groups) of an `m x n` output over `k`.
    pub fn record(
        &self,
        run: &mut GpuRun,
        params: &mut [u32],
        buffers: &[&GpuBuffer],
        sizes: [usize; 4],
        at: &Location,
    ) -> Result<()> {
        let Some((part, _)) = self.record_unsummed(run, params, buffers, sizes, at)? else { return Ok(()) };
        let [_, reduce] = self.split_pipelines(run.context())?;
        let [m, n, _, z] = sizes;
        let mut all: Vec<&GpuBuffer> = buffers.to_vec();
        all.push(part.gpu()?);
        run.dispatch(reduce, params, &all, grid(z * m * n)).map_err(|e| e.at(at))?;
        drop(all);
        run.release_tensor(part);
        Ok(())
    }

    /// Records the product as [`Tiled::record`] does, except that where it splits K the K
    /// slices are left unsummed: returns them then (f32 partial products: for each batch,
    /// `slices` consecutive blocks of `m * n`) with their count, for the caller to sum, the
    /// hooks' store not applied. Otherwise (one slice, or the startup kernel standing in) the
    /// product is stored through the hooks and `None` returned.
    pub fn record_unsummed(
        &self,
        run: &mut GpuRun,
        params: &mut [u32],
        buffers: &[&GpuBuffer],
        [m, n, k, z]: [usize; 4],
        at: &Location,
    ) -> Result<Option<(onyx_core::Tensor, usize)>> {
        params[0..3].copy_from_slice(&[u32_of(m, at)?, u32_of(n, at)?, u32_of(k, at)?]);
        let slices = split_k(run.context(), [m, n, k, z]);
        if let Some(startup) = self.startup_for(run.context(), slices, [m, n])? {
            params[4] = 1;
            let groups = [u32_of(n.div_ceil(STARTUP_COLUMNS), at)?, u32_of(m, at)?, u32_of(z, at)?];
            return dispatch_z(run, startup, params, 3, buffers, groups, at).map(|()| None);
        }
        let tiles = [u32_of(n.div_ceil(TILE), at)?, u32_of(m.div_ceil(TILE), at)?];
        if slices == 1 {
            params[4] = 1;
            let groups = [tiles[0], tiles[1], u32_of(z, at)?];
            return dispatch_z(run, &self.whole, params, 3, buffers, groups, at).map(|()| None);
        }
        let slice_len = k.div_ceil(slices).next_multiple_of(16);
        let slices = k.div_ceil(slice_len);
        let [slice, _] = self.split_pipelines(run.context())?;
        let len = slices
            .checked_mul(z * m * n)
            .and_then(|len| len.checked_next_multiple_of(4))
            .ok_or_else(|| onyx_core::Error::node(at, "split-K partials too large"))?;
        let part = run.alloc(DataType::Float, vec![len])?;
        params[3] = 0;
        params[4] = u32_of(slices, at)?;
        params[5] = u32_of(slice_len, at)?;
        params[6] = u32_of(z, at)?;
        let mut all: Vec<&GpuBuffer> = buffers.to_vec();
        all.push(part.gpu()?);
        run.dispatch(slice, params, &all, [tiles[0], tiles[1], u32_of(z * slices, at)?]).map_err(|e| e.at(at))?;
        drop(all);
        Ok(Some((part, slices)))
    }
}

/// K slices of an `m x n` product over `k` with `z` batches: 1 (no split-K) when the output
/// fills the GPU or the slices would pass the device's dispatch limit.
fn split_k(gpu: &GpuContext, [m, n, k, z]: [usize; 4]) -> usize {
    let slices = slices(n.div_ceil(TILE) * m.div_ceil(TILE) * z, k);
    let limit = gpu.device().limits().max_compute_workgroups_per_dimension as usize;
    if z * slices > limit {
        1
    } else {
        slices
    }
}

/// K slices for a product of `workgroups` output tiles (all batches) over `k`: enough to reach
/// [`TARGET_WORKGROUPS`], each slice at least [`MIN_SLICE`] long.
fn slices(workgroups: usize, k: usize) -> usize {
    if workgroups == 0 || workgroups >= TARGET_WORKGROUPS {
        return 1;
    }
    TARGET_WORKGROUPS.div_ceil(workgroups).min(k / MIN_SLICE).clamp(1, MAX_SLICES)
}

/// Dispatches `groups` workgroups (z = batches), in slices of at most the device's limit of
/// workgroups along z; `params[z0]` is the first z of each slice.
pub(crate) fn dispatch_z(
    run: &mut GpuRun,
    pipeline: &Pipeline,
    params: &mut [u32],
    z0: usize,
    buffers: &[&GpuBuffer],
    groups: [u32; 3],
    at: &Location,
) -> Result<()> {
    let limit = run.context().device().limits().max_compute_workgroups_per_dimension.max(1);
    let mut first = 0u32;
    while first < groups[2] {
        let count = (groups[2] - first).min(limit);
        params[z0] = first;
        run.dispatch(pipeline, params, buffers, [groups[0], groups[1], count]).map_err(|e| e.at(at))?;
        first += count;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shader of the tiled GEMM, cooperative ones included (which only a GPU with
    /// cooperative matrices runs), passes naga's validation and SPIR-V translation.
    #[test]
    fn every_tiled_gemm_shader_translates() {
        let walks = [Walk::K, Walk::Outer];
        // (dtype, cooperative, packed): packed reads are f16 only.
        let kernels = [
            (DataType::Float, false, false),
            (DataType::Float16, false, false),
            (DataType::Float16, false, true),
            (DataType::Float16, true, false),
            (DataType::Float16, true, true),
        ];
        for (dtype, cooperative, packed) in kernels {
            for (a, b, has_c) in
                walks.iter().flat_map(|&a| walks.iter().flat_map(move |&b| [(a, b, false), (a, b, true)]))
            {
                let act = super::super::Activation::Identity;
                let source = super::super::gemm_source(dtype, a, b, has_c, act, packed).unwrap();
                for mode in [Mode::Whole, Mode::Slice, Mode::Reduce, Mode::Startup] {
                    let wgsl = source.shader(mode, cooperative);
                    let what =
                        format!("{dtype:?} {a:?} {b:?} c={has_c} {mode:?} cooperative={cooperative} packed={packed}");
                    let module = naga::front::wgsl::parse_str(&wgsl)
                        .unwrap_or_else(|e| panic!("{what}: {}\n{wgsl}", e.emit_to_string(&wgsl)));
                    let info = naga::valid::Validator::new(
                        naga::valid::ValidationFlags::all(),
                        naga::valid::Capabilities::all(),
                    )
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    naga::back::spv::write_vec(&module, &info, &Default::default(), None)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let tiled = matches!(mode, Mode::Whole | Mode::Slice);
                    assert_eq!(wgsl.contains("coopMultiplyAdd"), cooperative && tiled, "{what}");
                    let packed_loop = cooperative && tiled && packed && dtype == DataType::Float16;
                    assert_eq!(wgsl.contains("load_b4(col_t"), packed_loop, "{what}");
                }
            }
        }
    }

    #[test]
    fn slices_fill_small_outputs_only() {
        assert_eq!(slices(600, 4608), 1);
        assert_eq!(slices(8, 4608), MAX_SLICES);
        assert_eq!(slices(16, 2304), 32);
        assert_eq!(slices(49, 576), 9);
        assert_eq!(slices(100, 100), 1);
        assert_eq!(slices(0, 1000), 1);
    }
}
