use std::sync::Arc;

use onyx_core::ep::{SubgraphRunner, ValueRef};
use onyx_core::ir::{AttrValue, Graph};
use onyx_core::{DataType, Result, Sequence, Tensor, Value};

use crate::ops::layout::testkit::*;

fn seq(items: Vec<Tensor>) -> Value {
    let dtype = items.first().map_or(DataType::Float, |t| t.dtype());
    Value::Sequence(Sequence {
        elem_type: super::tensor_type(dtype),
        items: items.into_iter().map(Value::Tensor).collect(),
    })
}

fn items(v: &Value) -> Vec<Vec<f32>> {
    match v {
        Value::Sequence(s) => {
            s.items.iter().map(|i| i.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()).collect()
        }
        other => panic!("not a sequence: {}", other.describe()),
    }
}

fn run(op: &str, attrs: Vec<Attr>, inputs: &[Option<Value>], outputs: usize) -> Result<Vec<Value>> {
    let present: Vec<bool> = inputs.iter().map(Option::is_some).collect();
    run_values(&node(op, &present, outputs, attrs), 11, &no_subgraphs, inputs)
}

fn tv(t: Tensor) -> Option<Value> {
    Some(Value::Tensor(t))
}

#[test]
fn construct_at_insert_erase_length() {
    let (a, b, c) = (t(&[2], vec![1f32, 2.]), t(&[1], vec![3f32]), t(&[3], vec![4f32, 5., 6.]));
    let s = run("SequenceConstruct", vec![], &[tv(a.clone()), tv(b.clone())], 1).unwrap().remove(0);
    assert_eq!(items(&s), vec![vec![1., 2.], vec![3.]]);
    let at = |p: i64| run("SequenceAt", vec![], &[Some(s.clone()), tv(Tensor::scalar(p))], 1);
    assert_eq!(scalar_f32(&at(-1).unwrap()[0]), 3.0);
    assert_eq!(at(0).unwrap()[0].as_tensor().unwrap().as_slice::<f32>().unwrap(), &[1., 2.]);
    assert!(at(2).unwrap_err().to_string().contains("position 2"));
    assert!(at(-3).unwrap_err().to_string().contains("[-2, 1]"));
    let ins = run("SequenceInsert", vec![], &[Some(s.clone()), tv(c.clone()), tv(Tensor::scalar(1i32))], 1)
        .unwrap()
        .remove(0);
    assert_eq!(items(&ins), vec![vec![1., 2.], vec![4., 5., 6.], vec![3.]]);
    let end = run("SequenceInsert", vec![], &[Some(s.clone()), tv(c.clone())], 1).unwrap().remove(0);
    assert_eq!(items(&end)[2], vec![4., 5., 6.]);
    let err = run("SequenceInsert", vec![], &[Some(s.clone()), tv(i64s(&[1]))], 1).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("int64"), "{err}");
    let err =
        run("SequenceInsert", vec![], &[Some(s.clone()), tv(c.clone()), tv(Tensor::scalar(3i64))], 1).unwrap_err();
    assert!(err.to_string().contains("position 3"), "{err}");
    let er = run("SequenceErase", vec![], &[Some(ins.clone()), tv(Tensor::scalar(-3i64))], 1).unwrap().remove(0);
    assert_eq!(items(&er), vec![vec![4., 5., 6.], vec![3.]]);
    let er = run("SequenceErase", vec![], &[Some(ins.clone())], 1).unwrap().remove(0);
    assert_eq!(items(&er), vec![vec![1., 2.], vec![4., 5., 6.]]);
    let len = run("SequenceLength", vec![], &[Some(ins)], 1).unwrap();
    assert_eq!(len[0].as_tensor().unwrap().as_slice::<i64>().unwrap(), &[3]);
    let empty = run("SequenceEmpty", vec![int("dtype", 7)], &[], 1).unwrap().remove(0);
    match &empty {
        Value::Sequence(s) => assert!(s.items.is_empty() && s.elem_type == super::tensor_type(DataType::Int64)),
        other => panic!("{}", other.describe()),
    }
    assert!(run("SequenceErase", vec![], &[Some(empty.clone())], 1).unwrap_err().to_string().contains("empty"));
    let err = run("SequenceConstruct", vec![], &[tv(a), tv(i64s(&[1]))], 1).unwrap_err().to_string();
    assert!(err.contains("input 1"), "{err}");
    let err = run("SequenceLength", vec![], &[tv(b)], 1).unwrap_err().to_string();
    assert!(err.contains("a sequence"), "{err}");
    assert!(run("SequenceEmpty", vec![int("dtype", 99)], &[], 1).is_err());
}

