//! Attention on wgpu against the CPU EP: 3-D and 4-D layouts, KV caches, masks, GQA, both
//! kernels, and PackedAttention against Attention on the parts.

use onyx_core::Tensor;

use crate::testkit::{assert_close, float, int, rand, startup_provider, Case};

/// The rows of 3-D `parts` side by side: `[B, S, sum of widths]`.
fn side_by_side(parts: &[&Tensor]) -> Tensor {
    let rows = parts[0].shape()[0] * parts[0].shape()[1];
    let widths: Vec<usize> = parts.iter().map(|p| p.shape()[2]).collect();
    let mut data = Vec::with_capacity(rows * widths.iter().sum::<usize>());
    for r in 0..rows {
        for (p, &w) in parts.iter().zip(&widths) {
            data.extend_from_slice(&p.as_slice::<f32>().unwrap()[r * w..(r + 1) * w]);
        }
    }
    let [b, s, _] = parts[0].shape() else { unreachable!() };
    Tensor::from_vec(vec![*b, *s, widths.iter().sum()], data).unwrap()
}

/// PackedAttention reads q, k and v in place from one tensor: the same output as the CPU's
/// Attention on the parts, through the tiled kernel and through the row kernel (startup),
/// with GQA, masks and sizes that cut the kernels' tiles.
#[test]
fn packed_attention_matches_attention_on_its_parts() {
    let cases = [(1, 2, 2, 5, 8), (2, 4, 2, 33, 64), (1, 3, 1, 17, 20), (1, 2, 2, 3, 130)];
    for (n, &(b, qh, kvh, s, d)) in cases.iter().enumerate() {
        let seed = 300 + 10 * n as u64;
        let q = rand(&[b, s, qh * d], -1.0, 1.0, seed);
        let k = rand(&[b, s, kvh * d], -1.0, 1.0, seed + 1);
        let v = rand(&[b, s, kvh * d], -1.0, 1.0, seed + 2);
        let qkv = side_by_side(&[&q, &k, &v]);
        let attrs = vec![int("q_num_heads", qh as i64), int("kv_num_heads", kvh as i64), float("scale", 0.3)];
        for mask in [None, Some(rand(&[s, s], -2.0, 0.0, seed + 3))] {
            let mut parts = vec![q.clone(), k.clone(), v.clone()];
            let mut packed = vec![qkv.clone()];
            parts.extend(mask.clone());
            packed.extend(mask.clone());
            let want = Case::new("Attention", parts).attrs(attrs.clone()).opset(23).run_cpu();
            let case = Case::new("PackedAttention", packed).attrs(attrs.clone()).domain(onyx_core::ir::ONYX_DOMAIN);
            for (gpu, kernels) in [(crate::testkit::provider(), "tuned"), (startup_provider(), "startup")] {
                let Some(gpu) = gpu else { return };
                let got = case.try_run_gpu(&gpu).unwrap();
                let what = format!("{:?} mask {} ({kernels})", cases[n], mask.is_some());
                assert_close(&got[0], &want[0], 1e-4, 1e-5, &what);
            }
        }
    }
}

fn bools(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n: usize = shape.iter().product();
    Tensor::from_bools(shape.to_vec(), (0..n).map(|_| rng.u32(0..4) != 0).collect()).unwrap()
}

#[test]
fn attention_4d_matches_the_cpu() {
    let (b, qh, kvh, qs, kvs, dh, dv) = (2, 6, 3, 5, 7, 9, 11);
    let q = rand(&[b, qh, qs, dh], -1.0, 1.0, 1);
    let k = rand(&[b, kvh, kvs, dh], -1.0, 1.0, 2);
    let v = rand(&[b, kvh, kvs, dv], -1.0, 1.0, 3);
    for causal in [0, 1] {
        for mode in 0..4 {
            let attrs = vec![int("is_causal", causal), int("qk_matmul_output_mode", mode), float("softcap", 2.0)];
            Case::new("Attention", vec![q.clone(), k.clone(), v.clone()])
                .attrs(attrs)
                .opset(23)
                .outputs(4)
                .check(1e-4, 1e-5);
        }
    }
    let mask = rand(&[qs, kvs], -2.0, 0.0, 4);
    Case::new("Attention", vec![q.clone(), k.clone(), v.clone(), mask]).opset(23).check(1e-4, 1e-5);
    let bmask = bools(&[b, 1, qs, kvs - 2], 5);
    let attrs = vec![float("scale", 0.3), int("is_causal", 1)];
    Case::new("Attention", vec![q, k, v, bmask]).attrs(attrs).opset(23).check(1e-4, 1e-5);
}

