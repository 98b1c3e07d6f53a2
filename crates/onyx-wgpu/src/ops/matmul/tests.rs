//! MatMul and Gemm against the CPU EP.

use crate::testkit::{float, int, rand, Case};

fn mm(a: &[usize], b: &[usize], seed: u64) -> Case {
    Case::new("MatMul", vec![rand(a, -1.0, 1.0, seed), rand(b, -1.0, 1.0, seed + 1)])
}

#[test]
fn matmul_odd_sizes_match_the_cpu() {
    mm(&[37, 53], &[53, 71], 1).check(1e-4, 1e-4);
    mm(&[64, 64], &[64, 64], 2).check(1e-4, 1e-4);
    mm(&[1, 1], &[1, 1], 3).check(1e-5, 1e-6);
    mm(&[130, 7], &[7, 65], 4).check(1e-4, 1e-4);
    mm(&[5, 300], &[300, 3], 5).check(1e-4, 1e-4);
    mm(&[37, 53], &[53, 71], 6).constants(&[1]).check(1e-4, 1e-4);
}

#[test]
fn matmul_split_k_matches_the_cpu() {
    // Few output tiles over a long K: slices summed by a second pass.
    mm(&[37, 1000], &[1000, 71], 90).check(1e-4, 1e-4);
    // N a multiple of 4: the partial tiles are stored 4 values at a time.
    mm(&[37, 1000], &[1000, 72], 94).check(1e-4, 1e-4);
    mm(&[2, 37, 700], &[700, 44], 95).check(1e-4, 1e-4);
    mm(&[3, 37, 700], &[700, 45], 91).check(1e-4, 1e-4);
    mm(&[2, 3, 20, 333], &[3, 333, 9], 92).check(1e-4, 1e-4);
    let attrs = vec![int("transA", 1), int("transB", 1), float("alpha", 0.5), float("beta", 2.0)];
    gemm(&[777, 37], &[71, 777], Some(&[71]), 93).attrs(attrs).check(1e-4, 1e-4);
}

#[test]
fn matmul_batches_broadcast() {
    mm(&[2, 3, 37, 53], &[53, 71], 10).check(1e-4, 1e-4);
    mm(&[2, 3, 37, 53], &[3, 53, 71], 11).check(1e-4, 1e-4);
    mm(&[2, 1, 37, 53], &[1, 3, 53, 71], 12).check(1e-4, 1e-4);
    mm(&[37, 53], &[4, 53, 71], 13).check(1e-4, 1e-4);
    mm(&[1, 37, 53], &[53, 71], 14).check(1e-4, 1e-4);
    mm(&[3, 1, 53], &[3, 53, 71], 15).check(1e-4, 1e-4);
    mm(&[3, 37, 53], &[3, 53, 1], 16).check(1e-4, 1e-4);
}

#[test]
fn matmul_vectors_and_gemv() {
    mm(&[53], &[53, 71], 20).check(1e-4, 1e-4);
    mm(&[37, 53], &[53], 21).check(1e-4, 1e-4);
    mm(&[53], &[53], 22).check(1e-4, 1e-4);
    mm(&[2, 3, 53], &[53], 23).check(1e-4, 1e-4);
    mm(&[53], &[2, 53, 71], 24).check(1e-4, 1e-4);
    mm(&[1, 1000], &[1000, 300], 25).check(1e-4, 1e-4);
    mm(&[300, 1000], &[1000, 1], 26).check(1e-4, 1e-4);
}

#[test]
fn a_single_batch_gemv_is_used_only_where_it_was_made() {
    let Some(gpu) = crate::testkit::provider() else { return };
    let ctx = gpu.context().unwrap();
    let key = |p: &std::sync::Arc<crate::context::Pipeline>| p.key.clone();
    let vector_times_matrix = super::Product { m: 1, n: 71, k: 53, b: (1, 53), ..Default::default() };
    let known = super::Pipelines::new(
        onyx_core::DataType::Float,
        super::Walk::K,
        super::Walk::K,
        false,
        super::Activation::Identity,
    );
    known.prepare(ctx, Some(&vector_times_matrix)).unwrap();
    assert!(key(known.gemv(ctx, true, true).unwrap()).ends_with("/single"));
    // A run of several batches takes (and makes) the GEMV for any batch.
    assert!(!key(known.gemv(ctx, true, false).unwrap()).ends_with("/single"));
    // Built without a known shape, a single-batch run takes the GEMV for any batch too.
    let unknown = super::Pipelines::new(
        onyx_core::DataType::Float,
        super::Walk::K,
        super::Walk::K,
        false,
        super::Activation::Identity,
    );
    unknown.prepare(ctx, None).unwrap();
    assert!(!key(unknown.gemv(ctx, true, true).unwrap()).ends_with("/single"));
}

