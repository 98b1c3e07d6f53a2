use onyx_core::{DataType, Tensor};

use crate::ops::layout::testkit::*;

/// Naive Gather reference on a 3-D tensor along axis 1.
fn gather_axis1(data: &[f32], shape: [usize; 3], idx: &[i64]) -> Vec<f32> {
    let mut out = Vec::new();
    for a in 0..shape[0] {
        for &i in idx {
            let i = if i < 0 { i + shape[1] as i64 } else { i } as usize;
            for c in 0..shape[2] {
                out.push(data[(a * shape[1] + i) * shape[2] + c]);
            }
        }
    }
    out
}

#[test]
fn gather_against_naive() {
    let data = rand_f32(4 * 5 * 3, 11);
    let x = t(&[4, 5, 3], data.clone());
    let idx = [0i64, -1, 2, 4, 1, 1];
    let y = run1(
        "Gather",
        13,
        vec![int("axis", 1)],
        &[Some(x.clone()), Some(t(&[3, 2], idx.iter().map(|&i| i as i32).collect()))],
    )
    .unwrap();
    assert_eq!(f32s(&y), (vec![4, 3, 2, 3], gather_axis1(&data, [4, 5, 3], &idx)));
    let y = run1("Gather", 11, vec![int("axis", -3)], &[Some(x.clone()), Some(Tensor::scalar(-1i64))]).unwrap();
    assert_eq!(f32s(&y), (vec![5, 3], data[45..].to_vec()));
    let s = strs(&[3], &["a", "b", "c"]);
    let y = run1("Gather", 1, vec![], &[Some(s), Some(i64s(&[2, 0, 2]))]).unwrap();
    assert_eq!(y.view().unwrap().strings().unwrap(), &["c", "a", "c"]);
    // A large gather takes the parallel path.
    let big = rand_f32(300 * 257, 3);
    let idx: Vec<i64> = (0..300).rev().collect();
    let y = run1("Gather", 13, vec![], &[Some(t(&[300, 257], big.clone())), Some(i64s(&idx))]).unwrap();
    assert_eq!(f32s(&y).1[..257], big[299 * 257..]);
}

#[test]
fn gather_errors() {
    let x = t(&[2, 5], vec![1f32; 10]);
    let err =
        run1("Gather", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(i64s(&[0, 5]))]).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("index 5") && err.contains("[-5, 5)"), "{err}");
    let err = run1("Gather", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(i64s(&[-6]))]).unwrap_err().to_string();
    assert!(err.contains("index -6"), "{err}");
    let err = run1("Gather", 13, vec![], &[Some(x.clone()), Some(t(&[1], vec![0f32]))]).unwrap_err().to_string();
    assert!(err.contains("float"), "{err}");
    let err = run1("Gather", 13, vec![int("axis", 2)], &[Some(x), Some(i64s(&[0]))]).unwrap_err().to_string();
    assert!(err.contains("axis 2"), "{err}");
}

