//! The GEMV kernel of MatMul and Gemm, for products with a single row (M == 1, decoders) or a
//! single column (N == 1, matrix-vector): the lanes of a workgroup split K and reduce in
//! workgroup memory.

use super::*;

/// Outputs per workgroup of the GEMV kernel when consecutive lanes walk N (and K lanes).
const GEMV_N_WALK: (u32, u32) = (32, 8);

/// Outputs per workgroup of the GEMV kernel when consecutive lanes walk K (and K lanes).
const GEMV_K_WALK: (u32, u32) = (8, 32);

/// The GEMV kernel: `y[n] = act(alpha * sum_k x[k] * w[n, k] + beta * c[n])` per batch `z`.
/// p: N, K, z0, x_k, w_n, w_k, c_n, alpha, beta, then the batch offsets of x and w (at 9),
/// which the single-batch variant ignores.
const GEMV: &str = r#"$ENABLE
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<$TY>;
@group(0) @binding(2) var<storage, read> w: array<$TY>;
$C_BINDING
$BATCH
const TN: u32 = $TNu;
const KL: u32 = $KLu;
var<workgroup> part: array<f32, 256>;
$ACT_FN
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let N = p[0];
    let K = p[1];
    let z = wid.z + p[2];
    let o = $OFFSETS;
    $LANES
    let n = (wid.x + wid.y * nwg.x) * TN + nl;
    var acc = 0.0;
    if (n < N) {
        let xk = p[3];
        let wk = p[5];
        let wb = o.y + n * p[4];
        for (var k = kl; k < K; k += KL) {
            acc += f32(x[o.x + k * xk]) * f32(w[wb + k * wk]);
        }
    }
    part[t] = acc;
    workgroupBarrier();
    if (kl == 0u && n < N) {
        var sum = 0.0;
        for (var j = 0u; j < KL; j++) { sum += part[$PART]; }
        var v = bitcast<f32>(p[7]) * sum;
        $C_TERM
        y[z * N + n] = $TY(act(v));
    }
}
"#;

/// The GEMV pipeline for `dtype`, lane layout (`k_walk`: consecutive lanes walk K) and C, for
/// any batch or (`single`) one batch. The single-batch variant, without the batch offsets'
/// loop, compiles in about half the time on a cold NVIDIA driver (resnet50's: 17 ms against
/// 30), and the first run of a model waits for it.
pub(super) fn gemv_pipeline(gpu: &GpuContext, pipes: &Pipelines, k_walk: bool, single: bool) -> Result<Arc<Pipeline>> {
    let (dtype, has_c, act) = (pipes.dtype, pipes.has_c, pipes.act);
    let ty = storage_type(dtype)?;
    let (binding, term, tag) = c_parts(ty, has_c, 8, "n * p[6]");
    let walk = if k_walk { "k" } else { "n" };
    let key = format!("matmul/gemv/{ty}/{walk}/{tag}/{}{}", act.key(), if single { "/single" } else { "" });
    let (batch, offsets) = if single { ("", "vec2<u32>(0u, 0u)") } else { (BATCH_OFFSETS, "batch_offsets(z, 9u)") };
    let ((tn, kl), lanes, part) = if k_walk {
        (GEMV_K_WALK, "let kl = t % KL; let nl = t / KL;", "nl * KL + j")
    } else {
        (GEMV_N_WALK, "let nl = t % TN; let kl = t / TN;", "j * TN + nl")
    };
    let (tn, kl) = (tn.to_string(), kl.to_string());
    gpu.pipeline(&key, || {
        fill(
            GEMV,
            &[
                ("$ENABLE", enables(dtype)),
                ("$C_BINDING", &binding),
                ("$C_TERM", &term),
                ("$BATCH", batch),
                ("$OFFSETS", offsets),
                ("$LANES", lanes),
                ("$PART", part),
                ("$TN", &tn),
                ("$KL", &kl),
                ("$ACT_FN", &act.function()),
                ("$TY", ty),
            ],
        )
    })
}

impl Product {
    /// A GEMV: `outputs` results per batch from vector `x` (stride `x_k`) and matrix `w`
    /// (strides `w_n`, `w_k`); `c_n` is C's stride along the outputs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_gemv(
        &self,
        run: &mut GpuRun,
        pipes: &Pipelines,
        [x, w]: [&GpuBuffer; 2],
        (outputs, x_k, w_n, w_k, c_n): (usize, usize, usize, usize, usize),
        [x_batch, w_batch]: [&[usize]; 2],
        ops: &Operands<'_>,
        at: &Location,
    ) -> Result<()> {
        let k_walk = self.gemv_walk() == Some(true);
        let pipeline = pipes.gemv(run.context(), k_walk, self.batches() == 1)?;
        let per_group = if k_walk { GEMV_K_WALK.0 } else { GEMV_N_WALK.0 };
        let mut p = vec![];
        push_all(&mut p, &[outputs, self.k, 0, x_k, w_n, w_k, c_n], at)?;
        p.extend([self.alpha.to_bits(), self.beta.to_bits()]);
        self.batch_params(&mut p, x_batch, w_batch, at)?;
        let mut buffers = vec![x, w];
        buffers.extend(ops.c);
        buffers.push(ops.y);
        let [gx, gy] = grid_2d(outputs.div_ceil(per_group as usize), at)?;
        dispatch_z(run, pipeline, &mut p, 2, &buffers, [gx, gy, u32_of(self.batches(), at)?], at)
    }
}