#[test]
fn matmul_empty_dims() {
    mm(&[0, 5], &[5, 7], 30).check(0.0, 0.0);
    mm(&[4, 0], &[0, 7], 31).check(0.0, 0.0);
    mm(&[2, 0, 4, 5], &[5, 7], 32).check(0.0, 0.0);
    mm(&[3, 5], &[5, 0], 33).check(0.0, 0.0);
}

#[test]
fn matmul_shape_errors_are_named() {
    let Some(gpu) = crate::testkit::provider() else { return };
    let e = mm(&[3, 4], &[5, 6], 40).try_run_gpu(&gpu).unwrap_err().to_string();
    assert!(e.contains("MatMul") && e.contains('4') && e.contains('5'), "{e}");
    let e = mm(&[2, 3, 4], &[3, 4, 6], 41).try_run_gpu(&gpu).unwrap_err().to_string();
    assert!(e.contains("MatMul"), "{e}");
}

fn gemm(a: &[usize], b: &[usize], c: Option<&[usize]>, seed: u64) -> Case {
    let mut inputs = vec![rand(a, -1.0, 1.0, seed), rand(b, -1.0, 1.0, seed + 1)];
    inputs.extend(c.map(|c| rand(c, -1.0, 1.0, seed + 2)));
    Case::new("Gemm", inputs)
}

#[test]
fn gemm_transposes_and_scales() {
    let (m, k, n) = (37, 53, 71);
    for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let a: &[usize] = if ta == 1 { &[k, m] } else { &[m, k] };
        let b: &[usize] = if tb == 1 { &[n, k] } else { &[k, n] };
        let attrs = vec![int("transA", ta), int("transB", tb), float("alpha", 0.75), float("beta", -1.5)];
        gemm(a, b, Some(&[m, n]), 50).attrs(attrs.clone()).check(1e-4, 1e-4);
        gemm(a, b, None, 51).attrs(attrs.clone()).constants(&[1]).check(1e-4, 1e-4);
    }
}

#[test]
fn gemm_broadcasts_c() {
    let (m, k, n) = (37, 53, 71);
    for c in [&[][..], &[1], &[n], &[1, n], &[m, 1], &[1, 1], &[m, n]] {
        gemm(&[m, k], &[k, n], Some(c), 60).attrs(vec![float("beta", 0.5)]).constants(&[1, 2]).check(1e-4, 1e-4);
    }
    // beta == 0: C is ignored.
    gemm(&[m, k], &[k, n], Some(&[n]), 61).attrs(vec![float("beta", 0.0)]).check(1e-4, 1e-4);
}

#[test]
fn gemm_single_rows_and_columns() {
    for tb in [0, 1] {
        let b: &[usize] = if tb == 1 { &[71, 300] } else { &[300, 71] };
        gemm(&[1, 300], b, Some(&[71]), 70).attrs(vec![int("transB", tb)]).check(1e-4, 1e-4);
        let b: &[usize] = if tb == 1 { &[1, 300] } else { &[300, 1] };
        gemm(&[37, 300], b, Some(&[37, 1]), 71).attrs(vec![int("transB", tb), float("alpha", 2.0)]).check(1e-4, 1e-4);
    }
    gemm(&[300, 1], &[300, 71], None, 72).attrs(vec![int("transA", 1)]).check(1e-4, 1e-4);
    gemm(&[1, 1], &[1, 1], Some(&[]), 73).check(1e-5, 1e-6);
}

/// `t` converted to float16.
pub(crate) fn half(t: &onyx_core::Tensor) -> onyx_core::Tensor {
    let v: Vec<half::f16> = t.as_slice::<f32>().unwrap().iter().map(|&x| half::f16::from_f32(x)).collect();
    crate::testkit::t(t.shape(), v)
}

