//! Helpers for the rule tests: types written as `float[batch,3,?]`, nodes built in one line,
//! and checks that compare formatted outputs.

use super::super::{Inferred, SymInt};
use super::{from_constant, infer_node};
use crate::ir::{AttrValue, Attribute, Node};
use crate::types::{Dim, TensorType, ValueType};
use crate::{DataType, Tensor};

/// Parses `float[b,3,?]` (a number is fixed, `?` unknown, a name a symbol; `float[...]` is
/// unknown rank) or `?` (unknown type).
pub fn ty(spec: &str) -> Inferred {
    if spec == "?" {
        return Inferred::of_type(ValueType::Unknown);
    }
    let (name, rest) = spec.split_once('[').unwrap_or_else(|| panic!("bad type spec {spec}"));
    let dtype = DataType::from_name(name).unwrap_or_else(|| panic!("bad dtype in {spec}"));
    let body = rest.strip_suffix(']').unwrap_or_else(|| panic!("bad type spec {spec}"));
    let shape = if body == "..." {
        None
    } else if body.is_empty() {
        Some(vec![])
    } else {
        Some(
            body.split(',')
                .map(|d| match d.trim() {
                    "?" => Dim::Unknown,
                    t => t.parse::<usize>().map(Dim::Fixed).unwrap_or_else(|_| Dim::Symbol(t.to_string())),
                })
                .collect(),
        )
    };
    Inferred::of_type(ValueType::Tensor(TensorType { dtype, shape }))
}

/// A constant int64 tensor of rank 1.
pub fn i64s(values: &[i64]) -> Inferred {
    from_constant(&Tensor::from_vec(vec![values.len()], values.to_vec()).unwrap())
}

/// A constant int64 scalar.
pub fn i64s0(value: i64) -> Inferred {
    from_constant(&Tensor::scalar(value))
}

/// A constant float tensor of rank 1.
pub fn f32s(values: &[f32]) -> Inferred {
    from_constant(&Tensor::from_vec(vec![values.len()], values.to_vec()).unwrap())
}

/// An int64 rank-1 tensor with symbolic elements (`"b"` symbol, `"?"` unknown, numbers known).
pub fn syms(values: &[&str]) -> Inferred {
    let mut inf = ty(&format!("int64[{}]", values.len()));
    inf.sym_value = Some(values.iter().map(|v| sym(v)).collect());
    inf
}

/// One symbolic integer from its spelling.
pub fn sym(v: &str) -> SymInt {
    match v {
        "?" => SymInt::Unknown,
        t => t.parse::<i64>().map(SymInt::Known).unwrap_or_else(|_| SymInt::Symbol(t.to_string())),
    }
}

/// An INT attribute.
pub fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Int(v) }
}

/// An INTS attribute.
pub fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Ints(v.to_vec()) }
}

/// A FLOAT attribute.
pub fn float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Float(v) }
}

/// A STRING attribute.
pub fn string(name: &str, v: &str) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::String(v.as_bytes().to_vec()) }
}

/// A TENSOR attribute.
pub fn tensor(name: &str, t: Tensor) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Tensor(t) }
}

/// A node named `n` with `inputs` inputs (`i0`, `i1`, ...) and `outputs` outputs.
pub fn node(op: &str, inputs: usize, outputs: usize, attributes: Vec<Attribute>) -> Node {
    Node {
        name: "n".into(),
        op_type: op.into(),
        inputs: (0..inputs).map(|i| format!("i{i}")).collect(),
        outputs: (0..outputs).map(|i| format!("o{i}")).collect(),
        attributes,
        ..Default::default()
    }
}

/// Formats an output as its type, e.g. `float[b,3]`.
pub fn show(inf: &Inferred) -> String {
    inf.ty.to_string()
}

/// Runs a node's rule on `inputs` (`None`: omitted or unknown).
pub fn run(node: &Node, since: i64, inputs: &[Option<Inferred>]) -> crate::Result<Vec<Inferred>> {
    let refs: Vec<Option<&Inferred>> = inputs.iter().map(Option::as_ref).collect();
    infer_node(node, since, &refs)
}

/// One table row: a node, its opset, its inputs and the expected output types.
pub struct Case {
    /// The node.
    pub node: Node,
    /// Since-version of the op.
    pub since: i64,
    /// Inputs.
    pub inputs: Vec<Option<Inferred>>,
    /// Expected outputs, formatted.
    pub want: Vec<&'static str>,
}

/// Builds a case with `n` outputs where `inputs` are written as type specs (`""`: omitted).
pub fn case(op: &str, since: i64, attrs: Vec<Attribute>, inputs: &[&str], want: &[&'static str]) -> Case {
    let ins: Vec<Option<Inferred>> = inputs.iter().map(|s| (!s.is_empty()).then(|| ty(s))).collect();
    case_with(op, since, attrs, ins, want)
}

/// Builds a case whose inputs are given as `Inferred` values (constants, symbolic values);
/// `None` inputs are omitted (their names are empty).
pub fn case_with(
    op: &str,
    since: i64,
    attrs: Vec<Attribute>,
    inputs: Vec<Option<Inferred>>,
    want: &[&'static str],
) -> Case {
    let mut n = node(op, inputs.len(), want.len(), attrs);
    for (name, input) in n.inputs.iter_mut().zip(&inputs) {
        if input.is_none() {
            name.clear();
        }
    }
    Case { node: n, since, inputs, want: want.to_vec() }
}

/// Runs every case and compares the formatted outputs.
pub fn check_all(cases: Vec<Case>) {
    for (i, c) in cases.into_iter().enumerate() {
        let out = run(&c.node, c.since, &c.inputs)
            .unwrap_or_else(|e| panic!("case {i} ({} v{}): unexpected error {e}", c.node.op_type, c.since));
        let got: Vec<String> = out.iter().map(show).collect();
        assert_eq!(got, c.want, "case {i} ({} v{})", c.node.op_type, c.since);
    }
}

/// Runs every case expecting an error whose message contains every needle.
pub fn check_errors(cases: Vec<(Case, Vec<&str>)>) {
    for (i, (c, needles)) in cases.into_iter().enumerate() {
        let err = match run(&c.node, c.since, &c.inputs) {
            Ok(out) => panic!(
                "case {i} ({}): expected an error, got {:?}",
                c.node.op_type,
                out.iter().map(show).collect::<Vec<_>>()
            ),
            Err(e) => e.to_string(),
        };
        for n in needles {
            assert!(err.contains(n), "case {i} ({}): error '{err}' lacks '{n}'", c.node.op_type);
        }
    }
}

/// The symbolic value of an output, spelled as in [`syms`].
pub fn sym_of(inf: &Inferred) -> Option<Vec<String>> {
    inf.sym_value.as_ref().map(|v| {
        v.iter()
            .map(|s| match s {
                SymInt::Known(n) => n.to_string(),
                SymInt::Symbol(name) => name.clone(),
                SymInt::Unknown => "?".into(),
            })
            .collect()
    })
}
