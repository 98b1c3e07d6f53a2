//! Ops that make new tensors: `Constant`, `ConstantOfShape`, `Range`, `EyeLike`.

use super::super::{Inferred, SymInt};
use super::ctx::{describe, known, sym_out, tensor_ints, tensor_out, tracks_values, unknown, Ctx, Rule, MAX_SYM_LEN};
use super::dims::{all_fixed, sym_to_dim};
use super::from_constant;
use crate::ir::AttrValue;
use crate::types::Dim;
use crate::{DataType, Result, Tensor};

/// The rule for `op`, if it makes new tensors.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "Constant" => constant,
        "ConstantOfShape" => constant_of_shape,
        "Range" => range,
        "EyeLike" => eye_like,
        _ => return None,
    })
}

/// The tensor a Constant node's attribute holds (`None`: the attribute's type does not
/// match its name).
fn constant_tensor(name: &str, value: &AttrValue) -> Option<Result<Tensor>> {
    let strings = |v: &[Vec<u8>]| v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect::<Vec<_>>();
    Some(match (name, value) {
        ("value" | "sparse_value", AttrValue::Tensor(t) | AttrValue::SparseTensor(t)) => Ok(t.clone()),
        ("value_float", AttrValue::Float(f)) => Ok(Tensor::scalar(*f)),
        ("value_int", AttrValue::Int(i)) => Ok(Tensor::scalar(*i)),
        ("value_floats", AttrValue::Floats(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        ("value_ints", AttrValue::Ints(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        ("value_string", AttrValue::String(s)) => Tensor::from_strings(vec![], strings(std::slice::from_ref(s))),
        ("value_strings", AttrValue::Strings(v)) => Tensor::from_strings(vec![v.len()], strings(v)),
        _ => return None,
    })
}

fn constant(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    const NAMES: [&str; 8] = [
        "value",
        "sparse_value",
        "value_float",
        "value_floats",
        "value_int",
        "value_ints",
        "value_string",
        "value_strings",
    ];
    let attr = NAMES.iter().find_map(|n| cx.node.attr(n));
    let Some(attr) = attr else {
        return Err(cx.attr_error("value", format!("one of {}", NAMES.join(", ")), "none of them"));
    };
    let tensor = constant_tensor(&attr.name, &attr.value)
        .ok_or_else(|| {
            cx.attr_error(
                &attr.name,
                "the type its name says",
                format!("an attribute of type {}", attr.value.type_name()),
            )
        })?
        .map_err(|e| e.at(&cx.at))?;
    Ok(vec![from_constant(&tensor)])
}

fn constant_of_shape(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let value = cx.node.get_tensor("value")?;
    let dtype = value.map_or(DataType::Float, Tensor::dtype);
    let Some(target) = cx.sym(0) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    if let Some(bad) = target.iter().filter_map(known).find(|&v| v < 0) {
        return Err(cx.input_error(0, "a shape of sizes ≥ 0", bad.to_string()));
    }
    let shape: Vec<Dim> = target.iter().map(sym_to_dim).collect();
    let fill = match value {
        Some(t) => tensor_ints(t).and_then(|v| v.first().copied()),
        None => None,
    };
    if let (Some(fill), Some(dims), true) = (fill, all_fixed(&shape), tracks_values(dtype)) {
        let n = dims.first().copied().unwrap_or(1);
        if dims.len() <= 1 && n <= MAX_SYM_LEN {
            return Ok(vec![sym_out(dtype, dims.is_empty(), vec![SymInt::Known(fill); n])]);
        }
    }
    Ok(vec![tensor_out(dtype, Some(shape))])
}

fn range(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = (0..3).find_map(|i| cx.dtype(i)) else {
        return Ok(vec![unknown()]);
    };
    let scalar = |i: usize| cx.sym(i).and_then(|v| v.first().cloned()).unwrap_or(SymInt::Unknown);
    let (start, limit, delta) = (scalar(0), scalar(1), scalar(2));
    if let (Some(s), Some(l), Some(d)) = (known(&start), known(&limit), known(&delta)) {
        if d == 0 {
            return Err(cx.input_error(2, "a non-zero delta", "0"));
        }
        // ceil((l - s) / d), computed with a positive divisor.
        let (x, d_abs) = ((l as i128 - s as i128) * d.signum() as i128, (d as i128).abs());
        let n = (x + d_abs - 1).div_euclid(d_abs).max(0);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n <= MAX_SYM_LEN && tracks_values(dtype) {
            let at = |i: i64| i.checked_mul(d).and_then(|o| o.checked_add(s)).map_or(SymInt::Unknown, SymInt::Known);
            let values = (0..n as i64).map(at).collect();
            return Ok(vec![sym_out(dtype, false, values)]);
        }
        return Ok(vec![tensor_out(dtype, Some(vec![Dim::Fixed(n)]))]);
    }
    let len = match (&start, &limit, &delta) {
        (SymInt::Known(0), SymInt::Symbol(s), SymInt::Known(1)) => Dim::Symbol(s.clone()),
        _ => float_range_len(cx).map_or(Dim::Unknown, Dim::Fixed),
    };
    Ok(vec![tensor_out(dtype, Some(vec![len]))])
}

/// The length of a Range over constant floats.
fn float_range_len(cx: &Ctx<'_>) -> Option<usize> {
    let get = |i: usize| cx.floats(i).and_then(|v| v.first().copied());
    let (s, l, d) = (get(0)?, get(1)?, get(2)?);
    let n = ((l - s) / d).ceil();
    (n.is_finite()).then(|| n.max(0.0) as usize)
}

fn eye_like(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let dtype = match cx.node.get_int("dtype")? {
        Some(code) => Some(
            i32::try_from(code)
                .ok()
                .and_then(DataType::from_onnx)
                .ok_or_else(|| cx.attr_error("dtype", "an ONNX data type code", code.to_string()))?,
        ),
        None => cx.dtype(0),
    };
    if let Some(s) = cx.shape(0).filter(|s| s.len() != 2) {
        return Err(cx.input_error(0, "a tensor of rank 2", describe(s)));
    }
    let shape = cx.shape(0).map(<[Dim]>::to_vec).unwrap_or_else(|| vec![Dim::Unknown; 2]);
    Ok(vec![dtype.map(|d| tensor_out(d, Some(shape))).unwrap_or_else(unknown)])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::ir::{AttrValue, Attribute};
    use crate::ops::infer::Inferred;
    use crate::Tensor;

    #[test]
    fn constants() {
        let cases: Vec<(Attribute, &str)> = vec![
            (tensor("value", Tensor::from_vec(vec![2, 3], vec![1.5f32; 6]).unwrap()), "float[2,3]"),
            (float("value_float", 0.5), "float[]"),
            (ints("value_ints", &[3, -1, 64]), "int64[3]"),
            (int("value_int", 7), "int64[]"),
            (
                Attribute {
                    name: "value_strings".into(),
                    value: AttrValue::Strings(vec![b"a".to_vec(), b"b".to_vec()]),
                },
                "string[2]",
            ),
        ];
        for (attr, want) in cases {
            let out = run(&node("Constant", 0, 1, vec![attr]), 13, &[]).unwrap();
            assert_eq!(show(&out[0]), want);
            assert!(out[0].constant.is_some(), "{want}");
        }
        let out = run(&node("Constant", 0, 1, vec![ints("value_ints", &[3, -1, 64])]), 13, &[]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["3", "-1", "64"]);
        check_errors(vec![
            (case("Constant", 13, vec![], &[], &[""]), vec!["Constant node 'n'", "'value'", "none of them"]),
            (case("Constant", 13, vec![string("value", "x")], &[], &[""]), vec!["'value'", "type string"]),
        ]);
    }

    #[test]
    fn constant_of_shape() {
        let int_fill = || tensor("value", Tensor::from_vec(vec![1], vec![1i64]).unwrap());
        check_all(vec![
            case_with("ConstantOfShape", 9, vec![], vec![Some(syms(&["b", "s", "12"]))], &["float[b,s,12]"]),
            case_with("ConstantOfShape", 9, vec![int_fill()], vec![Some(i64s(&[3, 5]))], &["int64[3,5]"]),
            case("ConstantOfShape", 9, vec![], &["int64[2]"], &["float[?,?]"]),
            case("ConstantOfShape", 9, vec![], &["int64[?]"], &["float[...]"]),
        ]);
        let out = run(&node("ConstantOfShape", 1, 1, vec![int_fill()]), 9, &[Some(i64s(&[4]))]).unwrap();
        assert_eq!(out[0].constant.as_ref().unwrap().as_slice::<i64>().unwrap(), &[1, 1, 1, 1]);
        check_errors(vec![(
            case_with("ConstantOfShape", 9, vec![], vec![Some(i64s(&[2, -3]))], &[""]),
            vec!["input 0", "≥ 0", "-3"],
        )]);
    }

    #[test]
    fn ranges() {
        let r = |s: Inferred, l: Inferred, d: Inferred, want: &'static str| {
            case_with("Range", 11, vec![], vec![Some(s), Some(l), Some(d)], &[want])
        };
        let scalar_sym = |name: &str| {
            let mut t = ty("int64[]");
            t.sym_value = Some(vec![sym(name)]);
            t
        };
        let f = |v: f32| crate::ops::infer::rules::from_constant(&Tensor::scalar(v));
        check_all(vec![
            r(i64s0(0), i64s0(10), i64s0(3), "int64[4]"),
            r(i64s0(10), i64s0(0), i64s0(-3), "int64[4]"),
            r(i64s0(5), i64s0(0), i64s0(1), "int64[0]"),
            r(i64s0(9), i64s0(0), i64s0(-3), "int64[3]"),
            r(i64s0(-7), i64s0(4), i64s0(5), "int64[3]"),
            r(i64s0(0), scalar_sym("seq"), i64s0(1), "int64[seq]"),
            r(i64s0(0), scalar_sym("seq"), i64s0(2), "int64[?]"),
            r(f(0.0), f(1.0), f(0.3), "float[4]"),
            r(i64s0(0), i64s0(1_000_000), i64s0(1), "int64[1000000]"),
        ]);
        let out = run(&node("Range", 3, 1, vec![]), 11, &[Some(i64s0(10)), Some(i64s0(0)), Some(i64s0(-3))]).unwrap();
        assert_eq!(out[0].constant.as_ref().unwrap().as_slice::<i64>().unwrap(), &[10, 7, 4, 1]);
        check_errors(vec![(r(i64s0(0), i64s0(3), i64s0(0), ""), vec!["Range", "input 2", "non-zero delta"])]);
    }

    #[test]
    fn eye_like() {
        check_all(vec![
            case("EyeLike", 9, vec![], &["float[3,s]"], &["float[3,s]"]),
            case("EyeLike", 9, vec![int("dtype", 7)], &["float[3,5]"], &["int64[3,5]"]),
            case("EyeLike", 9, vec![], &["int32[...]"], &["int32[?,?]"]),
        ]);
        check_errors(vec![(case("EyeLike", 9, vec![], &["float[3]"], &[""]), vec!["rank 2"])]);
    }
}
