//! Elementwise ops: unary (same type as the input), binary and variadic with numpy
//! broadcasting, comparisons and logic (bool results), `Where`, `Cast`, `CastLike`, and the
//! integer arithmetic on symbolic values that shape computations use.

use super::super::{Inferred, SymInt};
use super::ctx::{describe, known, same_type, sym_out, tensor_out, tracks_values, unknown, Ctx, Rule};
use super::dims::{all_fixed, broadcast_shapes, fmt_dims};
use crate::types::Dim;
use crate::{DataType, Result, Tensor};

/// Ops whose single output has exactly the type of input 0.
const UNARY: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitwiseNot",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "CumSum",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Log",
    "LpNormalization",
    "LRN",
    "MeanVarianceNormalization",
    "Mish",
    "Neg",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Trilu",
];

/// Ops whose output has input 0's shape with a bool element type.
const PREDICATES: &[&str] = &["Not", "IsNaN", "IsInf"];

/// Binary and variadic ops whose inputs share one type and whose output has it.
const ARITHMETIC: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Mod",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
];

/// Binary ops giving bool.
const COMPARISONS: &[&str] = &["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"];

/// The rule for `op`, if it is elementwise.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        _ if UNARY.contains(&op) => unary,
        _ if PREDICATES.contains(&op) => predicate,
        _ if ARITHMETIC.contains(&op) => arithmetic,
        _ if COMPARISONS.contains(&op) => comparison,
        "Pow" => pow,
        "PRelu" => prelu,
        "Where" => where_,
        "Cast" => cast,
        "CastLike" => cast_like,
        _ => return None,
    })
}

fn unary(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(x) = cx.input(0) else {
        return Ok(vec![unknown()]);
    };
    if let (Some(values), Some(t)) = (&x.sym_value, x.tensor_type()) {
        let scalar = t.shape.as_deref().is_some_and(|s| s.is_empty());
        let op = cx.node.op_type.as_str();
        if matches!(op, "Neg" | "Abs") {
            let values = values.iter().map(|v| sym_unary(op, v)).collect();
            return Ok(vec![sym_out(t.dtype, scalar, values)]);
        }
    }
    Ok(vec![same_type(x)])
}

/// `Neg` and `Abs` of a symbolic integer (symbols stand for sizes, so `Abs` keeps them).
fn sym_unary(op: &str, v: &SymInt) -> SymInt {
    match (op, v) {
        ("Neg", SymInt::Known(x)) => x.checked_neg().map_or(SymInt::Unknown, SymInt::Known),
        ("Abs", SymInt::Known(x)) => x.checked_abs().map_or(SymInt::Unknown, SymInt::Known),
        ("Abs", s @ SymInt::Symbol(_)) => s.clone(),
        _ => SymInt::Unknown,
    }
}

fn predicate(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let shape = cx.tensor(0).and_then(|t| t.shape.clone());
    Ok(vec![tensor_out(DataType::Bool, shape)])
}

/// The broadcast shape of inputs `inputs` (`None`: some rank unknown). An error names the
/// first input that cannot broadcast with the ones before it.
pub fn broadcast_inputs(cx: &Ctx<'_>, inputs: impl IntoIterator<Item = usize>) -> Result<Option<Vec<Dim>>> {
    let mut acc: Option<Vec<Dim>> = None;
    for i in inputs {
        let Some(shape) = cx.shape(i) else {
            return Ok(None);
        };
        acc = Some(match acc {
            None => shape.to_vec(),
            Some(prev) => broadcast_shapes(&prev, shape).ok_or_else(|| {
                cx.input_error(
                    i,
                    format!("a shape broadcastable with {} (the inputs before it)", fmt_dims(&prev)),
                    describe(shape),
                )
            })?,
        });
    }
    Ok(acc)
}

/// Requires every input in `inputs` to have the element type of the first.
fn same_dtypes(cx: &Ctx<'_>, inputs: std::ops::Range<usize>) -> Result<Option<DataType>> {
    let first = inputs.start;
    for i in inputs.clone().skip(1) {
        cx.same_dtype(first, i)?;
    }
    Ok(inputs.map(|i| cx.dtype(i)).find_map(|d| d))
}

