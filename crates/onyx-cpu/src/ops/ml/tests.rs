//! ArrayFeatureExtractor, Binarizer and LabelEncoder on small random and hand-checked inputs,
//! and their errors.

use onyx_core::ir::{AttrValue, Node};
use onyx_core::Tensor;

use super::*;
use crate::ops::matmul::test_support::{build, node, run, Rng};
use crate::BuildFn;

fn kernel(f: BuildFn, op: &str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>, since: i64) -> Result<Box<dyn Kernel>> {
    let mut n: Node = node(op, inputs, 1, attrs);
    n.domain = ML.into();
    build(f, &n, since)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn feature_extractor_gathers_last_axis_columns() {
    let mut rng = Rng::new(4);
    let (a, b, w) = (2, 3, 5);
    let x: Vec<f32> = (0..a * b * w).map(|_| rng.f64() as f32).collect();
    let idx = vec![4i64, 0, 4, 2];
    let k = kernel(build_feature_extractor, "ArrayFeatureExtractor", &["x", "i"], vec![], 1).unwrap();
    let ins = [
        Some(Tensor::from_vec(vec![a, b, w], x.clone()).unwrap()),
        Some(Tensor::from_vec(vec![4], idx.clone()).unwrap()),
    ];
    let y = run(k.as_ref(), &ins, 1).unwrap();
    let t = y[0].as_tensor().unwrap();
    assert_eq!(t.shape(), [a, b, 4]);
    let want: Vec<f32> =
        (0..a * b).flat_map(|r| idx.iter().map(|&i| x[r * w + i as usize]).collect::<Vec<_>>()).collect();
    assert_eq!(t.as_slice::<f32>().unwrap(), &want[..]);
    // 1-D strings give one row.
    let xs = Tensor::from_strings(vec![3], strings(&["a", "b", "c"])).unwrap();
    let y = run(k.as_ref(), &[Some(xs), Some(Tensor::from_vec(vec![1, 2], vec![2i64, 1]).unwrap())], 1).unwrap();
    let t = y[0].as_tensor().unwrap();
    assert_eq!(t.shape(), [1, 2]);
    assert_eq!(t.view().unwrap().strings().unwrap(), &strings(&["c", "b"])[..]);
    // Out-of-range indices are errors naming the node.
    let e = run(
        k.as_ref(),
        &[
            Some(Tensor::from_vec(vec![2], vec![1f32, 2.0]).unwrap()),
            Some(Tensor::from_vec(vec![1], vec![2i64]).unwrap()),
        ],
        1,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("ArrayFeatureExtractor") && e.contains("0..2"), "{e}");
}

#[test]
fn binarizer_thresholds_each_type() {
    let k = kernel(build_binarizer, "Binarizer", &["x"], vec![("threshold", AttrValue::Float(0.5))], 1).unwrap();
    let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![5], vec![0.2f32, 0.5, 0.7, f32::NAN, -3.0]).unwrap())], 1)
        .unwrap();
    assert_eq!(y[0].as_tensor().unwrap().as_slice::<f32>().unwrap(), [0.0, 0.0, 1.0, 0.0, 0.0]);
    let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![3], vec![0i64, 1, 7]).unwrap())], 1).unwrap();
    assert_eq!(y[0].as_tensor().unwrap().as_slice::<i64>().unwrap(), [0, 1, 1]);
    let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![2], vec![0.6f64, 0.4]).unwrap())], 1).unwrap();
    assert_eq!(y[0].as_tensor().unwrap().as_slice::<f64>().unwrap(), [1.0, 0.0]);
    let e = run(k.as_ref(), &[Some(Tensor::from_vec(vec![1], vec![1u8]).unwrap())], 1).err().unwrap().to_string();
    assert!(e.contains("Binarizer"), "{e}");
}

fn bytes(v: &[&str]) -> AttrValue {
    AttrValue::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

#[test]
fn label_encoder_maps_keys_with_defaults() {
    let x = Tensor::from_strings(vec![2, 3], strings(&["b", "z", "a", "c", "a", ""])).unwrap();
    // strings → int64 with a default.
    let a = vec![
        ("keys_strings", bytes(&["a", "b", "c"])),
        ("values_int64s", AttrValue::Ints(vec![7, 8, 9])),
        ("default_int64", AttrValue::Int(-5)),
    ];
    let k = kernel(build_label_encoder, "LabelEncoder", &["x"], a, 4).unwrap();
    let y = run(k.as_ref(), &[Some(x.clone())], 1).unwrap();
    let t = y[0].as_tensor().unwrap();
    assert_eq!(t.shape(), [2, 3]);
    assert_eq!(t.as_slice::<i64>().unwrap(), [8, -5, 7, 9, 7, -5]);
    // floats → strings with the default "_Unused"; NaN keys match NaN.
    let a = vec![("keys_floats", AttrValue::Floats(vec![1.5, f32::NAN])), ("values_strings", bytes(&["x", "nan"]))];
    let k = kernel(build_label_encoder, "LabelEncoder", &["x"], a, 2).unwrap();
    let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![3], vec![f32::NAN, 1.5, 2.0]).unwrap())], 1).unwrap();
    assert_eq!(y[0].as_tensor().unwrap().view().unwrap().strings().unwrap(), &strings(&["nan", "x", "_Unused"])[..]);
    // Tensor keys and values (int32 out) with a tensor default.
    let a = vec![
        ("keys_tensor", AttrValue::Tensor(Tensor::from_vec(vec![2], vec![3i64, 4]).unwrap())),
        ("values_tensor", AttrValue::Tensor(Tensor::from_vec(vec![2], vec![30i32, 40]).unwrap())),
        ("default_tensor", AttrValue::Tensor(Tensor::from_vec(vec![1], vec![-1i32]).unwrap())),
    ];
    let k = kernel(build_label_encoder, "LabelEncoder", &["x"], a, 4).unwrap();
    let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![3], vec![4i64, 5, 3]).unwrap())], 1).unwrap();
    assert_eq!(y[0].as_tensor().unwrap().as_slice::<i32>().unwrap(), [40, -1, 30]);
    // Errors: keys and values of different lengths, a string input for int keys.
    let a = vec![("keys_int64s", AttrValue::Ints(vec![1, 2])), ("values_int64s", AttrValue::Ints(vec![1]))];
    let e = kernel(build_label_encoder, "LabelEncoder", &["x"], a, 2).err().unwrap().to_string();
    assert!(e.contains("LabelEncoder") && e.contains("2 values"), "{e}");
    let a = vec![("keys_int64s", AttrValue::Ints(vec![1])), ("values_int64s", AttrValue::Ints(vec![1]))];
    let k = kernel(build_label_encoder, "LabelEncoder", &["x"], a, 2).unwrap();
    let e = run(k.as_ref(), &[Some(x)], 1).err().unwrap().to_string();
    assert!(e.contains("int64"), "{e}");
    let e = kernel(build_label_encoder, "LabelEncoder", &["x"], vec![("values_int64s", AttrValue::Ints(vec![1]))], 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("keys"), "{e}");
}