#[test]
fn gather_elements_like_take_along_axis() {
    // np.take_along_axis(np.array([[1,2,3],[4,5,6],[7,8,9]]), np.array([[1,2,0],[2,0,0]]), axis=0)
    let x = t(&[3, 3], (1..=9i64).collect());
    let y = run1(
        "GatherElements",
        13,
        vec![int("axis", 0)],
        &[Some(x.clone()), Some(t(&[2, 3], vec![1i64, 2, 0, 2, 0, -3]))],
    )
    .unwrap();
    assert_eq!(i64v(&y), (vec![2, 3], vec![4, 8, 3, 7, 2, 3]));
    let y = run1("GatherElements", 11, vec![int("axis", 1)], &[Some(x.clone()), Some(t(&[2, 2], vec![0i32, 0, 1, 0]))])
        .unwrap();
    assert_eq!(i64v(&y), (vec![2, 2], vec![1, 1, 5, 4]));
    let err = run1("GatherElements", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(t(&[1, 1], vec![3i64]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("index 3") && err.contains("[-3, 3)"), "{err}");
    let err = run1("GatherElements", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(t(&[4, 1], vec![0i64; 4]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 1") && err.contains("[4, 1]"), "{err}");
    let err = run1("GatherElements", 13, vec![], &[Some(x), Some(t(&[3], vec![0i64; 3]))]).unwrap_err().to_string();
    assert!(err.contains("rank 2"), "{err}");
}

#[test]
fn gather_nd_spec_examples() {
    let x2 = t(&[2, 2], vec![0i64, 1, 2, 3]);
    let x3 = t(&[2, 2, 2], (0..8i64).collect());
    type Case = (Tensor, Tensor, i64, Vec<usize>, Vec<i64>);
    let cases: Vec<Case> = vec![
        (x2.clone(), t(&[2, 2], vec![0i64, 0, 1, 1]), 0, vec![2], vec![0, 3]),
        (x2.clone(), t(&[2, 1], vec![1i64, 0]), 0, vec![2, 2], vec![2, 3, 0, 1]),
        (x3.clone(), t(&[2, 2], vec![0i64, 1, 1, 0]), 0, vec![2, 2], vec![2, 3, 4, 5]),
        (x3.clone(), t(&[2, 1, 2], vec![0i64, 1, 1, 0]), 0, vec![2, 1, 2], vec![2, 3, 4, 5]),
        (x3.clone(), t(&[2, 1], vec![1i64, 0]), 1, vec![2, 2], vec![2, 3, 4, 5]),
        (x3.clone(), t(&[2, 2], vec![-1i64, 0, 1, 1]), 1, vec![2], vec![2, 7]),
    ];
    for (x, i, b, shape, want) in cases {
        let y = run1("GatherND", 13, vec![int("batch_dims", b)], &[Some(x), Some(i.clone())]).unwrap();
        assert_eq!(i64v(&y), (shape, want), "indices {:?} batch_dims {b}", i.as_slice::<i64>().unwrap());
    }
    let err =
        run1("GatherND", 13, vec![], &[Some(x2.clone()), Some(t(&[1, 2], vec![0i64, 2]))]).unwrap_err().to_string();
    assert!(err.contains("index 2"), "{err}");
    let err =
        run1("GatherND", 13, vec![], &[Some(x2.clone()), Some(t(&[1, 3], vec![0i64; 3]))]).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("at most 2"), "{err}");
    let err = run1("GatherND", 12, vec![int("batch_dims", 2)], &[Some(x2.clone()), Some(t(&[2, 2], vec![0i64; 4]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 1"), "{err}");
    let err = run1("GatherND", 13, vec![], &[Some(x2), Some(t(&[1, 2], vec![0i32; 2]))]).unwrap_err().to_string();
    assert!(err.contains("int32"), "{err}");
}

#[test]
fn scatter_nd_with_reductions() {
    let x = t(&[8], (1..=8i64).collect());
    let i = t(&[4, 1], vec![4i64, 3, 1, 7]);
    let u = t(&[4], vec![9i64, 10, 11, 12]);
    let y = run1("ScatterND", 11, vec![], &[Some(x.clone()), Some(i.clone()), Some(u.clone())]).unwrap();
    assert_eq!(i64v(&y).1, vec![1, 11, 3, 10, 9, 6, 7, 12]);
    let dup = t(&[2, 1], vec![0i64, 0]);
    let u2 = t(&[2], vec![5i64, 7]);
    let cases = [("add", 16, 13), ("mul", 16, 35), ("max", 18, 7), ("min", 18, 1)];
    for (r, v, want0) in cases {
        let y =
            run1("ScatterND", v, vec![string("reduction", r)], &[Some(x.clone()), Some(dup.clone()), Some(u2.clone())])
                .unwrap();
        assert_eq!(i64v(&y).1[0], want0, "{r}");
    }
    // slices: data 2x3, replace row -1
    let data = rand_f32(6, 2);
    let y = run1(
        "ScatterND",
        18,
        vec![],
        &[Some(t(&[2, 3], data.clone())), Some(t(&[1, 1], vec![-1i64])), Some(t(&[1, 3], vec![7f32, 8.0, 9.0]))],
    )
    .unwrap();
    assert_eq!(f32s(&y).1, [&data[..3], &[7.0, 8.0, 9.0]].concat());
    let f16x = Tensor::from_vec(vec![2], vec![half::f16::from_f32(1.5); 2]).unwrap();
    let f16u = Tensor::from_vec(vec![1], vec![half::f16::from_f32(2.0)]).unwrap();
    let y = run1(
        "ScatterND",
        16,
        vec![string("reduction", "mul")],
        &[Some(f16x), Some(t(&[1, 1], vec![1i64])), Some(f16u)],
    )
    .unwrap();
    assert_eq!(y.as_slice::<half::f16>().unwrap()[1].to_f32(), 3.0);

    let err =
        run1("ScatterND", 16, vec![string("reduction", "max")], &[Some(x.clone()), Some(i.clone()), Some(u.clone())])
            .unwrap_err()
            .to_string();
    assert!(err.contains("'reduction'"), "{err}");
    let err =
        run1("ScatterND", 11, vec![], &[Some(x.clone()), Some(t(&[1, 1], vec![8i64])), Some(t(&[1], vec![0i64]))])
            .unwrap_err()
            .to_string();
    assert!(err.contains("index 8") && err.contains("[-8, 8)"), "{err}");
    let err = run1("ScatterND", 11, vec![], &[Some(x.clone()), Some(i.clone()), Some(t(&[3], vec![0i64; 3]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 2") && err.contains("[4]"), "{err}");
    let err = run1("ScatterND", 11, vec![], &[Some(x.clone()), Some(i), Some(t(&[4], vec![0i32; 4]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 2") && err.contains("int32"), "{err}");
    let b = Tensor::from_bools(vec![2], vec![true, false]).unwrap();
    let err = run1("ScatterND", 16, vec![string("reduction", "add")], &[Some(b.clone()), Some(dup), Some(b)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("numeric"), "{err}");
}

#[test]
fn scatter_elements_spec_examples() {
    let x = t(&[3, 3], vec![0f32; 9]);
    let i = t(&[2, 3], vec![1i64, 0, 2, 0, 2, 1]);
    let u = t(&[2, 3], vec![1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2]);
    let y = run1("ScatterElements", 11, vec![], &[Some(x.clone()), Some(i.clone()), Some(u.clone())]).unwrap();
    assert_eq!(f32s(&y).1, vec![2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]);
    let y = run1("Scatter", 9, vec![], &[Some(x.clone()), Some(i.clone()), Some(u.clone())]).unwrap();
    assert_eq!(f32s(&y).1, vec![2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]);
    let x1 = t(&[1, 5], vec![1f32, 2.0, 3.0, 4.0, 5.0]);
    let i1 = t(&[1, 2], vec![1i32, -2]);
    let u1 = t(&[1, 2], vec![1.1f32, 2.1]);
    let y = run1("ScatterElements", 13, vec![int("axis", 1)], &[Some(x1.clone()), Some(i1.clone()), Some(u1.clone())])
        .unwrap();
    assert_eq!(f32s(&y).1, vec![1.0, 1.1, 3.0, 2.1, 5.0]);
    let i_dup = t(&[1, 2], vec![1i64, 1]);
    let y = run1(
        "ScatterElements",
        18,
        vec![int("axis", 1), string("reduction", "add")],
        &[Some(x1.clone()), Some(i_dup.clone()), Some(u1.clone())],
    )
    .unwrap();
    assert_close(&f32s(&y).1, &[1.0, 5.2, 3.0, 4.0, 5.0], 1e-6);
    let y = run1(
        "ScatterElements",
        18,
        vec![int("axis", 1), string("reduction", "min")],
        &[Some(x1.clone()), Some(i_dup), Some(u1.clone())],
    )
    .unwrap();
    assert_eq!(f32s(&y).1, vec![1.0, 1.1, 3.0, 4.0, 5.0]);
    let err = run1(
        "ScatterElements",
        13,
        vec![int("axis", 1)],
        &[Some(x1.clone()), Some(t(&[1, 1], vec![5i64])), Some(t(&[1, 1], vec![0f32]))],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("index 5"), "{err}");
    let err = run1("ScatterElements", 13, vec![int("axis", 1)], &[Some(x1), Some(i1), Some(t(&[1, 3], vec![0f32; 3]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 2"), "{err}");
}

#[test]
fn one_hot_like_numpy() {
    // indices [[1, 9], [-1, 2]], depth 3, values [0, 5], axis 1  -> numpy:
    // out[i, d, j] = 5 if idx[i, j] mod-wrapped == d
    let i = t(&[2, 2], vec![1i64, 9, -1, 2]);
    let y = run1(
        "OneHot",
        11,
        vec![int("axis", 1)],
        &[Some(i.clone()), Some(Tensor::scalar(3.0f32)), Some(t(&[2], vec![0i32, 5]))],
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3, 2]);
    assert_eq!(y.as_slice::<i32>().unwrap(), &[0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5, 5]);
    let y = run1(
        "OneHot",
        9,
        vec![],
        &[Some(t(&[2], vec![0.7f32, 2.2])), Some(t(&[1], vec![3i64])), Some(strs(&[2], &["n", "y"]))],
    )
    .unwrap();
    assert_eq!(y.view().unwrap().strings().unwrap(), &["y", "n", "n", "n", "n", "y"]);
    let err = run1("OneHot", 11, vec![], &[Some(i.clone()), Some(Tensor::scalar(0i64)), Some(t(&[2], vec![0i32, 5]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 1") && err.contains("positive depth"), "{err}");
    let err = run1("OneHot", 11, vec![], &[Some(i.clone()), Some(Tensor::scalar(3i64)), Some(t(&[3], vec![0i32; 3]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 2"), "{err}");
    let err =
        run1("OneHot", 11, vec![int("axis", 3)], &[Some(i), Some(Tensor::scalar(3i64)), Some(t(&[2], vec![0i32, 1]))])
            .unwrap_err()
            .to_string();
    assert!(err.contains("'axis'"), "{err}");
}

#[test]
fn trilu_against_naive() {
    let (rows, cols) = (5usize, 7usize);
    let data = rand_f32(2 * rows * cols, 5);
    for upper in [true, false] {
        for k in [-7i64, -2, 0, 1, 3, 9] {
            let y = run1(
                "Trilu",
                14,
                vec![int("upper", upper as i64)],
                &[Some(t(&[2, rows, cols], data.clone())), Some(Tensor::scalar(k))],
            )
            .unwrap();
            let want: Vec<f32> = data
                .iter()
                .enumerate()
                .map(|(p, &v)| {
                    let (i, j) = (((p / cols) % rows) as i64, (p % cols) as i64);
                    let keep = if upper { j - i >= k } else { j - i <= k };
                    if keep {
                        v
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(f32s(&y).1, want, "upper {upper} k {k}");
        }
    }
    let b = Tensor::from_bools(vec![2, 2], vec![true; 4]).unwrap();
    let y = run1("Trilu", 14, vec![int("upper", 0)], &[Some(b)]).unwrap();
    assert_eq!((y.dtype(), y.view().unwrap().bytes().unwrap()), (DataType::Bool, &[1u8, 0, 1, 1][..]));
    let err = run1("Trilu", 14, vec![], &[Some(t(&[3], vec![1f32; 3]))]).unwrap_err().to_string();
    assert!(err.contains("rank 2"), "{err}");
    let err = run1("Trilu", 14, vec![], &[Some(t(&[2, 2], vec![1f32; 4])), Some(Tensor::scalar(1i32))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("int32"), "{err}");
}