fn arithmetic(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let n = cx.input_count();
    let dtype = same_dtypes(cx, 0..n)?;
    let shape = broadcast_inputs(cx, 0..n)?;
    let Some(dtype) = dtype else {
        return Ok(vec![unknown()]);
    };
    if let Some(v) = sym_arithmetic(cx, dtype, shape.as_deref()) {
        return Ok(vec![v]);
    }
    Ok(vec![tensor_out(dtype, shape)])
}

/// Folds integer arithmetic on symbolic values of rank ≤ 1 (shape computations).
fn sym_arithmetic(cx: &Ctx<'_>, dtype: DataType, shape: Option<&[Dim]>) -> Option<Inferred> {
    if !tracks_values(dtype) || cx.input_count() != 2 {
        return None;
    }
    let scalar = scalar_or_vector(shape)?;
    let op = cx.node.op_type.as_str();
    let values = zip_syms(&cx.sym(0)?, &cx.sym(1)?)?.iter().map(|(a, b)| sym_binary(op, a, b)).collect();
    Some(sym_out(dtype, scalar, values))
}

/// Pairs the elements of two rank ≤ 1 symbolic values with broadcasting.
fn zip_syms(a: &[SymInt], b: &[SymInt]) -> Option<Vec<(SymInt, SymInt)>> {
    let len = match (a.len(), b.len()) {
        (x, y) if x == y => x,
        (1, y) => y,
        (x, 1) => x,
        _ => return None,
    };
    let pick = |v: &[SymInt], i: usize| v.get(if v.len() == 1 { 0 } else { i }).cloned();
    (0..len).map(|i| Some((pick(a, i)?, pick(b, i)?))).collect()
}

/// The rank of a value of rank ≤ 1: `Some(true)` for a scalar, `Some(false)` for 1-D.
fn scalar_or_vector(shape: Option<&[Dim]>) -> Option<bool> {
    match shape? {
        [] => Some(true),
        [_] => Some(false),
        _ => None,
    }
}

/// One element of `a op b` on symbolic integers.
fn sym_binary(op: &str, a: &SymInt, b: &SymInt) -> SymInt {
    use SymInt::{Known, Symbol, Unknown};
    let (x, y) = (known(a), known(b));
    let folded = match (op, x, y) {
        ("Add", Some(x), Some(y)) => x.checked_add(y),
        ("Sub", Some(x), Some(y)) => x.checked_sub(y),
        ("Mul", Some(x), Some(y)) => x.checked_mul(y),
        ("Div", Some(x), Some(y)) => x.checked_div(y),
        ("Max", Some(x), Some(y)) => Some(x.max(y)),
        ("Min", Some(x), Some(y)) => Some(x.min(y)),
        ("Mul", Some(0), _) | ("Mul", _, Some(0)) => Some(0),
        _ => None,
    };
    if let Some(v) = folded {
        return Known(v);
    }
    match (op, a, b) {
        ("Add", s @ Symbol(_), Known(0)) | ("Add", Known(0), s @ Symbol(_)) => s.clone(),
        ("Sub", s @ Symbol(_), Known(0)) => s.clone(),
        ("Sub", Symbol(p), Symbol(q)) if p == q => Known(0),
        ("Mul", s @ Symbol(_), Known(1)) | ("Mul", Known(1), s @ Symbol(_)) => s.clone(),
        ("Div", s @ Symbol(_), Known(1)) => s.clone(),
        ("Max" | "Min", Symbol(p), Symbol(q)) if p == q => a.clone(),
        _ => Unknown,
    }
}

fn comparison(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    cx.same_dtype(0, 1)?;
    let shape = broadcast_inputs(cx, 0..2)?;
    let folded = fold_comparison(cx, shape.as_deref());
    let mut out = tensor_out(DataType::Bool, shape.clone());
    let dims = shape.as_deref().and_then(all_fixed);
    out.constant = folded.zip(dims).and_then(|(v, d)| Tensor::from_bools(d, v).ok());
    Ok(vec![out])
}

