//! Tests of MatMul, Gemm and MatMulInteger against naive references.

#![allow(clippy::type_complexity)] // the case tables are tuples

use onyx_core::ir::AttrValue;
use onyx_core::{DataType, Tensor};

use super::test_support::{assert_close, build, build_with_constants, node, run, to_f64, Rng};
use super::*;

/// Naive numpy matmul on f64: `out_shape` is the expected result shape.
fn reference_matmul(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize]) -> Vec<f64> {
    let a2: Vec<usize> = if ash.len() == 1 { vec![1, ash[0]] } else { ash.to_vec() };
    let b2: Vec<usize> = if bsh.len() == 1 { vec![bsh[0], 1] } else { bsh.to_vec() };
    let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
    let rank = a2.len().max(b2.len()) - 2;
    let pad = |s: &[usize]| -> Vec<usize> {
        let batch = &s[..s.len() - 2];
        let mut v = vec![1; rank - batch.len()];
        v.extend_from_slice(batch);
        v
    };
    let (pa, pb) = (pad(&a2), pad(&b2));
    let batch: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let count: usize = batch.iter().product();
    let mut out = Vec::new();
    for flat in 0..count {
        // Decompose the output batch index and map it into A and B (size-1 dims repeat).
        let mut rem = flat;
        let mut idx = vec![0; rank];
        for d in (0..rank).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        let lin = |shape: &[usize]| idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + if s == 1 { 0 } else { i });
        let (ao, bo) = (lin(&pa) * m * k, lin(&pb) * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|p| a[ao + i * k + p] * b[bo + p * n + j]).sum());
            }
        }
    }
    out
}

fn matmul_node() -> onyx_core::ir::Node {
    node("MatMul", &["a", "b"], 1, vec![])
}

#[test]
fn matmul_matches_numpy_semantics() {
    let mut rng = Rng::new(1);
    // (A shape, B shape, expected output shape)
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[3, 7], &[7, 5], &[3, 5]),
        (&[7], &[7, 5], &[5]),
        (&[3, 7], &[7], &[3]),
        (&[7], &[7], &[]),
        (&[2, 3, 7], &[7, 5], &[2, 3, 5]),
        (&[2, 3, 7], &[2, 7, 5], &[2, 3, 5]),
        (&[2, 1, 3, 7], &[4, 7, 5], &[2, 4, 3, 5]),
        (&[1, 3, 7], &[5, 7, 2], &[5, 3, 2]),
        (&[3, 7], &[2, 7, 5], &[2, 3, 5]),
        (&[7], &[3, 7, 2], &[3, 2]),
        (&[5, 33, 65], &[5, 65, 70], &[5, 33, 70]),
        (&[130, 70], &[70, 90], &[130, 90]),
        (&[3, 200], &[200, 600], &[3, 600]),
        (&[0, 3], &[3, 4], &[0, 4]),
        (&[2, 0], &[0, 4], &[2, 4]),
    ];
    for &(ash, bsh, osh) in cases {
        let a = rng.vec_f64(ash.iter().product());
        let b = rng.vec_f64(bsh.iter().product());
        let want = reference_matmul(&a, ash, &b, bsh);
        let kernel = build(build_matmul, &matmul_node(), 13).unwrap();
        // f64
        let inputs = [
            Some(Tensor::from_vec(ash.to_vec(), a.clone()).unwrap()),
            Some(Tensor::from_vec(bsh.to_vec(), b.clone()).unwrap()),
        ];
        let out = run(kernel.as_ref(), &inputs, 1).unwrap();
        assert_eq!(out[0].as_tensor().unwrap().shape(), osh, "{ash:?} @ {bsh:?}");
        assert_close(&to_f64(&out[0]), &want, 1e-12, &format!("f64 {ash:?} @ {bsh:?}"));
        // f32
        let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let inputs = [
            Some(Tensor::from_vec(ash.to_vec(), f(&a)).unwrap()),
            Some(Tensor::from_vec(bsh.to_vec(), f(&b)).unwrap()),
        ];
        let out = run(kernel.as_ref(), &inputs, 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("f32 {ash:?} @ {bsh:?}"));
    }
}

