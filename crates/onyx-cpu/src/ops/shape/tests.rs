use onyx_core::ep::ValueRef;
use onyx_core::{DataType, Location, Tensor, TensorView, Value};

use super::*;
use crate::ops::layout::testkit::*;

#[test]
fn reshape_dims_table() {
    let at = Location::default();
    type Case<'a, T> = (&'a [usize], &'a [i64], bool, T);
    let ok: &[Case<&[usize]>] = &[
        (&[2, 3, 4], &[4, -1], false, &[4, 6]),
        (&[2, 3, 4], &[0, 0, -1], false, &[2, 3, 4]),
        (&[2, 3, 4], &[-1], false, &[24]),
        (&[2, 0, 4], &[0, -1], false, &[2, 0]),
        (&[2, 0, 4], &[0, 4], true, &[0, 4]),
        (&[1], &[], false, &[]),
        (&[], &[1, 1], false, &[1, 1]),
    ];
    for &(input, spec, allowzero, want) in ok {
        assert_eq!(reshape_dims(input, spec, allowzero, &at).unwrap(), want, "{input:?} {spec:?}");
    }
    let bad: &[Case<&str>] = &[
        (&[2, 3], &[-1, -1], false, "at most one -1"),
        (&[2, 3], &[4, -1], false, "as many elements"),
        (&[2, 3], &[7], false, "as many elements"),
        (&[2, 3], &[0, 0, 0], false, "below the input rank"),
        (&[2, 3], &[-2, 3], false, ">= -1"),
        (&[2, 3], &[0, -1], true, "allowzero"),
        (&[2, 3], &[0, 6], true, "as many elements"),
    ];
    for &(input, spec, allowzero, msg) in bad {
        let err = reshape_dims(input, spec, allowzero, &at).unwrap_err().to_string();
        assert!(err.contains(msg) && err.contains("input 1"), "{input:?} {spec:?}: {err}");
    }
}

#[test]
fn reshape_shares_owned_and_copies_views() {
    let data = rand_f32(12, 1);
    let x = Value::Tensor(t(&[3, 4], data.clone()));
    let spec = Value::Tensor(i64s(&[2, -1]));
    let n = node("Reshape", &[true, true], 1, vec![]);
    let k = build_with(&n, 14, &no_subgraphs).unwrap();
    let out = k.run(&[Some(ValueRef::Value(&x)), Some(ValueRef::Value(&spec))], &[true]).unwrap();
    let y = out[0].as_tensor().unwrap();
    assert_eq!(y.shape(), &[2, 6]);
    let src = x.as_tensor().unwrap().as_slice::<f32>().unwrap();
    assert_eq!(y.as_slice::<f32>().unwrap().as_ptr(), src.as_ptr(), "owned input must be shared");
    let shape = [3usize, 4];
    let view = TensorView::from_slice(&shape, &data).unwrap();
    let out = k.run(&[Some(ValueRef::View(view)), Some(ValueRef::Value(&spec))], &[true]).unwrap();
    assert_eq!(f32s(out[0].as_tensor().unwrap()), (vec![2, 6], data.clone()));
    let err =
        run1("Reshape", 13, vec![], &[Some(t(&[3, 4], data)), Some(t(&[2], vec![2i32, 6]))]).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("int32"), "{err}");
}

#[test]
fn flatten_squeeze_unsqueeze() {
    let x = t(&[2, 1, 3, 1], (0..6i64).collect());
    let y = run1("Flatten", 13, vec![int("axis", -2)], &[Some(x.clone())]).unwrap();
    assert_eq!(i64v(&y), (vec![2, 3], (0..6).collect()));
    let y = run1("Flatten", 9, vec![int("axis", 0)], &[Some(x.clone())]).unwrap();
    assert_eq!(y.shape(), &[1, 6]);
    let y = run1("Flatten", 13, vec![int("axis", 4)], &[Some(x.clone())]).unwrap();
    assert_eq!(y.shape(), &[6, 1]);
    assert!(run1("Flatten", 13, vec![int("axis", 5)], &[Some(x.clone())]).unwrap_err().to_string().contains("'axis'"));

    assert_eq!(run1("Squeeze", 13, vec![], &[Some(x.clone())]).unwrap().shape(), &[2, 3]);
    assert_eq!(run1("Squeeze", 13, vec![], &[Some(x.clone()), Some(i64s(&[-1]))]).unwrap().shape(), &[2, 1, 3]);
    assert_eq!(run1("Squeeze", 11, vec![ints("axes", &[1, -1])], &[Some(x.clone())]).unwrap().shape(), &[2, 3]);
    let err = run1("Squeeze", 13, vec![], &[Some(x.clone()), Some(i64s(&[0]))]).unwrap_err().to_string();
    assert!(err.contains("size 1 along squeezed axis 0"), "{err}");
    let err = run1("Squeeze", 13, vec![], &[Some(x.clone()), Some(i64s(&[1, -3]))]).unwrap_err().to_string();
    assert!(err.contains("twice"), "{err}");

    let y = run1("Unsqueeze", 13, vec![], &[Some(x.clone()), Some(i64s(&[0, -1]))]).unwrap();
    assert_eq!(i64v(&y), (vec![1, 2, 1, 3, 1, 1], (0..6).collect()));
    let y = run1("Unsqueeze", 11, vec![ints("axes", &[1])], &[Some(t(&[3], vec![1f32, 2.0, 3.0]))]).unwrap();
    assert_eq!(y.shape(), &[3, 1]);
    assert_eq!(run1("Unsqueeze", 1, vec![ints("axes", &[0])], &[Some(Tensor::scalar(1i64))]).unwrap().shape(), &[1]);
    let err = run1("Unsqueeze", 13, vec![], &[Some(x.clone()), Some(i64s(&[6]))]).unwrap_err().to_string();
    assert!(err.contains("axis 6"), "{err}");
    let err = run1("Unsqueeze", 13, vec![], &[Some(x.clone())]).unwrap_err().to_string();
    assert!(err.contains("input 1"), "{err}");
    assert!(run1("Unsqueeze", 11, vec![], &[Some(x)]).unwrap_err().to_string().contains("'axes'"));
}