/// Compares symbolic integer values of rank ≤ 1 when every result is certain.
fn fold_comparison(cx: &Ctx<'_>, shape: Option<&[Dim]>) -> Option<Vec<bool>> {
    if !cx.dtype(0).is_some_and(tracks_values) {
        return None;
    }
    scalar_or_vector(shape)?;
    let op = cx.node.op_type.as_str();
    zip_syms(&cx.sym(0)?, &cx.sym(1)?)?.iter().map(|(a, b)| sym_compare(op, a, b)).collect()
}

/// `a op b` when certain. Symbols stand for dimensions, so they are never negative.
fn sym_compare(op: &str, a: &SymInt, b: &SymInt) -> Option<bool> {
    use SymInt::{Known, Symbol};
    match (op, a, b) {
        (_, Known(x), Known(y)) => match op {
            "Equal" => Some(x == y),
            "Greater" => Some(x > y),
            "Less" => Some(x < y),
            "GreaterOrEqual" => Some(x >= y),
            "LessOrEqual" => Some(x <= y),
            _ => None,
        },
        ("Equal", Symbol(p), Symbol(q)) if p == q => Some(true),
        ("Equal", Symbol(_), Known(n)) | ("Equal", Known(n), Symbol(_)) if *n < 0 => Some(false),
        _ => None,
    }
}

fn pow(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let shape = broadcast_inputs(cx, 0..2)?;
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, shape)).unwrap_or_else(unknown)])
}

/// PRelu: the slope broadcasts to X (unidirectionally); the output has X's type.
fn prelu(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    cx.same_dtype(0, 1)?;
    broadcast_inputs(cx, 0..2)?;
    unary(cx)
}

fn where_(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    cx.same_dtype(1, 2)?;
    let shape = broadcast_inputs(cx, 0..3)?;
    let Some(dtype) = cx.dtype(1).or(cx.dtype(2)) else {
        return Ok(vec![unknown()]);
    };
    if let Some(v) = sym_where(cx, dtype, shape.as_deref()) {
        return Ok(vec![v]);
    }
    Ok(vec![tensor_out(dtype, shape)])
}

/// `Where` with a constant condition over symbolic values picks elements.
fn sym_where(cx: &Ctx<'_>, dtype: DataType, shape: Option<&[Dim]>) -> Option<Inferred> {
    if !tracks_values(dtype) || cx.dtype(0) != Some(DataType::Bool) {
        return None;
    }
    let scalar = scalar_or_vector(shape)?;
    let cond = cx.small_constant(0)?.view().ok()?.bytes().ok()?.to_vec();
    let (x, y) = (cx.sym(1)?, cx.sym(2)?);
    let len = [cond.len(), x.len(), y.len()].into_iter().max()?;
    let pick = |v: &[SymInt], i: usize| v.get(if v.len() == 1 { 0 } else { i }).cloned();
    let values: Option<Vec<SymInt>> = (0..len)
        .map(|i| if *cond.get(if cond.len() == 1 { 0 } else { i })? != 0 { pick(&x, i) } else { pick(&y, i) })
        .collect();
    Some(sym_out(dtype, scalar, values?))
}

fn cast(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let code = cx.node.get_int("to")?.ok_or_else(|| cx.attr_error("to", "a data type code", "nothing"))?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| cx.attr_error("to", "an ONNX data type code", code.to_string()))?;
    Ok(vec![cast_to(cx, to)])
}

fn cast_like(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    Ok(vec![match cx.dtype(1) {
        Some(to) => cast_to(cx, to),
        None => unknown(),
    }])
}

