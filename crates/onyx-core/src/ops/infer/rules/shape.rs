//! Ops that rearrange a tensor's shape: `Shape`, `Size`, `Reshape`, `Flatten`, `Squeeze`,
//! `Unsqueeze`, `Transpose`, `Expand`, `Tile`, `DepthToSpace`, `SpaceToDepth`, `Identity`.
//! Symbolic values pass through the ones that keep element order.

use super::super::{Inferred, SymInt};
use super::ctx::{describe, known, shape_syms, sym_out, tensor_out, unknown, Ctx, Rule};
use super::dims::{all_fixed, broadcast_shapes, dim_to_sym, fmt_dims, product, sym_to_dim};
use crate::types::Dim;
use crate::{DataType, Result};

/// The rule for `op`, if it is a shape op.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "Identity" => identity,
        "Shape" => shape_of,
        "Size" => size,
        "Reshape" => reshape,
        "Flatten" => flatten,
        "Squeeze" => squeeze,
        "Unsqueeze" => unsqueeze,
        "Transpose" => transpose,
        "Expand" => expand,
        "Tile" => tile,
        "DepthToSpace" | "SpaceToDepth" => depth_space,
        _ => return None,
    })
}

fn identity(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    Ok(vec![cx.input(0).cloned().unwrap_or_else(unknown)])
}

/// An output of input 0's element type with `shape`; input 0's symbolic value carries over
/// when the output has rank ≤ 1 (the op keeps element order).
fn reshaped(cx: &Ctx<'_>, shape: Option<Vec<Dim>>) -> Inferred {
    let Some(dtype) = cx.dtype(0) else {
        return unknown();
    };
    if let (Some(values), Some(s)) = (cx.input(0).and_then(|i| i.sym_value.clone()), &shape) {
        let fits = match s.as_slice() {
            [] => values.len() == 1,
            [d] => d.fixed().is_none_or(|n| n == values.len()),
            _ => false,
        };
        if fits {
            return sym_out(dtype, s.is_empty(), values);
        }
    }
    tensor_out(dtype, shape)
}

fn shape_of(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dims) = cx.shape(0) else {
        return Ok(vec![tensor_out(DataType::Int64, Some(vec![Dim::Unknown]))]);
    };
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(cx.attr_int("start", 0)?);
    let end = clamp(cx.attr_int("end", r)?);
    let picked = if start < end { &dims[start..end] } else { &[][..] };
    Ok(vec![sym_out(DataType::Int64, false, shape_syms(picked))])
}

fn size(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    Ok(vec![match cx.shape(0) {
        Some(dims) => sym_out(DataType::Int64, true, vec![dim_to_sym(&product(dims))]),
        None => tensor_out(DataType::Int64, Some(vec![])),
    }])
}

fn reshape(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(target) = cx.sym(1) else {
        return Ok(vec![reshaped(cx, None)]);
    };
    let allowzero = cx.since >= 14 && cx.attr_int("allowzero", 0)? != 0;
    let data = cx.shape(0);
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, v) in target.iter().enumerate() {
        let d = match v {
            SymInt::Known(-1) if infer_at.is_some() => {
                return Err(cx.input_error(1, "a shape with at most one -1", fmt_syms(&target)));
            }
            SymInt::Known(-1) => {
                infer_at = Some(i);
                Dim::Unknown
            }
            SymInt::Known(0) if !allowzero => match data {
                Some(dims) => dims.get(i).cloned().ok_or_else(|| {
                    cx.input_error(
                        1,
                        format!("a 0 (copy) only where the data ({}) has a dimension", describe(dims)),
                        fmt_syms(&target),
                    )
                })?,
                None => Dim::Unknown,
            },
            SymInt::Known(n) if *n < -1 => {
                return Err(cx.input_error(1, "a shape of sizes ≥ -1", fmt_syms(&target)));
            }
            other => sym_to_dim(other),
        };
        out.push(d);
    }
    if allowzero && infer_at.is_some() && target.contains(&SymInt::Known(0)) {
        return Err(cx.input_error(1, "no -1 beside a 0 when allowzero is set", fmt_syms(&target)));
    }
    if let Some(dims) = data {
        match infer_at {
            Some(at) => out[at] = infer_minus_one(cx, dims, &out, at, &target)?,
            None => check_count(cx, dims, &out, &target)?,
        }
    }
    Ok(vec![reshaped(cx, Some(out))])
}

