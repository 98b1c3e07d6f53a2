//! TreeEnsemble against a walk of the same trees written by hand, on random rows; every
//! comparison mode, set membership, NaN handling, the aggregations and post-transforms; then
//! the errors of malformed trees.

use onyx_core::ir::AttrValue;
use onyx_core::Tensor;

use super::*;
use crate::ops::matmul::test_support::{build, node, run, Rng};

/// Attributes of a two-tree ensemble over 3 features with 2 targets:
/// tree 0: node0 (f0 mode0 s0) → yes node1, no leaf 2; node1 (f1 mode1 s1) → yes leaf0, no leaf1.
/// tree 1: node2 (f2 mode2 s2) → yes leaf 3, no leaf 4.
fn attrs(
    modes: [u8; 3],
    splits: [f32; 3],
    aggregate: i64,
    post: i64,
    members: Option<Vec<f32>>,
) -> Vec<(&'static str, AttrValue)> {
    let mut a = vec![
        ("nodes_splits", AttrValue::Tensor(Tensor::from_vec(vec![3], splits.to_vec()).unwrap())),
        ("nodes_modes", AttrValue::Tensor(Tensor::from_vec(vec![3], modes.to_vec()).unwrap())),
        ("nodes_featureids", AttrValue::Ints(vec![0, 1, 2])),
        ("nodes_truenodeids", AttrValue::Ints(vec![1, 0, 3])),
        ("nodes_trueleafs", AttrValue::Ints(vec![0, 1, 1])),
        ("nodes_falsenodeids", AttrValue::Ints(vec![2, 1, 4])),
        ("nodes_falseleafs", AttrValue::Ints(vec![1, 1, 1])),
        ("nodes_missing_value_tracks_true", AttrValue::Ints(vec![1, 0, 0])),
        ("leaf_weights", AttrValue::Tensor(Tensor::from_vec(vec![5], vec![1.0f32, -2.0, 3.5, 0.25, 7.0]).unwrap())),
        ("leaf_targetids", AttrValue::Ints(vec![0, 1, 0, 1, 0])),
        ("tree_roots", AttrValue::Ints(vec![0, 2])),
        ("n_targets", AttrValue::Int(2)),
        ("aggregate_function", AttrValue::Int(aggregate)),
        ("post_transform", AttrValue::Int(post)),
    ];
    if let Some(m) = members {
        a.push(("membership_values", AttrValue::Tensor(Tensor::from_vec(vec![m.len()], m).unwrap())));
    }
    a
}

fn holds(mode: u8, x: f64, split: f64, set: &[f64]) -> bool {
    match mode {
        0 => x <= split,
        1 => x < split,
        2 => x >= split,
        3 => x > split,
        4 => x == split,
        5 => x != split,
        _ => set.contains(&x),
    }
}

/// The leaves a row reaches, walked by hand, aggregated.
fn naive(x: &[f64], modes: [u8; 3], splits: [f32; 3], sets: &[Vec<f64>; 3], aggregate: i64) -> Vec<f64> {
    let w = [1.0, -2.0, 3.5, 0.25, 7.0];
    let t = [0, 1, 0, 1, 0];
    let test = |i: usize| (i == 0 && x[0].is_nan()) || holds(modes[i], x[i], splits[i] as f64, &sets[i]);
    let leaf0 = match (test(0), test(1)) {
        (true, true) => 0,
        (true, false) => 1,
        _ => 2,
    };
    let leaf1 = if test(2) { 3 } else { 4 };
    let init = match aggregate {
        2 => f32::MAX as f64,
        3 => -(f32::MAX as f64),
        _ => 0.0,
    };
    let mut y = vec![init; 2];
    for l in [leaf0, leaf1] {
        y[t[l]] = match aggregate {
            0 => y[t[l]] + w[l] / 2.0,
            1 => y[t[l]] + w[l],
            2 => y[t[l]].min(w[l]),
            _ => y[t[l]].max(w[l]),
        };
    }
    y
}