#[test]
fn matmul_half_and_integer_types() {
    let mut rng = Rng::new(2);
    let (ash, bsh) = ([2usize, 3, 5], [5usize, 4]);
    let a = rng.vec_f64(30);
    let b = rng.vec_f64(20);
    let want = reference_matmul(&a, &ash, &b, &bsh);
    let kernel = build(build_matmul, &matmul_node(), 13).unwrap();
    let h = |v: &[f64]| v.iter().map(|&x| half::bf16::from_f64(x)).collect::<Vec<_>>();
    let inputs =
        [Some(Tensor::from_vec(ash.to_vec(), h(&a)).unwrap()), Some(Tensor::from_vec(bsh.to_vec(), h(&b)).unwrap())];
    let out = run(kernel.as_ref(), &inputs, 1).unwrap();
    let t = out[0].as_tensor().unwrap();
    assert_eq!(t.dtype(), DataType::BFloat16);
    let got: Vec<f64> = t.as_slice::<half::bf16>().unwrap().iter().map(|x| x.to_f64()).collect();
    assert_close(&got, &want, 3e-2, "bf16");

    let ai: Vec<i64> = (0..30).map(|_| rng.range(-50, 50)).collect();
    let bi: Vec<i64> = (0..20).map(|_| rng.range(-50, 50)).collect();
    let want = reference_matmul(
        &ai.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        &ash,
        &bi.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        &bsh,
    );
    let inputs = [
        Some(Tensor::from_vec(ash.to_vec(), ai.clone()).unwrap()),
        Some(Tensor::from_vec(bsh.to_vec(), bi.clone()).unwrap()),
    ];
    let out = run(kernel.as_ref(), &inputs, 1).unwrap();
    let got: Vec<f64> = out[0].as_tensor().unwrap().as_slice::<i64>().unwrap().iter().map(|&x| x as f64).collect();
    assert_eq!(got, want);
    let a32: Vec<i32> = ai.iter().map(|&x| x as i32).collect();
    let b32: Vec<i32> = bi.iter().map(|&x| x as i32).collect();
    let inputs =
        [Some(Tensor::from_vec(ash.to_vec(), a32).unwrap()), Some(Tensor::from_vec(bsh.to_vec(), b32).unwrap())];
    let out = run(kernel.as_ref(), &inputs, 1).unwrap();
    let got: Vec<f64> = out[0].as_tensor().unwrap().as_slice::<i32>().unwrap().iter().map(|&x| x as f64).collect();
    assert_eq!(got, want);
}