#[test]
fn split_to_sequence_and_back() {
    let data = rand_f32(3 * 5, 9);
    let x = t(&[3, 5], data.clone());
    // np.split along axis 1 at [2, 3]: sizes 2, 1, 2
    let s = run("SplitToSequence", vec![int("axis", 1)], &[tv(x.clone()), tv(i64s(&[2, 1, 2]))], 1).unwrap().remove(0);
    let parts = items(&s);
    assert_eq!(parts[1], vec![data[2], data[7], data[12]]);
    let back = run("ConcatFromSequence", vec![int("axis", -1)], &[Some(s)], 1).unwrap();
    assert_eq!(f32s(back[0].as_tensor().unwrap()), (vec![3, 5], data.clone()));
    // A scalar split: pieces of 2 and a last piece of 1.
    let s = run("SplitToSequence", vec![], &[tv(x.clone()), tv(Tensor::scalar(2i64))], 1).unwrap().remove(0);
    assert_eq!(items(&s).iter().map(Vec::len).collect::<Vec<_>>(), vec![10, 5]);
    // No split, keepdims = 0: rows without the axis; then stacked back with new_axis.
    let s = run("SplitToSequence", vec![int("keepdims", 0)], &[tv(x.clone())], 1).unwrap().remove(0);
    if let Value::Sequence(q) = &s {
        assert_eq!(q.items[0].as_tensor().unwrap().shape(), &[5]);
    }
    let y = run("ConcatFromSequence", vec![int("axis", 1), int("new_axis", 1)], &[Some(s)], 1).unwrap();
    let (shape, d) = f32s(y[0].as_tensor().unwrap());
    assert_eq!(shape, vec![5, 3]);
    assert_eq!(d[..3], [data[0], data[5], data[10]]);
    let err = run("SplitToSequence", vec![], &[tv(x.clone()), tv(i64s(&[1, 1]))], 1).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("summing to 3"), "{err}");
    let err = run("SplitToSequence", vec![], &[tv(x.clone()), tv(Tensor::scalar(0i64))], 1).unwrap_err().to_string();
    assert!(err.contains("positive"), "{err}");
    let mixed = seq(vec![t(&[2], vec![1f32, 2.]), t(&[1, 2], vec![1f32, 2.])]);
    let err = run("ConcatFromSequence", vec![int("axis", 0)], &[Some(mixed)], 1).unwrap_err().to_string();
    assert!(err.contains("[1, 2]"), "{err}");
    let err = run("ConcatFromSequence", vec![int("axis", 0)], &[Some(seq(vec![]))], 1).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn sequence_map_with_a_tensor_and_an_outer_value() {
    // Body: (x, y, outer k) -> (x + y + k, shape of x)
    let body = |_: &Graph| -> Result<Arc<dyn SubgraphRunner>> {
        Ok(Arc::new(FnBody(|ins: &[ValueRef<'_>], outer: &std::collections::HashMap<&str, ValueRef<'_>>| {
            let (x, y) = (ins[0].tensor()?, ins[1].tensor()?);
            let k = outer["k"].tensor()?.as_slice::<f32>()?[0];
            let z: Vec<f32> = x.as_slice::<f32>()?.iter().zip(y.as_slice::<f32>()?).map(|(a, b)| a + b + k).collect();
            let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
            Ok(vec![Value::Tensor(Tensor::from_vec(x.shape().to_vec(), z)?), Value::Tensor(i64s(&shape))])
        })))
    };
    let mut n = node("SequenceMap", &[true, true], 2, vec![attr("body", AttrValue::Graph(Box::new(graph_io(2, 2))))]);
    n.implicit_inputs = vec!["k".into()];
    let s = seq(vec![t(&[2], vec![1f32, 2.]), t(&[2], vec![3f32, 4.])]);
    let out = run_values(&n, 17, &body, &[Some(s.clone()), tv(t(&[2], vec![10f32, 20.])), tv(Tensor::scalar(0.5f32))])
        .unwrap();
    assert_eq!(items(&out[0]), vec![vec![11.5, 22.5], vec![13.5, 24.5]]);
    // Two sequences pair up element by element.
    let s2 = seq(vec![t(&[2], vec![1f32, 1.]), t(&[2], vec![2f32, 2.])]);
    let out = run_values(&n, 17, &body, &[Some(s.clone()), Some(s2), tv(Tensor::scalar(0f32))]).unwrap();
    assert_eq!(items(&out[0]), vec![vec![2., 3.], vec![5., 6.]]);
    let short = seq(vec![t(&[2], vec![1f32, 1.])]);
    let err = run_values(&n, 17, &body, &[Some(s), Some(short), tv(Tensor::scalar(0f32))]).unwrap_err().to_string();
    assert!(err.contains("input 1") && err.contains("2 elements"), "{err}");
}

#[test]
fn optionals() {
    let x = t(&[2], vec![1f32, 2.]);
    let o = run("Optional", vec![], &[tv(x.clone())], 1).unwrap().remove(0);
    let has = |v: Option<Value>| {
        run("OptionalHasElement", vec![], &[v], 1).unwrap()[0].as_tensor().unwrap().view().unwrap().bytes().unwrap()[0]
    };
    assert_eq!(has(Some(o.clone())), 1);
    assert_eq!(has(tv(x.clone())), 1);
    assert_eq!(has(None), 0);
    let ty = onyx_core::types::ValueType::Sequence(Box::new(super::tensor_type(DataType::Float)));
    let empty = run("Optional", vec![attr("type", AttrValue::Type(ty))], &[None], 1).unwrap().remove(0);
    assert_eq!(has(Some(empty.clone())), 0);
    let got = run("OptionalGetElement", vec![], &[Some(o)], 1).unwrap();
    assert_eq!(got[0].as_tensor().unwrap().as_slice::<f32>().unwrap(), &[1., 2.]);
    let got = run("OptionalGetElement", vec![], &[tv(x)], 1).unwrap();
    assert_eq!(got[0].as_tensor().unwrap().len(), 2);
    let err = run("OptionalGetElement", vec![], &[Some(empty)], 1).unwrap_err().to_string();
    assert!(err.contains("empty optional"), "{err}");
    let err = run("Optional", vec![], &[None], 1).unwrap_err().to_string();
    assert!(err.contains("'type'"), "{err}");
}
