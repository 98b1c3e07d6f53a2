use super::*;

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `a (m x k) * b (+ bias)` in f64, b read through `b_at(p, j)`.
fn reference(
    a: &[f32],
    m: usize,
    k: usize,
    n: usize,
    b_at: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] as f64 * b_at(p, j) as f64).sum();
            c[i * n + j] = dot + bias.map_or(0.0, |b| b[j] as f64);
        }
    }
    c
}

fn check(got: &[f32], want: &[f64], k: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let tol = 1e-5 * (k as f64).sqrt().max(1.0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
fn products_match_the_reference_on_every_form_and_awkward_sizes() {
    let isas = [Isa::Avx512, Isa::Avx2, Isa::Portable].into_iter().filter(|i| i.runs());
    for isa in isas {
        for &(m, k, n) in &[
            (1, 1, 1),
            (5, 3, 17),
            (6, 256, 16),
            (7, 257, 33),
            (13, 700, 15),
            (23, 65, 40),
            (128, 300, 100),
            (40, 520, 70),
        ] {
            let a = values(m * k, (m * 31 + k) as u64);
            let b = values(k * n, (k * 17 + n) as u64);
            let bias = values(n, n as u64);
            for with_bias in [false, true] {
                let bias = with_bias.then_some(&bias[..]);
                let packed = PackedB::new(MatRef::row_major(&b, k, n), 1.0, isa).unwrap();
                let mut c = values(m * n, 99); // stale values: every element must be written
                packed.matmul(&a, m, bias, &mut c).unwrap();
                let want = reference(&a, m, k, n, |p, j| b[p * n + j], bias);
                check(&c, &want, k, &format!("{isa:?} {m}x{k}x{n} bias {with_bias}"));
            }
        }
    }
}

#[test]
fn a_transposed_and_scaled_b_is_packed_through_its_strides() {
    let (m, k, n) = (9, 37, 21);
    let a = values(m * k, 1);
    let bt = values(n * k, 2); // B^T, n x k
    let packed = PackedB::new(MatRef::row_major(&bt, n, k).t(), 0.5, Isa::best()).unwrap();
    let mut c = vec![0.0; m * n];
    packed.matmul(&a, m, None, &mut c).unwrap();
    check(&c, &reference(&a, m, k, n, |p, j| 0.5 * bt[j * k + p], None), k, "transposed");
}

#[test]
fn strided_rows_read_and_write_inside_wider_matrices() {
    let (m, k, n, lda, ldc) = (13, 40, 21, 97, 50);
    let a = values((m - 1) * lda + k, 5);
    let b = values(k * n, 6);
    let bias = values(n, 7);
    let packed = PackedB::new(MatRef::row_major(&b, k, n), 1.0, Isa::best()).unwrap();
    for parallel in [false, true] {
        let before = values((m - 1) * ldc + n, 8);
        let mut c = before.clone();
        packed.matmul_strided(&a, lda, m, Some(&bias), &mut c, ldc, parallel).unwrap();
        let dense: Vec<f32> = (0..m).flat_map(|i| a[i * lda..i * lda + k].to_vec()).collect();
        let want = reference(&dense, m, k, n, |p, j| b[p * n + j], Some(&bias));
        let got: Vec<f32> = (0..m).flat_map(|i| c[i * ldc..i * ldc + n].to_vec()).collect();
        check(&got, &want, k, &format!("strided, parallel {parallel}"));
        let padding_kept = (0..m - 1).all(|i| c[i * ldc + n..(i + 1) * ldc] == before[i * ldc + n..(i + 1) * ldc]);
        assert!(padding_kept, "C's padding was written");
    }
    let mut c = vec![0.0; (m - 1) * ldc + n];
    assert!(packed.matmul_strided(&a, k - 1, m, None, &mut c, ldc, false).is_err());
    assert!(packed.matmul_strided(&a[1..], lda, m, None, &mut c, ldc, false).is_err());
    assert!(packed.matmul_strided(&a, lda, m, None, &mut c[1..], ldc, false).is_err());
}

#[test]
fn short_operands_are_errors() {
    let b = values(12, 3);
    assert!(PackedB::new(MatRef::row_major(&b, 4, 4), 1.0, Isa::Portable).is_err());
    let packed = PackedB::new(MatRef::row_major(&b, 3, 4), 1.0, Isa::Portable).unwrap();
    let mut c = vec![0.0; 8];
    assert!(packed.matmul(&values(5, 1), 2, None, &mut c).is_err());
    assert!(packed.matmul(&values(6, 1), 2, None, &mut c[..7]).is_err());
    assert!(packed.matmul(&values(6, 1), 2, Some(&[1.0; 3]), &mut c).is_err());
    assert!(packed.matmul(&values(6, 1), 2, Some(&[1.0; 4]), &mut c).is_ok());
}

#[test]
fn tasks_cover_the_product_and_give_every_thread_work() {
    for &(m, k, n, threads) in
        &[(128, 384, 1536, 2), (128, 1536, 384, 2), (128, 384, 384, 16), (1, 4096, 4096, 8), (3000, 64, 16, 4)]
    {
        let t = Tasks::new(m, k, n, (6, 16), threads);
        let (tiles, strips) = (m.div_ceil(6), n.div_ceil(16));
        assert!(t.rows.is_multiple_of(6) && t.rows > 0 && t.strips > 0, "{t:?}");
        assert_eq!(t.row_tasks, tiles.div_ceil(t.rows / 6), "{t:?}");
        assert_eq!(t.strip_tasks, strips.div_ceil(t.strips), "{t:?}");
        assert!(t.count() >= (threads * TASKS_PER_THREAD).min(tiles * strips), "{m}x{k}x{n}: {t:?}");
    }
}