#[test]
fn matmul_by_a_constant_b_runs_on_the_packed_b() {
    let mut rng = Rng::new(7);
    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    // (A shape, constant B shape): folded batches, a vector A, a batch that does not fold.
    let cases: &[(&[usize], &[usize])] =
        &[(&[2, 67, 131], &[131, 45]), (&[300], &[300, 17]), (&[13, 520], &[520, 33]), (&[0, 5], &[5, 7])];
    for &(ash, bsh) in cases {
        let a = rng.vec_f64(ash.iter().product());
        let b = rng.vec_f64(bsh.iter().product());
        let want = reference_matmul(&a, ash, &b, bsh);
        let b_tensor = Tensor::from_vec(bsh.to_vec(), f(&b)).unwrap();
        let kernel = build_with_constants(build_matmul, &matmul_node(), 13, vec![None, Some(&b_tensor)]).unwrap();
        let inputs = [Some(Tensor::from_vec(ash.to_vec(), f(&a)).unwrap()), Some(b_tensor.clone())];
        let out = run(kernel.as_ref(), &inputs, 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("f32 {ash:?} @ const {bsh:?}"));
        // float16 operands are packed as f32 and the result comes back as float16.
        let h = |v: &[f64]| v.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>();
        let b16 = Tensor::from_vec(bsh.to_vec(), h(&b)).unwrap();
        let kernel = build_with_constants(build_matmul, &matmul_node(), 13, vec![None, Some(&b16)]).unwrap();
        let a16 = h(&a);
        let wide = |v: &[half::f16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
        let want16 = reference_matmul(&wide(&a16), ash, &wide(b16.as_slice::<half::f16>().unwrap()), bsh);
        let inputs = [Some(Tensor::from_vec(ash.to_vec(), a16).unwrap()), Some(b16.clone())];
        let out = run(kernel.as_ref(), &inputs, 1).unwrap();
        let t = out[0].as_tensor().unwrap();
        assert_eq!(t.dtype(), DataType::Float16);
        let got: Vec<f64> = t.as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect();
        assert_close(&got, &want16, 2e-3, &format!("f16 {ash:?} @ const {bsh:?}"));
    }
}

#[test]
fn matmul_errors_name_both_shapes() {
    let kernel = build(build_matmul, &matmul_node(), 13).unwrap();
    let t = |s: &[usize]| Some(Tensor::from_vec(s.to_vec(), vec![1.0f32; s.iter().product()]).unwrap());
    let cases: &[(&[usize], &[usize], &str)] = &[
        (&[3, 7], &[6, 5], "[3, 7] and [6, 5]: A has 7 columns but B has 6 rows"),
        (&[2, 3, 7], &[3, 7, 5], "batch dimensions do not broadcast"),
        (&[], &[3], "scalars"),
    ];
    for &(ash, bsh, msg) in cases {
        let err = run(kernel.as_ref(), &[t(ash), t(bsh)], 1).unwrap_err().to_string();
        assert!(err.contains(msg) && err.contains("MatMul node 'n'"), "{err}");
    }
    let err = run(kernel.as_ref(), &[t(&[2, 2]), Some(Tensor::from_vec(vec![2, 2], vec![1.0f64; 4]).unwrap())], 1)
        .unwrap_err();
    assert!(err.to_string().contains("input 1: expected float like input 0, found double"), "{err}");
    let bools = Tensor::from_bools(vec![1, 1], vec![true]).unwrap();
    let err = run(kernel.as_ref(), &[Some(bools.clone()), Some(bools)], 1).unwrap_err();
    assert!(err.to_string().contains("found bool"), "{err}");
    assert!(run(kernel.as_ref(), &[t(&[2, 2]), None], 1).is_err());
}

/// Naive Gemm reference with C given as (shape, data) broadcast to [m, n].
#[allow(clippy::too_many_arguments)]
fn reference_gemm(
    a: &[f64],
    ash: [usize; 2],
    ta: bool,
    b: &[f64],
    bsh: [usize; 2],
    tb: bool,
    c: Option<(&[usize], &[f64])>,
    alpha: f64,
    beta: f64,
) -> Vec<f64> {
    let (m, k) = if ta { (ash[1], ash[0]) } else { (ash[0], ash[1]) };
    let n = if tb { bsh[0] } else { bsh[1] };
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| {
                    let x = if ta { a[p * m + i] } else { a[i * k + p] };
                    let y = if tb { b[j * k + p] } else { b[p * n + j] };
                    x * y
                })
                .sum();
            let cv = match c {
                None => 0.0,
                Some((s, d)) => {
                    let (cr, cc) = match s.len() {
                        0 => (1, 1),
                        1 => (1, s[0]),
                        _ => (s[0], s[1]),
                    };
                    d[(if cr == 1 { 0 } else { i }) * cc + if cc == 1 { 0 } else { j }]
                }
            };
            out[i * n + j] = alpha * s + beta * cv;
        }
    }
    out
}