#[test]
fn attention_3d_with_past_matches_the_cpu() {
    let (b, qh, kvh, qs, kvs, past, dh, dv) = (2, 4, 2, 3, 4, 5, 8, 6);
    let q = rand(&[b, qs, qh * dh], -1.0, 1.0, 11);
    let k = rand(&[b, kvs, kvh * dh], -1.0, 1.0, 12);
    let v = rand(&[b, kvs, kvh * dv], -1.0, 1.0, 13);
    let pk = rand(&[b, kvh, past, dh], -1.0, 1.0, 14);
    let pv = rand(&[b, kvh, past, dv], -1.0, 1.0, 15);
    let mask = rand(&[b, qh, qs, past + kvs], -1.0, 0.0, 16);
    let attrs = vec![int("q_num_heads", qh as i64), int("kv_num_heads", kvh as i64), int("is_causal", 1)];
    let inputs = vec![q, k, v, mask, pk, pv];
    Case::new("Attention", inputs).attrs(attrs).opset(23).outputs(4).check(1e-4, 1e-5);
}

/// Runs the tiled kernel (no `qk_matmul_output`) over awkward sizes: query blocks and key
/// tiles cut mid-way, head sizes of both tilings, GQA, 3-D and 4-D layouts.
#[test]
fn tiled_attention_matches_the_cpu() {
    let shapes =
        [(1, 2, 1, 1, 1, 5, 3), (2, 4, 2, 17, 33, 64, 64), (1, 3, 3, 33, 15, 9, 20), (1, 2, 1, 7, 40, 100, 72)];
    for (n, &(b, qh, kvh, qs, kvs, dh, dv)) in shapes.iter().enumerate() {
        let seed = 100 + 10 * n as u64;
        let q = rand(&[b, qh, qs, dh], -1.0, 1.0, seed);
        let k = rand(&[b, kvh, kvs, dh], -1.0, 1.0, seed + 1);
        let v = rand(&[b, kvh, kvs, dv], -1.0, 1.0, seed + 2);
        for causal in [0, 1] {
            let attrs = vec![int("is_causal", causal)];
            Case::new("Attention", vec![q.clone(), k.clone(), v.clone()])
                .attrs(attrs)
                .opset(23)
                .outputs(3)
                .check(1e-4, 1e-5);
        }
        let mask = rand(&[qs, kvs], -3.0, 0.0, seed + 3);
        let attrs = vec![float("softcap", 1.5)];
        Case::new("Attention", vec![q.clone(), k.clone(), v.clone(), mask]).attrs(attrs).opset(23).check(1e-4, 1e-5);
        let bmask = bools(&[b, 1, qs, kvs], seed + 4);
        let attrs = vec![float("scale", 0.2), int("is_causal", 1)];
        Case::new("Attention", vec![q, k, v, bmask]).attrs(attrs).opset(23).check(1e-4, 1e-5);
    }
}

/// The tiled kernel on the 3-D layout with a KV cache, a bias mask over the whole cache and
/// causal masking offset by the past.
#[test]
fn tiled_attention_3d_with_past_matches_the_cpu() {
    let (b, qh, kvh, qs, kvs, past, dh, dv) = (2, 6, 2, 19, 5, 30, 16, 24);
    let q = rand(&[b, qs, qh * dh], -1.0, 1.0, 21);
    let k = rand(&[b, kvs, kvh * dh], -1.0, 1.0, 22);
    let v = rand(&[b, kvs, kvh * dv], -1.0, 1.0, 23);
    let pk = rand(&[b, kvh, past, dh], -1.0, 1.0, 24);
    let pv = rand(&[b, kvh, past, dv], -1.0, 1.0, 25);
    let mask = rand(&[b, 1, 1, past + kvs], -2.0, 0.0, 26);
    for causal in [0, 1] {
        let attrs = vec![int("q_num_heads", qh as i64), int("kv_num_heads", kvh as i64), int("is_causal", causal)];
        let inputs = vec![q.clone(), k.clone(), v.clone(), mask.clone(), pk.clone(), pv.clone()];
        Case::new("Attention", inputs).attrs(attrs).opset(23).outputs(3).check(1e-4, 1e-5);
    }
    // No cache and only the output: K and V are read in place in the 3-D layout.
    let mask = rand(&[b, 1, qs, kvs], -2.0, 0.0, 27);
    for causal in [0, 1] {
        let attrs = vec![int("q_num_heads", qh as i64), int("kv_num_heads", kvh as i64), int("is_causal", causal)];
        Case::new("Attention", vec![q.clone(), k.clone(), v.clone(), mask.clone()])
            .attrs(attrs)
            .opset(23)
            .check(1e-4, 1e-5);
    }
}

/// Rows whose every key is masked give zeros in the tiled kernel as on the CPU.
#[test]
fn tiled_attention_fully_masked_rows_are_zero() {
    let (b, qh, qs, kvs, dh) = (1, 2, 20, 18, 8);
    let q = rand(&[b, qh, qs, dh], -1.0, 1.0, 31);
    let k = rand(&[b, qh, kvs, dh], -1.0, 1.0, 32);
    let v = rand(&[b, qh, kvs, dh], -1.0, 1.0, 33);
    let mut rng = fastrand::Rng::with_seed(34);
    // Every third query row masks all its keys.
    let bits: Vec<bool> = (0..qs * kvs).map(|e| (e / kvs) % 3 != 0 && rng.u32(0..3) != 0).collect();
    let mask = Tensor::from_bools(vec![qs, kvs], bits).unwrap();
    Case::new("Attention", vec![q, k, v, mask]).opset(23).check(1e-4, 1e-5);
}