/// Formats a symbolic value as `[b,12,-1]`.
fn fmt_syms(v: &[SymInt]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|s| match s {
            SymInt::Known(n) => n.to_string(),
            SymInt::Symbol(name) => name.clone(),
            SymInt::Unknown => "?".into(),
        })
        .collect();
    format!("[{}]", parts.join(","))
}

/// Fixed product and symbols of some dimensions; `None` when one is unknown.
fn factors(dims: &[Dim]) -> Option<(u128, Vec<&str>)> {
    let mut fixed: u128 = 1;
    let mut symbols = vec![];
    for d in dims {
        match d {
            Dim::Fixed(n) => fixed = fixed.checked_mul(*n as u128)?,
            Dim::Symbol(s) => symbols.push(s.as_str()),
            Dim::Unknown => return None,
        }
    }
    Some((fixed, symbols))
}

/// The size a `-1` stands for: what remains of the input's element count once the other
/// output dimensions are divided out, matching symbols against symbols.
fn infer_minus_one(cx: &Ctx<'_>, input: &[Dim], out: &[Dim], at: usize, target: &[SymInt]) -> Result<Dim> {
    let others: Vec<Dim> = out.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, d)| d.clone()).collect();
    let (Some((p_in, mut s_in)), Some((p_out, s_out))) = (factors(input), factors(&others)) else {
        return Ok(Dim::Unknown);
    };
    for s in s_out {
        match s_in.iter().position(|x| *x == s) {
            Some(i) => {
                s_in.swap_remove(i);
            }
            None => return Ok(Dim::Unknown),
        }
    }
    if p_out == 0 {
        return Ok(Dim::Unknown);
    }
    match s_in.as_slice() {
        [] if p_in % p_out == 0 => Ok(usize::try_from(p_in / p_out).map(Dim::Fixed).unwrap_or(Dim::Unknown)),
        [] if all_fixed(input).is_some() => Err(cx.input_error(
            1,
            format!("a shape whose known sizes divide the data's {p_in} elements ({})", fmt_dims(input)),
            fmt_syms(target),
        )),
        [s] if p_in == p_out => Ok(Dim::Symbol(s.to_string())),
        _ => Ok(Dim::Unknown),
    }
}

/// Without a -1, fully known shapes must hold the same number of elements.
fn check_count(cx: &Ctx<'_>, input: &[Dim], out: &[Dim], target: &[SymInt]) -> Result<()> {
    if let (Some((p_in, _)), Some((p_out, _))) =
        (all_fixed(input).and(factors(input)), all_fixed(out).and(factors(out)))
    {
        if p_in != p_out {
            return Err(cx.input_error(
                1,
                format!("a shape of {p_in} elements (as the data, {})", fmt_dims(input)),
                format!("{} ({p_out} elements)", fmt_syms(target)),
            ));
        }
    }
    Ok(())
}

fn flatten(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let axis = cx.attr_int("axis", 1)?;
    let shape = match cx.shape(0) {
        Some(dims) => {
            let r = dims.len() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            if !(0..=r).contains(&a) {
                return Err(cx.attr_error("axis", format!("an axis in [-{r}, {r}]"), axis.to_string()));
            }
            let (head, tail) = dims.split_at(a as usize);
            vec![product(head), product(tail)]
        }
        None => vec![Dim::Unknown, Dim::Unknown],
    };
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, Some(shape))).unwrap_or_else(unknown)])
}

/// The axes argument of Squeeze/Unsqueeze.
enum AxesArg {
    /// The values, and the input they came from (`None`: the attribute).
    Given(Vec<i64>, Option<usize>),
    /// Not given at all.
    Absent,
    /// Given by an input whose value is unknown.
    Unknown,
}

/// The axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1 since.
fn squeeze_axes(cx: &Ctx<'_>) -> Result<AxesArg> {
    if let Some(a) = cx.attr_ints("axes")? {
        return Ok(AxesArg::Given(a, None));
    }
    if cx.node.input(1).is_some() {
        return Ok(cx.ints(1).map_or(AxesArg::Unknown, |a| AxesArg::Given(a, Some(1))));
    }
    Ok(AxesArg::Absent)
}