/// Whether the test adapter computes in f16 (else the f16 cases are skipped).
pub(crate) fn has_f16() -> bool {
    crate::testkit::provider().is_some_and(|p| p.context().is_ok_and(|c| c.has_f16()))
}

#[test]
fn float16_products() {
    if !has_f16() {
        return;
    }
    let f16_case = |op: &'static str, shapes: &[&[usize]], seed: u64| {
        let inputs = shapes.iter().enumerate().map(|(i, s)| half(&rand(s, -1.0, 1.0, seed + i as u64))).collect();
        Case::new(op, inputs)
    };
    f16_case("MatMul", &[&[2, 37, 53], &[53, 71]], 80).check(2e-3, 5e-3);
    f16_case("MatMul", &[&[1, 53], &[53, 71]], 81).check(2e-3, 5e-3);
    f16_case("Gemm", &[&[53, 37], &[71, 53], &[71]], 82)
        .attrs(vec![int("transA", 1), int("transB", 1)])
        .check(2e-3, 5e-3);
    // Every load order, several tiles with ragged edges, K not a multiple of the K step.
    for (ta, tb) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let a: &[usize] = if ta == 1 { &[77, 130] } else { &[130, 77] };
        let b: &[usize] = if tb == 1 { &[97, 77] } else { &[77, 97] };
        f16_case("Gemm", &[a, b, &[130, 1]], 83 + 10 * ta + tb)
            .attrs(vec![int("transA", ta as i64), int("transB", tb as i64), float("alpha", 0.5)])
            .check(2e-3, 5e-3);
    }
    // Split-K (few output tiles, long K) and broadcast batches.
    f16_case("MatMul", &[&[20, 1000], &[1000, 30]], 90).check(3e-3, 5e-3);
    f16_case("MatMul", &[&[20, 1000], &[1000, 32]], 92).check(3e-3, 5e-3);
    f16_case("MatMul", &[&[3, 1, 65, 40], &[2, 40, 66]], 91).check(2e-3, 5e-3);
    // Read 4 values at a time on cooperative matrices (A and B row-major, K and N multiples of
    // 4): ragged tiles, a last K step of 12 or 8, C and alpha, broadcast batches, split-K, both.
    f16_case("MatMul", &[&[130, 76], &[76, 132]], 95).check(2e-3, 5e-3);
    f16_case("Gemm", &[&[130, 72], &[72, 136], &[136]], 96).attrs(vec![float("alpha", 0.5)]).check(2e-3, 5e-3);
    f16_case("MatMul", &[&[2, 3, 40, 64], &[3, 64, 48]], 97).check(2e-3, 5e-3);
    f16_case("MatMul", &[&[37, 1000], &[1000, 200]], 98).check(3e-3, 5e-3);
    f16_case("MatMul", &[&[2, 40, 512], &[2, 512, 48]], 99).check(3e-3, 5e-3);
    // Empty K: nothing to read 4 at a time, zeros out.
    f16_case("MatMul", &[&[4, 0], &[0, 8]], 100).check(0.0, 0.0);
    let ctx = crate::testkit::provider().unwrap().context().unwrap().clone();
    if ctx.has_cooperative_matrix() {
        let keys: Vec<String> = ctx.compile_times().into_iter().map(|(key, _)| key).collect();
        for end in ["/coop", "/coop/slice", "/p4/coop", "/p4/coop/slice"] {
            assert!(keys.iter().any(|k| k.starts_with("matmul/tiled/f16") && k.ends_with(end)), "{end}: {keys:?}");
        }
    }
}

/// GPU time per run of `op` on `inputs`: `iters` runs recorded into one submission, after
/// a warm-up submission.
pub(crate) fn time_op(op: &dyn crate::kernel::GpuOp, inputs: &[onyx_core::Tensor], iters: usize) -> f64 {
    use onyx_core::ep::{RunState, ValueRef};
    let ctx = crate::testkit::provider().unwrap().context().unwrap().clone();
    let values: Vec<onyx_core::Value> =
        inputs.iter().map(|t| onyx_core::Value::Tensor(ctx.upload(t.view().unwrap()).unwrap())).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| Some(ValueRef::Value(v))).collect();
    let once = |n: usize| {
        let mut run = crate::run::GpuRun::new(ctx.clone());
        let mut outputs = vec![];
        for _ in 0..n {
            outputs.push(op.record(&mut run, &refs).unwrap());
        }
        let start = std::time::Instant::now();
        run.flush().unwrap();
        ctx.device().poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).unwrap();
        start.elapsed().as_secs_f64()
    };
    once(2);
    once(iters) / iters as f64
}