fn gemm_node(alpha: f32, beta: f32, ta: bool, tb: bool, with_c: bool) -> onyx_core::ir::Node {
    let inputs: &[&str] = if with_c { &["a", "b", "c"] } else { &["a", "b"] };
    node(
        "Gemm",
        inputs,
        1,
        vec![
            ("alpha", AttrValue::Float(alpha)),
            ("beta", AttrValue::Float(beta)),
            ("transA", AttrValue::Int(ta as i64)),
            ("transB", AttrValue::Int(tb as i64)),
        ],
    )
}

/// Gemm on random `m x k` by `k x n` operands for every transpose, C shape and (alpha, beta),
/// against the reference: f64 operands, or f32 ones with B a constant (the packed path).
fn check_gemm(seed: u64, (m, k, n): (usize, usize, usize), constant_b: bool) {
    let mut rng = Rng::new(seed);
    let tensor = |shape: &[usize], v: &[f64]| {
        if constant_b {
            Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as f32).collect::<Vec<f32>>()).unwrap()
        } else {
            Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
        }
    };
    let c_shapes: &[Option<&[usize]>] =
        &[None, Some(&[]), Some(&[n]), Some(&[1, n]), Some(&[m, 1]), Some(&[m, n]), Some(&[1])];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for &csh in c_shapes {
            for (alpha, beta) in [(1.0, 1.0), (0.5, -2.0), (1.5, 0.0)] {
                let ash = if ta { [k, m] } else { [m, k] };
                let bsh = if tb { [n, k] } else { [k, n] };
                let a = rng.vec_f64(m * k);
                let b = rng.vec_f64(k * n);
                let c = csh.map(|s| rng.vec_f64(s.iter().product()));
                let want = reference_gemm(&a, ash, ta, &b, bsh, tb, csh.zip(c.as_deref()), alpha, beta);
                let b_tensor = tensor(&bsh, &b);
                let node = gemm_node(alpha as f32, beta as f32, ta, tb, csh.is_some());
                let constants = if constant_b { vec![None, Some(&b_tensor)] } else { vec![] };
                let kernel = build_with_constants(build_gemm, &node, 13, constants).unwrap();
                let mut inputs = vec![Some(tensor(&ash, &a)), Some(b_tensor.clone())];
                if let (Some(s), Some(c)) = (csh, &c) {
                    inputs.push(Some(tensor(s, c)));
                }
                let out = run(kernel.as_ref(), &inputs, 1).unwrap();
                assert_eq!(out[0].as_tensor().unwrap().shape(), &[m, n]);
                let tol = if constant_b { 1e-4 } else { 1e-12 };
                let what = format!("constant B {constant_b} ta={ta} tb={tb} c={csh:?} {alpha} {beta}");
                assert_close(&to_f64(&out[0]), &want, tol, &what);
            }
        }
    }
}

#[test]
fn gemm_matches_reference_for_transposes_and_c_broadcasts() {
    check_gemm(3, (5, 7, 3), false);
}

#[test]
fn gemm_by_a_constant_b_matches_the_reference() {
    check_gemm(8, (37, 70, 41), true);
}