fn squeeze(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dims) = cx.shape(0) else {
        return Ok(vec![reshaped(cx, None)]);
    };
    let shape = match squeeze_axes(cx)? {
        AxesArg::Unknown => match cx.len_1d(1) {
            Some(n) if n <= dims.len() => Some(vec![Dim::Unknown; dims.len() - n]),
            _ => None,
        },
        AxesArg::Absent if dims.iter().all(|d| d.fixed().is_some()) => {
            Some(dims.iter().filter(|d| **d != Dim::Fixed(1)).cloned().collect())
        }
        AxesArg::Absent => None,
        AxesArg::Given(list, input) => {
            let axes = cx.axes(&list, dims.len(), "axes", input)?;
            for &a in &axes {
                if let Some(n) = dims[a].fixed().filter(|&n| n != 1) {
                    return Err(cx.input_error(
                        0,
                        format!("size 1 on squeezed axis {a}"),
                        format!("{} (size {n})", describe(dims)),
                    ));
                }
            }
            Some(dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect())
        }
    };
    Ok(vec![reshaped(cx, shape)])
}

fn unsqueeze(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dims) = cx.shape(0) else {
        return Ok(vec![reshaped(cx, None)]);
    };
    let shape =
        match squeeze_axes(cx)? {
            AxesArg::Unknown => cx.len_1d(1).map(|n| vec![Dim::Unknown; dims.len() + n]),
            AxesArg::Absent => return Err(cx.input_error(1, "the axes to insert", "nothing")),
            AxesArg::Given(list, input) => {
                let rank = dims.len() + list.len();
                let axes = cx.axes(&list, rank, "axes", input)?;
                let mut rest = dims.iter();
                Some(
                    (0..rank)
                        .map(|i| {
                            if axes.contains(&i) {
                                Dim::Fixed(1)
                            } else {
                                rest.next().cloned().unwrap_or(Dim::Unknown)
                            }
                        })
                        .collect(),
                )
            }
        };
    Ok(vec![reshaped(cx, shape)])
}

fn transpose(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let perm = cx.attr_ints("perm")?;
    let Some(dims) = cx.shape(0) else {
        let shape = perm.map(|p| vec![Dim::Unknown; p.len()]);
        return Ok(vec![cx.dtype(0).map(|d| tensor_out(d, shape)).unwrap_or_else(unknown)]);
    };
    let r = dims.len();
    let perm: Vec<usize> = match perm {
        None => (0..r).rev().collect(),
        Some(p) => {
            let resolved: Option<Vec<usize>> = p.iter().map(|&a| usize::try_from(a).ok().filter(|&a| a < r)).collect();
            let valid = resolved.filter(|v| v.len() == r && (0..r).all(|i| v.contains(&i)));
            valid.ok_or_else(|| {
                cx.attr_error(
                    "perm",
                    format!("a permutation of 0..{r} (the input is {})", describe(dims)),
                    format!("{p:?}"),
                )
            })?
        }
    };
    let shape = perm.iter().map(|&a| dims[a].clone()).collect();
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, Some(shape))).unwrap_or_else(unknown)])
}

fn expand(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let target: Option<Vec<Dim>> = cx.sym(1).map(|v| v.iter().map(sym_to_dim).collect());
    let shape = match (cx.shape(0), target) {
        (Some(dims), Some(t)) => Some(broadcast_shapes(dims, &t).ok_or_else(|| {
            cx.input_error(1, format!("a shape broadcastable with the input's {}", fmt_dims(dims)), fmt_dims(&t))
        })?),
        _ => None,
    };
    Ok(vec![reshaped(cx, shape)])
}

fn tile(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let (Some(dims), Some(reps)) = (cx.shape(0), cx.sym(1)) else {
        let shape = cx.shape(0).map(|d| vec![Dim::Unknown; d.len()]);
        return Ok(vec![cx.dtype(0).map(|d| tensor_out(d, shape)).unwrap_or_else(unknown)]);
    };
    if reps.len() != dims.len() || reps.iter().any(|r| known(r).is_some_and(|r| r < 0)) {
        return Err(cx.input_error(
            1,
            format!("{} non-negative repeats (one per axis of {})", dims.len(), fmt_dims(dims)),
            fmt_syms(&reps),
        ));
    }
    let shape =
        dims.iter().zip(&reps).map(|(d, r)| known(r).map_or(Dim::Unknown, |r| scale_dim(d, r as usize))).collect();
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, Some(shape))).unwrap_or_else(unknown)])
}