#[test]
fn shape_and_size() {
    let x = t(&[2, 3, 4], vec![0u8; 24]);
    let cases: &[(Vec<crate::ops::layout::testkit::Attr>, &[i64])] = &[
        (vec![], &[2, 3, 4]),
        (vec![int("start", -1)], &[4]),
        (vec![int("end", -1)], &[2, 3]),
        (vec![int("start", 1), int("end", 2)], &[3]),
        (vec![int("start", -10), int("end", 10)], &[2, 3, 4]),
        (vec![int("start", 2), int("end", 1)], &[]),
    ];
    for (attrs, want) in cases {
        let y = run1("Shape", 15, attrs.clone(), &[Some(x.clone())]).unwrap();
        assert_eq!(y.as_slice::<i64>().unwrap(), *want, "{attrs:?}");
    }
    // before opset 15 start/end are not attributes of Shape
    let y = run1("Shape", 13, vec![int("start", 1)], &[Some(x.clone())]).unwrap();
    assert_eq!(y.as_slice::<i64>().unwrap(), &[2, 3, 4]);
    let y = run1("Size", 13, vec![], &[Some(strs(&[2, 2], &["a", "b", "c", "d"]))]).unwrap();
    assert_eq!((y.shape().to_vec(), y.as_slice::<i64>().unwrap().to_vec()), (vec![], vec![4]));
}

#[test]
fn expand_broadcasts_like_numpy() {
    let data = rand_f32(3, 5);
    let x = t(&[3, 1], data.clone());
    // np.broadcast_to(x, (2, 3, 4)) and bidirectional: x * np.ones((1, 1)) -> (3, 1)
    let y = run1("Expand", 13, vec![], &[Some(x.clone()), Some(i64s(&[2, 1, 4]))]).unwrap();
    let want: Vec<f32> = (0..2).flat_map(|_| data.iter().flat_map(|&v| [v; 4])).collect();
    assert_eq!(f32s(&y), (vec![2, 3, 4], want));
    let y = run1("Expand", 8, vec![], &[Some(x.clone()), Some(i64s(&[1, 1]))]).unwrap();
    assert_eq!(f32s(&y), (vec![3, 1], data));
    let err = run1("Expand", 13, vec![], &[Some(x.clone()), Some(i64s(&[2, 4]))]).unwrap_err().to_string();
    assert!(err.contains("cannot be broadcast"), "{err}");
    let err = run1("Expand", 13, vec![], &[Some(x), Some(i64s(&[-1, 1]))]).unwrap_err().to_string();
    assert!(err.contains("non-negative"), "{err}");
}

#[test]
fn identity_and_dropout() {
    let x = t(&[2, 2], vec![1.5f32, -2.0, 3.0, 4.0]);
    assert_eq!(f32s(&run1("Identity", 16, vec![], &[Some(x.clone())]).unwrap()).1, vec![1.5, -2.0, 3.0, 4.0]);
    let outs = run_n("Dropout", 13, vec![], &[Some(x.clone())], 2).unwrap();
    assert_eq!(outs.len(), 2);
    let mask = outs[1].as_tensor().unwrap();
    assert_eq!((mask.dtype(), mask.view().unwrap().bytes().unwrap()), (DataType::Bool, &[1u8, 1, 1, 1][..]));
    let outs = run_n("Dropout", 7, vec![float("ratio", 0.3)], &[Some(x.clone())], 2).unwrap();
    assert_eq!(outs[1].as_tensor().unwrap().as_slice::<f32>().unwrap(), &[1.0; 4]);
    let training = Tensor::from_bools(vec![], vec![true]).unwrap();
    let err = run_n("Dropout", 12, vec![], &[Some(x.clone()), Some(Tensor::scalar(0.2f32)), Some(training.clone())], 1)
        .unwrap_err();
    assert!(matches!(err, onyx_core::Error::Unsupported(_)), "{err}");
    let outs =
        run_n("Dropout", 12, vec![], &[Some(x.clone()), Some(Tensor::scalar(0.0f32)), Some(training)], 1).unwrap();
    assert_eq!(f32s(outs[0].as_tensor().unwrap()).1, vec![1.5, -2.0, 3.0, 4.0]);
}