#[test]
fn gemm_large_f32_and_int32() {
    let mut rng = Rng::new(4);
    let (m, k, n) = (67, 129, 71);
    let a = rng.vec_f64(m * k);
    let b = rng.vec_f64(k * n);
    let c = rng.vec_f64(n);
    let want = reference_gemm(&a, [k, m], true, &b, [k, n], false, Some((&[n], &c)), 0.75, 0.5);
    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let kernel = build(build_gemm, &gemm_node(0.75, 0.5, true, false, true), 11).unwrap();
    let inputs = [
        Some(Tensor::from_vec(vec![k, m], f(&a)).unwrap()),
        Some(Tensor::from_vec(vec![k, n], f(&b)).unwrap()),
        Some(Tensor::from_vec(vec![n], f(&c)).unwrap()),
    ];
    let out = run(kernel.as_ref(), &inputs, 1).unwrap();
    assert_close(&to_f64(&out[0]), &want, 1e-4, "f32 gemm");

    let ai: Vec<i32> = (0..12).map(|_| rng.range(-9, 9) as i32).collect();
    let bi: Vec<i32> = (0..8).map(|_| rng.range(-9, 9) as i32).collect();
    let ci: Vec<i32> = (0..2).map(|_| rng.range(-9, 9) as i32).collect();
    let g = |v: &[i32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let want = reference_gemm(&g(&ai), [3, 4], false, &g(&bi), [2, 4], true, Some((&[2], &g(&ci))), 2.0, 3.0);
    let kernel = build(build_gemm, &gemm_node(2.0, 3.0, false, true, true), 13).unwrap();
    let inputs = [
        Some(Tensor::from_vec(vec![3, 4], ai).unwrap()),
        Some(Tensor::from_vec(vec![2, 4], bi).unwrap()),
        Some(Tensor::from_vec(vec![2], ci).unwrap()),
    ];
    let out = run(kernel.as_ref(), &inputs, 1).unwrap();
    let got: Vec<f64> = out[0].as_tensor().unwrap().as_slice::<i32>().unwrap().iter().map(|&x| x as f64).collect();
    assert_eq!(got, want);
}

#[test]
fn gemm_errors() {
    let t = |s: &[usize]| Some(Tensor::from_vec(s.to_vec(), vec![1.0f32; s.iter().product()]).unwrap());
    let kernel = build(build_gemm, &gemm_node(1.0, 1.0, false, false, true), 13).unwrap();
    let cases: Vec<(Vec<Option<Tensor>>, &str)> = vec![
        (vec![t(&[2, 3]), t(&[4, 5]), t(&[5])], "inner dimensions 3 and 4 differ"),
        (vec![t(&[2, 3, 1]), t(&[3, 5]), t(&[5])], "input 0: expected a 2-D tensor, found shape [2, 3, 1]"),
        (vec![t(&[2, 3]), t(&[3]), t(&[5])], "input 1: expected a 2-D tensor"),
        (vec![t(&[2, 3]), t(&[3, 5]), t(&[4])], "input 2: expected a shape broadcastable to [2, 5], found shape [4]"),
        (vec![t(&[2, 3]), t(&[3, 5]), t(&[3, 5])], "broadcastable to [2, 5]"),
    ];
    for (inputs, msg) in cases {
        let err = run(kernel.as_ref(), &inputs, 1).unwrap_err().to_string();
        assert!(err.contains(msg) && err.contains("Gemm node 'n'"), "{err}");
    }
    let bad = node("Gemm", &["a", "b"], 1, vec![("alpha", AttrValue::Ints(vec![1]))]);
    assert!(build(build_gemm, &bad, 13).is_err());
}

/// Naive MatMulInteger for 2-D operands with per-row / per-column zero points.
fn reference_mmi(
    a: &[i32],
    b: &[i32],
    m: usize,
    k: usize,
    n: usize,
    azp: &dyn Fn(usize) -> i32,
    bzp: &dyn Fn(usize) -> i32,
) -> Vec<i32> {
    let mut out = vec![0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| (a[i * k + p] - azp(i)) * (b[p * n + j] - bzp(j))).sum();
        }
    }
    out
}