/// Input 0 converted to `to`: the same shape, and the same symbolic value between integers.
fn cast_to(cx: &Ctx<'_>, to: DataType) -> Inferred {
    let Some(t) = cx.tensor(0) else {
        return tensor_out(to, None);
    };
    let from = t.dtype;
    if tracks_values(to) && tracks_values(from) {
        if let (Some(values), Some(shape)) = (cx.input(0).and_then(|i| i.sym_value.clone()), &t.shape) {
            if shape.len() <= 1 {
                return sym_out(to, shape.is_empty(), values);
            }
        }
    }
    let mut out = tensor_out(to, t.shape.clone());
    if from == to {
        out.constant = cx.constant(0).cloned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::Tensor;

    #[test]
    fn unary_and_predicates() {
        check_all(vec![
            case("Relu", 14, vec![], &["float[batch,7,?]"], &["float[batch,7,?]"]),
            case("Gelu", 20, vec![], &["float16[3,5]"], &["float16[3,5]"]),
            case("Erf", 13, vec![], &["float[...]"], &["float[...]"]),
            case("Clip", 13, vec![], &["float[2,9]", "float[]", ""], &["float[2,9]"]),
            case("LeakyRelu", 16, vec![float("alpha", 0.1)], &["double[s]"], &["double[s]"]),
            case("Sigmoid", 13, vec![], &["?"], &["?"]),
            case("Not", 1, vec![], &["bool[5,b]"], &["bool[5,b]"]),
            case("IsNaN", 20, vec![], &["float16[3]"], &["bool[3]"]),
            case("IsInf", 20, vec![], &["float[...]"], &["bool[...]"]),
            case("CumSum", 14, vec![], &["int32[3,11]", "int64[]"], &["int32[3,11]"]),
        ]);
    }

    #[test]
    fn broadcasting_ops() {
        check_all(vec![
            case("Add", 14, vec![], &["float[b,1,7]", "float[3,1]"], &["float[b,3,7]"]),
            case("Sub", 14, vec![], &["float[b,s,5]", "float[5]"], &["float[b,s,5]"]),
            case("Mul", 14, vec![], &["float[b,5]", "float[c,5]"], &["float[?,5]"]),
            case("Div", 14, vec![], &["float[b,1]", "float[1,13]"], &["float[b,13]"]),
            case("Mod", 13, vec![], &["int32[n]", "int32[9]"], &["int32[9]"]),
            case("Max", 13, vec![], &["float[3,1,1]", "float[1,4,1]", "float[1,1,5]"], &["float[3,4,5]"]),
            case("Sum", 13, vec![], &["float[2,3]"], &["float[2,3]"]),
            case("Mean", 13, vec![], &["float[2,3]", "float[...]"], &["float[...]"]),
            case("Equal", 19, vec![], &["int64[4]", "int64[]"], &["bool[4]"]),
            case("Greater", 13, vec![], &["float[b,1]", "float[b,6]"], &["bool[b,6]"]),
            case("And", 7, vec![], &["bool[3]", "bool[2,1]"], &["bool[2,3]"]),
            case("Pow", 15, vec![], &["float[2,3]", "int64[]"], &["float[2,3]"]),
            case("PRelu", 16, vec![], &["float[b,3,5,5]", "float[3,1,1]"], &["float[b,3,5,5]"]),
            case("Where", 16, vec![], &["bool[b,1,s]", "float[]", "float[1,12,1]"], &["float[b,12,s]"]),
            case("Add", 14, vec![], &["?", "float[3]"], &["float[...]"]),
        ]);
    }

    #[test]
    fn broadcasting_errors() {
        check_errors(vec![
            (
                case("Add", 14, vec![], &["float[2,3]", "float[4]"], &[""]),
                vec!["Add node 'n'", "input 1", "[2,3]", "[4]"],
            ),
            (case("Sum", 13, vec![], &["float[3]", "float[3]", "float[2,5]"], &[""]), vec!["input 2", "[3]", "[2,5]"]),
            (case("Mul", 14, vec![], &["float[3]", "int64[3]"], &[""]), vec!["input 1", "float", "int64"]),
            (case("Where", 16, vec![], &["bool[3]", "float[3]", "float16[3]"], &[""]), vec!["input 2", "float16"]),
            (case("Less", 13, vec![], &["float[7,2]", "float[7,3]"], &[""]), vec!["[7,2]", "[7,3]"]),
        ]);
    }

    #[test]
    fn cast_types_and_values() {
        check_all(vec![
            case("Cast", 13, vec![int("to", 10)], &["float[b,3]"], &["float16[b,3]"]),
            case("Cast", 19, vec![int("to", 9)], &["float[...]"], &["bool[...]"]),
            case("Cast", 21, vec![int("to", 1)], &["?"], &["float[...]"]),
            case("CastLike", 15, vec![], &["int64[4]", "double[]"], &["double[4]"]),
        ]);
        let out = run(&node("Cast", 1, 1, vec![int("to", 6)]), 13, &[Some(syms(&["b", "12"]))]).unwrap();
        assert_eq!((show(&out[0]), sym_of(&out[0])), ("int32[2]".into(), Some(vec!["b".into(), "12".into()])));
        let out = run(&node("Cast", 1, 1, vec![int("to", 7)]), 13, &[Some(i64s(&[4, 5]))]).unwrap();
        assert_eq!(out[0].constant.as_ref().unwrap().as_slice::<i64>().unwrap(), &[4, 5]);
        check_errors(vec![
            (case("Cast", 13, vec![], &["float[2]"], &[""]), vec!["'to'", "nothing"]),
            (case("Cast", 13, vec![int("to", 99)], &["float[2]"], &[""]), vec!["'to'", "99"]),
        ]);
    }

    #[test]
    fn symbolic_arithmetic() {
        let cases: Vec<(&str, crate::ops::infer::Inferred, crate::ops::infer::Inferred, Vec<&str>)> = vec![
            ("Add", syms(&["b", "3"]), i64s(&[0, 4]), vec!["b", "7"]),
            ("Mul", syms(&["s"]), i64s0(12), vec!["?"]),
            ("Mul", syms(&["s", "5"]), i64s(&[1]), vec!["s", "5"]),
            ("Mul", syms(&["s", "?"]), i64s0(0), vec!["0", "0"]),
            ("Div", i64s(&[768, 7]), i64s0(12), vec!["64", "0"]),
            ("Div", syms(&["s"]), i64s0(0), vec!["?"]),
            ("Sub", syms(&["s", "s"]), syms(&["s", "0"]), vec!["0", "s"]),
            ("Max", syms(&["3", "s"]), i64s(&[5, 1]), vec!["5", "?"]),
            ("Add", i64s(&[i64::MAX]), i64s0(1), vec!["?"]),
        ];
        for (op, a, b, want) in cases {
            let out = run(&node(op, 2, 1, vec![]), 14, &[Some(a), Some(b)]).unwrap();
            let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            assert_eq!(sym_of(&out[0]), Some(want.clone()), "{op}");
            let all_known = want.iter().all(|s| s.parse::<i64>().is_ok());
            assert_eq!(out[0].constant.is_some(), all_known, "{op}: constant iff fully known");
        }
    }

    #[test]
    fn neg_and_abs_of_symbolic_values() {
        let cases =
            [("Neg", vec!["b", "3", "-1"], vec!["?", "-3", "1"]), ("Abs", vec!["b", "-3", "?"], vec!["b", "3", "?"])];
        for (op, input, want) in cases {
            let out = run(&node(op, 1, 1, vec![]), 13, &[Some(syms(&input))]).unwrap();
            assert_eq!(sym_of(&out[0]).unwrap(), want, "{op}");
        }
        let out = run(&node("Neg", 1, 1, vec![]), 13, &[Some(i64s(&[i64::MIN, 2]))]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["?", "-2"]);
    }

    #[test]
    fn comparisons_fold_known_values() {
        let cases: Vec<(&str, crate::ops::infer::Inferred, crate::ops::infer::Inferred, Option<Vec<u8>>)> = vec![
            ("Equal", syms(&["b", "-1", "4"]), i64s0(-1), Some(vec![0, 1, 0])),
            ("Equal", syms(&["b", "s"]), syms(&["b", "s"]), Some(vec![1, 1])),
            ("Equal", syms(&["b"]), i64s0(3), None),
            ("Less", i64s(&[1, 5]), i64s(&[3, 3]), Some(vec![1, 0])),
            ("Greater", syms(&["b"]), i64s0(0), None),
        ];
        for (op, a, b, want) in cases {
            let out = run(&node(op, 2, 1, vec![]), 13, &[Some(a), Some(b)]).unwrap();
            let got = out[0].constant.as_ref().map(|t| t.view().unwrap().bytes().unwrap().to_vec());
            assert_eq!(got, want, "{op}");
        }
    }

    #[test]
    fn where_with_constant_condition_picks_values() {
        let cond =
            crate::ops::infer::rules::from_constant(&Tensor::from_bools(vec![3], vec![true, false, true]).unwrap());
        let out =
            run(&node("Where", 3, 1, vec![]), 16, &[Some(cond), Some(i64s0(1)), Some(syms(&["b", "s", "7"]))]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["1", "s", "1"]);
    }
}