fn kernel(a: Vec<(&'static str, AttrValue)>) -> Result<Box<dyn Kernel>> {
    let mut n = node("TreeEnsemble", &["x"], 1, a);
    n.domain = "ai.onnx.ml".into();
    build(build_tree_ensemble, &n, 5)
}

#[test]
fn every_mode_and_aggregation_matches_a_hand_walk() {
    let mut rng = Rng::new(11);
    let rows = 17;
    // Small integers so that equality and membership tests hit; some NaNs in feature 0.
    let x: Vec<f32> = (0..rows * 3).map(|i| if i % 13 == 0 { f32::NAN } else { rng.range(0, 4) as f32 }).collect();
    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for modes in [[0u8, 1, 2], [3, 4, 5], [6, 0, 6], [5, 6, 4]] {
        let splits = [1.0f32, 2.0, 2.0];
        let sets: [Vec<f64>; 3] =
            std::array::from_fn(|i| if modes[i] == 6 { vec![1.0 + i as f64, 3.0] } else { vec![] });
        let members: Vec<f32> =
            sets.iter().filter(|s| !s.is_empty()).flat_map(|s| s.iter().map(|&v| v as f32).chain([f32::NAN])).collect();
        let members = (!members.is_empty()).then_some(members);
        for aggregate in 0..4 {
            let k = kernel(attrs(modes, splits, aggregate, 0, members.clone())).unwrap();
            let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![rows, 3], x.clone()).unwrap())], 1).unwrap();
            let t = y[0].as_tensor().unwrap();
            assert_eq!(t.shape(), [rows, 2]);
            let got = t.as_slice::<f32>().unwrap();
            for r in 0..rows {
                let want = naive(&xf[r * 3..r * 3 + 3], modes, splits, &sets, aggregate);
                for j in 0..2 {
                    assert!(
                        (got[r * 2 + j] as f64 - want[j]).abs() <= 1e-6 * want[j].abs().max(1.0),
                        "modes {modes:?} agg {aggregate} row {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn post_transforms_and_double_input() {
    let x = vec![0.0f64, 0.0, 5.0];
    // The row reaches leaves 0 (target 0: 1.0) and 4 (target 0: 7.0): sums [8, 0].
    let out = |post: i64| -> Vec<f64> {
        let k = kernel(attrs([0, 0, 0], [1.0, 1.0, 1.0], 1, post, None)).unwrap();
        let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![1, 3], x.clone()).unwrap())], 1).unwrap();
        y[0].as_tensor().unwrap().as_slice::<f64>().unwrap().to_vec()
    };
    assert_eq!(out(0), [8.0, 0.0]);
    let e8 = 8f64.exp();
    let s = out(1);
    assert!((s[0] - e8 / (e8 + 1.0)).abs() < 1e-12 && (s[1] - 1.0 / (e8 + 1.0)).abs() < 1e-12, "{s:?}");
    let l = out(2);
    assert!((l[0] - 1.0 / (1.0 + (-8f64).exp())).abs() < 1e-12 && (l[1] - 0.5).abs() < 1e-12, "{l:?}");
    assert_eq!(out(3), [1.0, 0.0]);
}

#[test]
fn malformed_trees_are_errors_naming_the_node() {
    let err = |a: Vec<(&'static str, AttrValue)>| kernel(a).err().expect("an error").to_string();
    let mut a = attrs([0, 0, 0], [1.0; 3], 1, 0, None);
    a[3] = ("nodes_truenodeids", AttrValue::Ints(vec![1, 0, 9]));
    let e = err(a);
    assert!(e.contains("TreeEnsemble") && e.contains("nodes_truenodeids"), "{e}");
    let e = err(attrs([0, 6, 0], [1.0; 3], 1, 0, None));
    assert!(e.contains("membership_values"), "{e}");
    let e = err(attrs([0, 9, 0], [1.0; 3], 1, 0, None));
    assert!(e.contains("nodes_modes"), "{e}");
    let e = err(attrs([0, 0, 0], [1.0; 3], 7, 0, None));
    assert!(e.contains("aggregate_function"), "{e}");
    let mut a = attrs([0, 0, 0], [1.0; 3], 1, 0, None);
    a[9] = ("leaf_targetids", AttrValue::Ints(vec![0, 1, 0, 1, 2]));
    assert!(err(a).contains("leaf_targetids"));
    // A cycle: node 1's false branch goes back to node 0.
    let mut a = attrs([0, 0, 0], [1.0; 3], 1, 0, None);
    a[5] = ("nodes_falsenodeids", AttrValue::Ints(vec![2, 0, 4]));
    a[6] = ("nodes_falseleafs", AttrValue::Ints(vec![1, 0, 1]));
    let k = kernel(a).unwrap();
    let e = run(k.as_ref(), &[Some(Tensor::from_vec(vec![1, 3], vec![0f32, 5.0, 0.0]).unwrap())], 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cycle"), "{e}");
    // Too few features.
    let k = kernel(attrs([0, 0, 0], [1.0; 3], 1, 0, None)).unwrap();
    let e =
        run(k.as_ref(), &[Some(Tensor::from_vec(vec![1, 2], vec![0f32, 0.0]).unwrap())], 1).err().unwrap().to_string();
    assert!(e.contains("features"), "{e}");
}
