//! The tiled GEMM kernel on cooperative matrices (f16 operands, f32 accumulators): its WGSL
//! template, operand tiles and K loop pieces. `tiled.rs` assembles them like the plain
//! kernel's, where the GPU has 16x16x16 f16 -> f32 fragments.

use super::tiled::{fill, Staging, K_LOOP};

/// The tiled kernel on cooperative matrices (f16 operands, f32 accumulators): the same
/// hooks, tile, K step and dispatch as `tiled.rs`'s plain kernel. Each of the 8 subgroups (of 32
/// invocations) multiplies 16 rows of the A tile by 32 columns of the B tile, two 16x16
/// fragments; the fragments go through workgroup memory (half the tile at a time) to the
/// hooks' store. `$OPERAND_TILES` declares the operand tiles: [`COOP_HALF_TILES`] or
/// [`COOP_PACKED_TILES`].
pub(super) const COOP_TILED: &str = r#"$ENABLE
enable wgpu_cooperative_matrix;
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const THREADS: u32 = 256u;
// Row-major tiles (A: m by k, B: k by n, C: m by n), rows padded against bank conflicts; every
// fragment starts on a 16-byte boundary.
$OPERAND_TILES
const CROW: u32 = 68u;
var<workgroup> Cs: array<f32, 2176>;
$HOOKS
$PART
$STORE_ROW
@compute @workgroup_size(256, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_id) sg: u32) {
    let M = p[0];
    let N = p[1];
    $SLICE
    setup(z + p[3]);
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    $B_COLS
    let fa = (sg / 2u) * 16u * AROW;
    let fb = (sg % 2u) * 2u * B16;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    $K_LOOP
    // The output tile leaves in two halves of 32 rows (the upper four subgroups' fragments,
    // then the lower four's), which halves the workgroup memory it goes through.
    let fc = ((sg / 2u) % 2u) * 16u * CROW + (sg % 2u) * 32u;
    let tx = t % 16u;
    let ty = t / 16u;
    let n = n0 + tx * 4u;
    for (var half = 0u; half < 2u; half++) {
        if (sg / 4u == half) {
            coopStoreT(c0, &Cs[fc], CROW);
            coopStoreT(c1, &Cs[fc + 16u], CROW);
        }
        workgroupBarrier();
        let m = m0 + half * 32u + ty * 2u;
        for (var i = 0u; i < 2u; i++) {
            let c = (ty * 2u + i) * CROW + tx * 4u;
            $STORE(m + i, n, vec4<f32>(Cs[c], Cs[c + 1u], Cs[c + 2u], Cs[c + 3u]));
        }
        workgroupBarrier();
    }
}
"#;

/// The cooperative kernel's operand tiles of f16 values, staged one value at a time. Row
/// lengths (`AROW`, `BROW`) and 16 columns of B (`B16`) in elements.
pub(super) const COOP_HALF_TILES: &str = "const AROW: u32 = 24u;
const BROW: u32 = 72u;
const B16: u32 = 16u;
var<workgroup> As: array<f16, 1536>;
var<workgroup> Bs: array<f16, 1152>;";

/// The same tiles as vectors of 4 f16 values (see [`TiledSource::packed`]): lengths in
/// vectors. A cooperative load through a `vec4<f16>` pointer counts its stride in vectors
/// (SPIR-V's rule; the 16x16 fragments these kernels use exist on Vulkan only).
pub(super) const COOP_PACKED_TILES: &str = "const AROW: u32 = 6u;
const BROW: u32 = 18u;
const B16: u32 = 4u;
var<workgroup> As: array<vec4<f16>, 384>;
var<workgroup> Bs: array<vec4<f16>, 288>;";

/// The packed K loop's loads (`$K`: the step's first K): each thread loads one group of 4
/// values of A's 64 x 16 tile (4 a row) and one of B's 16 x 64 tile (16 a row). A group lies
/// wholly in or out of bounds: K, N and a slice's K range are multiples of 4.
const PACKED_LOAD: &str =
    "{ let gm = m0 + pm; let gk = $K + pk; ga = vec4<f16>(0.0); if (gm < M && gk < kend) { ga = load_a4(gm, gk); } }
        { let gk = $K + pbk; gb = vec4<f16>(0.0); if (n0 + pbn < N && gk < kend) { gb = load_b4(col_t, gk); } }";

/// The cooperative kernel's products of one staged K step (16): two fragment products.
pub(super) const COOP_PRODUCT: &str = "let a = coopLoadT<coop_mat16x16<f16, A>>(&As[fa], AROW);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[fb], BROW);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[fb + B16], BROW);
        c0 = coopMultiplyAdd(a, b0, c0);
        c1 = coopMultiplyAdd(a, b1, c1);";

/// The cooperative kernel's staging: row-major f16 tiles.
pub(super) const COOP_STAGING: Staging =
    Staging { put_a: "As[am * AROW + ak] = f16(ra{i});", put_b: "Bs[bk * BROW + bn] = f16(rb{i});" };

/// The per-thread columns of B (`$B_COLS`) and the K loop (`$K_LOOP`) of the packed
/// cooperative kernel, whose step products are `inner`: each thread loads one group of 4 values
/// of A and one of B a step ([`PACKED_LOAD`]) and stages them whole into [`COOP_PACKED_TILES`].
pub(super) fn packed_k_loop(inner: &str) -> (String, String) {
    let b_cols = "let pm = t / 4u; let pk = (t % 4u) * 4u;
    let pbk = t / 16u; let pbn = (t % 16u) * 4u;
    let col_t = col(n0 + pbn);";
    let stage = "As[pm * AROW + pk / 4u] = ga; Bs[pbk * BROW + pbn / 4u] = gb;";
    let k_loop = fill(
        K_LOOP,
        &[
            ("$REGS", "var ga = vec4<f16>(0.0); var gb = vec4<f16>(0.0);"),
            ("$LOAD(kbeg)", &PACKED_LOAD.replace("$K", "kbeg")),
            ("$LOAD(kn)", &PACKED_LOAD.replace("$K", "kn")),
            ("$STAGE", stage),
            ("$INNER", inner),
        ],
    );
    (b_cols.to_string(), k_loop)
}