/// Throughput of the product kernels (run with `--ignored --nocapture` on a real GPU).
#[test]
#[ignore]
fn bench_products() {
    use super::{Gemm, MatMul, Pipelines, Walk};
    let Some(gpu) = crate::testkit::provider() else { return };
    let ctx = gpu.context().unwrap();
    eprintln!("adapter: {:?}", ctx.adapter_info().name);
    let at = onyx_core::Location::default();
    let matmul = MatMul {
        pipes: Pipelines::new(onyx_core::DataType::Float, Walk::K, Walk::Outer, false, super::Activation::Identity),
        alpha: 1.0,
        trans: [false, false],
        at: at.clone(),
    };
    for (m, k, n) in [
        (8, 8, 8),
        (128, 768, 768),
        (128, 768, 3072),
        (512, 1024, 1024),
        (2048, 2048, 2048),
        (4096, 4096, 4096),
        (1, 4096, 4096),
    ] {
        let inputs = [rand(&[m, k], -1.0, 1.0, 1), rand(&[k, n], -1.0, 1.0, 2)];
        report("MatMul", [m, k, n], time_op(&matmul, &inputs, 20));
    }
    let pipes = Pipelines::new(onyx_core::DataType::Float, Walk::K, Walk::K, true, super::Activation::Identity);
    let gemm = Gemm { pipes, alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true, has_c: true, at };
    for (m, k, n) in [(128, 768, 3072), (1, 4096, 4096)] {
        let inputs = [rand(&[m, k], -1.0, 1.0, 1), rand(&[n, k], -1.0, 1.0, 2), rand(&[n], -1.0, 1.0, 3)];
        report("Gemm transB", [m, k, n], time_op(&gemm, &inputs, 20));
    }
}

/// Prints the time `t` (seconds) of an `m x k` by `k x n` product with its FLOP rate and f32 traffic.
fn report(what: &str, [m, k, n]: [usize; 3], t: f64) {
    let flops = 2.0 * (m * k * n) as f64;
    let bytes = 4.0 * (m * k + k * n + m * n) as f64;
    eprintln!("{what} {m}x{k}x{n}: {:.1} us, {:.0} GFLOP/s, {:.0} GB/s", t * 1e6, flops / t / 1e9, bytes / t / 1e9);
}

/// FusedGemm against the CPU EP's (itself checked against Gemm then the activation's own op):
/// the tiled kernel, split-K (the activation applied once, after the slices are summed) and
/// the GEMV.
#[test]
fn fused_gemm_applies_its_activation_as_it_stores() {
    use crate::testkit::{floats, string};
    let acts: [(&str, &[f32]); 4] = [("Gelu", &[]), ("GeluTanh", &[]), ("LeakyRelu", &[0.2]), ("Clip", &[-0.25, 0.5])];
    let shapes: [(&[usize], &[usize]); 3] =
        [(&[37, 53], &[53, 71]), (&[37, 1000], &[1000, 71]), (&[1, 300], &[300, 71])];
    for (i, (name, params)) in acts.into_iter().enumerate() {
        for (j, (a, b)) in shapes.into_iter().enumerate() {
            let seed = 200 + 10 * i as u64 + j as u64;
            let inputs =
                vec![rand(a, -2.0, 2.0, seed), rand(b, -1.0, 1.0, seed + 1), rand(&[b[1]], -1.0, 1.0, seed + 2)];
            let mut attrs = vec![string("activation", name), float("alpha", 0.5)];
            if !params.is_empty() {
                attrs.push(floats("activation_params", params));
            }
            Case::new("FusedGemm", inputs)
                .domain(onyx_core::ir::ONYX_DOMAIN)
                .attrs(attrs)
                .constants(&[1, 2])
                .check(1e-4, 1e-4);
        }
    }
}