#[test]
fn matmul_integer_with_zero_points() {
    let mut rng = Rng::new(5);
    let (m, k, n) = (5, 11, 7);
    let a: Vec<u8> = (0..m * k).map(|_| rng.range(0, 256) as u8).collect();
    let b: Vec<i8> = (0..k * n).map(|_| rng.range(-128, 128) as i8).collect();
    let azp: Vec<u8> = (0..m).map(|_| rng.range(0, 256) as u8).collect();
    let bzp: Vec<i8> = (0..n).map(|_| rng.range(-128, 128) as i8).collect();
    let (a32, b32): (Vec<i32>, Vec<i32>) =
        (a.iter().map(|&x| x as i32).collect(), b.iter().map(|&x| x as i32).collect());
    let kernel = build(build_matmul_integer, &node("MatMulInteger", &["a", "b", "az", "bz"], 1, vec![]), 10).unwrap();
    let ta = Tensor::from_vec(vec![m, k], a.clone()).unwrap();
    let tb = Tensor::from_vec(vec![k, n], b.clone()).unwrap();
    // (a zero point, b zero point, reference zero points)
    let cases: Vec<(Option<Tensor>, Option<Tensor>, Vec<i32>, Vec<i32>)> = vec![
        (None, None, vec![0; m], vec![0; n]),
        (Some(Tensor::scalar(azp[0])), Some(Tensor::scalar(bzp[0])), vec![azp[0] as i32; m], vec![bzp[0] as i32; n]),
        (
            Some(Tensor::from_vec(vec![m], azp.clone()).unwrap()),
            Some(Tensor::from_vec(vec![n], bzp.clone()).unwrap()),
            azp.iter().map(|&x| x as i32).collect(),
            bzp.iter().map(|&x| x as i32).collect(),
        ),
        (
            Some(Tensor::from_vec(vec![m, 1], azp.clone()).unwrap()),
            None,
            azp.iter().map(|&x| x as i32).collect(),
            vec![0; n],
        ),
    ];
    for (az, bz, azr, bzr) in cases {
        let want = reference_mmi(&a32, &b32, m, k, n, &|i| azr[i], &|j| bzr[j]);
        let out = run(kernel.as_ref(), &[Some(ta.clone()), Some(tb.clone()), az, bz], 1).unwrap();
        let t = out[0].as_tensor().unwrap();
        assert_eq!(t.shape(), &[m, n]);
        assert_eq!(t.as_slice::<i32>().unwrap(), &want[..]);
    }
    // Batched A with one zero point per (batch, row): shape [2, m, 1].
    let a2: Vec<u8> = (0..2 * m * k).map(|_| rng.range(0, 256) as u8).collect();
    let azp2: Vec<u8> = (0..2 * m).map(|_| rng.range(0, 256) as u8).collect();
    let out = run(
        kernel.as_ref(),
        &[
            Some(Tensor::from_vec(vec![2, m, k], a2.clone()).unwrap()),
            Some(tb.clone()),
            Some(Tensor::from_vec(vec![2, m, 1], azp2.clone()).unwrap()),
            None,
        ],
        1,
    )
    .unwrap();
    let got = out[0].as_tensor().unwrap().as_slice::<i32>().unwrap().to_vec();
    for batch in 0..2 {
        let ab: Vec<i32> = a2[batch * m * k..(batch + 1) * m * k].iter().map(|&x| x as i32).collect();
        let want = reference_mmi(&ab, &b32, m, k, n, &|i| azp2[batch * m + i] as i32, &|_| 0);
        assert_eq!(&got[batch * m * n..(batch + 1) * m * n], &want[..], "batch {batch}");
    }
    // Errors: wrong zero-point count, float operand, zero point of another type.
    let err = run(
        kernel.as_ref(),
        &[Some(ta.clone()), Some(tb.clone()), Some(Tensor::from_vec(vec![3], vec![1u8; 3]).unwrap()), None],
        1,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("input 2: expected 1 zero point or 5 (one per row of A), found 3 zero points"),
        "{err}"
    );
    let err = run(
        kernel.as_ref(),
        &[Some(Tensor::from_vec(vec![1, 1], vec![1.0f32]).unwrap()), Some(tb.clone()), None, None],
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("input 0: expected a uint8 or int8 tensor, found float"), "{err}");
    let err = run(kernel.as_ref(), &[Some(ta), Some(tb), None, Some(Tensor::scalar(1u8))], 1).unwrap_err();
    assert!(err.to_string().contains("input 3: expected int8 like input 1, found uint8"), "{err}");
}