/// `d * k`.
fn scale_dim(d: &Dim, k: usize) -> Dim {
    match (d, k) {
        (_, 0) => Dim::Fixed(0),
        (d, 1) => d.clone(),
        (Dim::Fixed(n), k) => n.checked_mul(k).map_or(Dim::Unknown, Dim::Fixed),
        _ => Dim::Unknown,
    }
}

/// `d / k` when it divides (`Err` when a fixed size does not).
fn divide_dim(d: &Dim, k: usize) -> std::result::Result<Dim, usize> {
    match (d, k) {
        (d, 1) => Ok(d.clone()),
        (Dim::Fixed(n), k) if n % k == 0 => Ok(Dim::Fixed(n / k)),
        (Dim::Fixed(n), _) => Err(*n),
        _ => Ok(Dim::Unknown),
    }
}

fn depth_space(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = cx.node.get_int("blocksize")?.ok_or_else(|| cx.attr_error("blocksize", "a block size", "nothing"))?;
    let b = usize::try_from(b)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| cx.attr_error("blocksize", "a value ≥ 1", b.to_string()))?;
    let b2 =
        b.checked_mul(b).ok_or_else(|| cx.attr_error("blocksize", "a block size whose square fits", b.to_string()))?;
    cx.expect_rank(0, 4)?;
    let Some(d) = cx.shape(0) else {
        return Ok(vec![cx.dtype(0).map(|t| tensor_out(t, Some(vec![Dim::Unknown; 4]))).unwrap_or_else(unknown)]);
    };
    let not_divisible = |axis: usize, n: usize, k: usize| {
        cx.input_error(0, format!("axis {axis} divisible by {k}"), format!("{} (size {n})", describe(d)))
    };
    let shape = if cx.node.op_type == "DepthToSpace" {
        let c = divide_dim(&d[1], b2).map_err(|n| not_divisible(1, n, b2))?;
        vec![d[0].clone(), c, scale_dim(&d[2], b), scale_dim(&d[3], b)]
    } else {
        let h = divide_dim(&d[2], b).map_err(|n| not_divisible(2, n, b))?;
        let w = divide_dim(&d[3], b).map_err(|n| not_divisible(3, n, b))?;
        vec![d[0].clone(), scale_dim(&d[1], b2), h, w]
    };
    Ok(vec![cx.dtype(0).map(|t| tensor_out(t, Some(shape))).unwrap_or_else(unknown)])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn shape_and_size_values() {
        let cases: Vec<(Vec<crate::ir::Attribute>, &str, &str, Vec<&str>)> = vec![
            (vec![], "float[batch,128,768]", "int64[3]", vec!["batch", "128", "768"]),
            (vec![int("start", -1)], "float[b,s,7]", "int64[1]", vec!["7"]),
            (vec![int("end", -1)], "float[b,s,7]", "int64[2]", vec!["b", "s"]),
            (vec![int("start", 1), int("end", 2)], "float[b,?,7]", "int64[1]", vec!["?"]),
            (vec![int("start", -9), int("end", 99)], "float[2,3]", "int64[2]", vec!["2", "3"]),
            (vec![int("start", 2), int("end", 1)], "float[2,3,4]", "int64[0]", vec![]),
        ];
        for (attrs, input, want_ty, want) in cases {
            let out = run(&node("Shape", 1, 1, attrs), 15, &[Some(ty(input))]).unwrap();
            assert_eq!(show(&out[0]), want_ty, "{input}");
            assert_eq!(sym_of(&out[0]).unwrap(), want, "{input}");
            assert_eq!(out[0].constant.is_some(), want.iter().all(|v| v.parse::<i64>().is_ok()), "{input}");
        }
        let out = run(&node("Shape", 1, 1, vec![]), 15, &[Some(ty("float[...]"))]).unwrap();
        assert_eq!((show(&out[0]), sym_of(&out[0])), ("int64[?]".into(), None));
        let out = run(&node("Size", 1, 1, vec![]), 13, &[Some(ty("float[3,5,7]"))]).unwrap();
        assert_eq!(
            (show(&out[0]), out[0].constant.as_ref().unwrap().as_slice::<i64>().unwrap()),
            ("int64[]".into(), &[105][..])
        );
        let out = run(&node("Size", 1, 1, vec![]), 13, &[Some(ty("float[1,s]"))]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["s"]);
    }

    #[test]
    fn reshape_shapes() {
        let r = |data: &str, target: crate::ops::infer::Inferred, want: &'static str| {
            case_with("Reshape", 14, vec![], vec![Some(ty(data)), Some(target)], &[want])
        };
        check_all(vec![
            r("float[b,s,768]", syms(&["b", "s", "12", "64"]), "float[b,s,12,64]"),
            r("float[b,s,768]", i64s(&[0, 0, 12, -1]), "float[b,s,12,64]"),
            r("float[b,s,768]", i64s(&[-1, 768]), "float[?,768]"),
            r("float[b,12,s,64]", syms(&["b", "-1", "768"]), "float[b,s,768]"),
            r("float[2,3,4]", i64s(&[4, -1]), "float[4,6]"),
            r("float[2,3,4]", i64s(&[-1]), "float[24]"),
            r("float[...]", i64s(&[0, -1]), "float[?,?]"),
            r("float[7,?]", i64s(&[-1, 7]), "float[?,7]"),
            r("float[3,5]", ty("int64[3]"), "float[?,?,?]"),
            r("float[3,5]", ty("int64[?]"), "float[...]"),
            r("float[0,5]", i64s(&[-1, 0]), "float[0,5]"),
            case_with(
                "Reshape",
                14,
                vec![int("allowzero", 1)],
                vec![Some(ty("float[0,5]")), Some(i64s(&[5, 0]))],
                &["float[5,0]"],
            ),
        ]);
        check_errors(vec![
            (r("float[3,4]", i64s(&[5, -1]), ""), vec!["Reshape node 'n'", "input 1", "12 elements", "[5,-1]"]),
            (r("float[3,4]", i64s(&[5, 2]), ""), vec!["12 elements", "10 elements"]),
            (r("float[3,4]", i64s(&[-1, -1]), ""), vec!["at most one -1"]),
            (r("float[3,4]", i64s(&[2, -3]), ""), vec!["≥ -1"]),
            (r("float[12]", i64s(&[3, 0]), ""), vec!["0 (copy)", "[3,0]"]),
            (
                case_with(
                    "Reshape",
                    14,
                    vec![int("allowzero", 1)],
                    vec![Some(ty("float[0,5]")), Some(i64s(&[0, -1]))],
                    &[""],
                ),
                vec!["allowzero"],
            ),
        ]);
        // The symbolic value survives a reshape to rank 1.
        let out = run(&node("Reshape", 2, 1, vec![]), 14, &[Some(syms(&["b", "s"])), Some(i64s(&[-1]))]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["b", "s"]);
    }

    #[test]
    fn flatten_squeeze_unsqueeze() {
        let with_axes = |op: &str, data: &str, axes: &[i64], want: &'static str| {
            case_with(op, 13, vec![], vec![Some(ty(data)), Some(i64s(axes))], &[want])
        };
        check_all(vec![
            case("Flatten", 13, vec![], &["float[b,3,5,7]"], &["float[b,105]"]),
            case("Flatten", 13, vec![int("axis", 0)], &["float[3,s]"], &["float[1,?]"]),
            case("Flatten", 13, vec![int("axis", -1)], &["float[3,5,s]"], &["float[15,s]"]),
            case("Flatten", 13, vec![int("axis", 2)], &["float[3,5]"], &["float[15,1]"]),
            case("Flatten", 13, vec![], &["float[...]"], &["float[?,?]"]),
            case("Squeeze", 11, vec![ints("axes", &[1, -1])], &["float[b,1,7,1]"], &["float[b,7]"]),
            case("Squeeze", 11, vec![], &["float[1,3,1,5]"], &["float[3,5]"]),
            case("Squeeze", 11, vec![], &["float[1,s,1]"], &["float[...]"]),
            with_axes("Squeeze", "float[b,1,s]", &[1], "float[b,s]"),
            case("Squeeze", 13, vec![], &["float[b,1,s]", "int64[1]"], &["float[?,?]"]),
            case("Unsqueeze", 11, vec![ints("axes", &[0, 3])], &["float[b,s]"], &["float[1,b,s,1]"]),
            with_axes("Unsqueeze", "float[b,s]", &[1, -1], "float[b,1,s,1]"),
            with_axes("Unsqueeze", "int64[]", &[0], "int64[1]"),
            case("Unsqueeze", 13, vec![], &["float[b,s]", "int64[2]"], &["float[?,?,?,?]"]),
        ]);
        check_errors(vec![
            (case("Flatten", 13, vec![int("axis", 3)], &["float[2,3]"], &[""]), vec!["'axis'", "[-2, 2]"]),
            (
                case("Squeeze", 11, vec![ints("axes", &[0])], &["float[3,1]"], &[""]),
                vec!["size 1 on squeezed axis 0", "size 3"],
            ),
            (with_axes("Squeeze", "float[3,1]", &[2], ""), vec!["input 1", "[-2, 1]"]),
            (with_axes("Unsqueeze", "float[3,1]", &[1, 1], ""), vec!["without repeats"]),
            (with_axes("Unsqueeze", "float[3,1]", &[3], ""), vec!["input 1", "[-3, 2]"]),
        ]);
        // Unsqueeze of a symbolic scalar keeps its value.
        let mut b = ty("int64[]");
        b.sym_value = Some(vec![sym("batch")]);
        let out = run(&node("Unsqueeze", 2, 1, vec![]), 13, &[Some(b), Some(i64s(&[0]))]).unwrap();
        assert_eq!((show(&out[0]), sym_of(&out[0]).unwrap()), ("int64[1]".into(), vec!["batch".to_string()]));
    }

    #[test]
    fn transpose_expand_tile() {
        let t = |input: &str, target: crate::ops::infer::Inferred, op: &str, want: &'static str| {
            case_with(op, 13, vec![], vec![Some(ty(input)), Some(target)], &[want])
        };
        check_all(vec![
            case("Transpose", 13, vec![ints("perm", &[0, 2, 1, 3])], &["float[b,s,12,64]"], &["float[b,12,s,64]"]),
            case("Transpose", 13, vec![], &["float[3,5,7]"], &["float[7,5,3]"]),
            case("Transpose", 13, vec![ints("perm", &[1, 0])], &["float[...]"], &["float[?,?]"]),
            t("float[b,1,s]", syms(&["b", "12", "s"]), "Expand", "float[b,12,s]"),
            t("float[3,1]", i64s(&[2, 1, 5]), "Expand", "float[2,3,5]"),
            t("float[s,1]", i64s(&[1, 1]), "Expand", "float[s,1]"),
            t("float[s,1]", ty("int64[3]"), "Expand", "float[?,?,?]"),
            t("float[4,1]", ty("int64[2]"), "Expand", "float[4,?]"),
            t("float[3,5]", i64s(&[2, 1]), "Tile", "float[6,5]"),
            t("float[s,5]", syms(&["1", "?"]), "Tile", "float[s,?]"),
            t("float[s,5]", ty("int64[?]"), "Tile", "float[?,?]"),
        ]);
        check_errors(vec![
            (
                case("Transpose", 13, vec![ints("perm", &[0, 0])], &["float[2,3]"], &[""]),
                vec!["'perm'", "permutation", "[0, 0]"],
            ),
            (case("Transpose", 13, vec![ints("perm", &[0, 2])], &["float[2,3]"], &[""]), vec!["'perm'"]),
            (t("float[3,4]", i64s(&[5, 4]), "Expand", ""), vec!["Expand", "input 1", "[3,4]", "[5,4]"]),
            (t("float[3,4]", i64s(&[2]), "Tile", ""), vec!["2 non-negative repeats", "[2]"]),
            (t("float[3,4]", i64s(&[2, -1]), "Tile", ""), vec!["repeats"]),
        ]);
    }

    #[test]
    fn depth_and_space() {
        check_all(vec![
            case("DepthToSpace", 13, vec![int("blocksize", 2)], &["float[n,12,h,5]"], &["float[n,3,?,10]"]),
            case("SpaceToDepth", 13, vec![int("blocksize", 3)], &["float[n,2,9,6]"], &["float[n,18,3,2]"]),
            case("SpaceToDepth", 13, vec![int("blocksize", 3)], &["float[...]"], &["float[?,?,?,?]"]),
        ]);
        check_errors(vec![
            (
                case("DepthToSpace", 13, vec![int("blocksize", 2)], &["float[1,6,2,2]"], &[""]),
                vec!["axis 1 divisible by 4", "size 6"],
            ),
            (
                case("SpaceToDepth", 13, vec![int("blocksize", 2)], &["float[1,6,4,5]"], &[""]),
                vec!["axis 3 divisible by 2"],
            ),
            (case("SpaceToDepth", 13, vec![], &["float[1,6,4,4]"], &[""]), vec!["'blocksize'"]),
            (case("DepthToSpace", 13, vec![int("blocksize", 2)], &["float[6,4,4]"], &[""]), vec!["rank 4"]),
        ]);
    }
}
