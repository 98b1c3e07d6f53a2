//! Indexing ops: `Gather` (which also picks from symbolic values), `GatherElements`,
//! `GatherND`, `ScatterND`, `ScatterElements`, `OneHot`.

use super::super::{Inferred, SymInt};
use super::ctx::{describe, same_type, sym_out, tensor_out, unknown, Ctx, Rule};
use super::dims::fmt_dims;
use crate::types::Dim;
use crate::Result;

/// The rule for `op`, if it is an indexing op.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "Gather" => gather,
        "GatherElements" => gather_elements,
        "GatherND" => gather_nd,
        "ScatterND" | "ScatterElements" | "Scatter" => scatter,
        "OneHot" => one_hot,
        _ => return None,
    })
}

fn gather(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown()]);
    };
    let Some(data) = cx.shape(0) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    if data.is_empty() {
        return Err(cx.input_error(0, "a tensor of rank ≥ 1 to gather from", describe(data)));
    }
    let axis = cx.attr_axis("axis", cx.attr_int("axis", 0)?, data.len())?;
    let indices = cx.ints(1);
    if let (Some(idx), Some(n)) = (&indices, data[axis].fixed()) {
        if let Some(bad) = idx.iter().find(|&&i| i < -(n as i64) || i >= n as i64) {
            return Err(cx.input_error(
                1,
                format!("indices in [-{n}, {}] (axis {axis} of {})", n as i64 - 1, fmt_dims(data)),
                bad.to_string(),
            ));
        }
    }
    let Some(ind_shape) = cx.shape(1) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    if let (Some(values), Some(idx), true) =
        (cx.input(0).and_then(|i| i.sym_value.as_ref()), &indices, ind_shape.len() <= 1)
    {
        let n = values.len() as i64;
        let picked: Option<Vec<SymInt>> =
            idx.iter().map(|&i| values.get(usize::try_from(if i < 0 { i + n } else { i }).ok()?).cloned()).collect();
        if let Some(v) = picked.filter(|_| data.len() == 1) {
            return Ok(vec![sym_out(dtype, ind_shape.is_empty(), v)]);
        }
    }
    let shape = [&data[..axis], ind_shape, &data[axis + 1..]].concat();
    Ok(vec![tensor_out(dtype, Some(shape))])
}

fn gather_elements(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown()]);
    };
    if let (Some(d), Some(i)) = (cx.shape(0), cx.shape(1)) {
        if d.len() != i.len() {
            return Err(cx.input_error(1, format!("indices of rank {} (as the data)", d.len()), describe(i)));
        }
        cx.attr_axis("axis", cx.attr_int("axis", 0)?, d.len())?;
    }
    Ok(vec![tensor_out(dtype, cx.shape(1).map(<[Dim]>::to_vec))])
}

fn gather_nd(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown()]);
    };
    let batch = cx.attr_int("batch_dims", 0)?;
    let (Some(data), Some(ind)) = (cx.shape(0), cx.shape(1)) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    let b = usize::try_from(batch).ok().filter(|&b| b < data.len().min(ind.len())).ok_or_else(|| {
        cx.attr_error(
            "batch_dims",
            format!("a value below both ranks ({} and {})", data.len(), ind.len()),
            batch.to_string(),
        )
    })?;
    let Some((last, outer)) = ind.split_last() else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    let Some(k) = last.fixed() else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    if b + k > data.len() {
        return Err(cx.input_error(
            1,
            format!("index tuples of at most {} elements (data {})", data.len() - b, fmt_dims(data)),
            k.to_string(),
        ));
    }
    Ok(vec![tensor_out(dtype, Some([outer, &data[b + k..]].concat()))])
}

fn scatter(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    cx.same_dtype(0, 2)?;
    Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)])
}

fn one_hot(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(2) else {
        return Ok(vec![unknown()]);
    };
    let Some(ind) = cx.shape(0) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    let axis = cx.attr_axis("axis", cx.attr_int("axis", -1)?, ind.len() + 1)?;
    let depth = match cx.floats(1).as_deref() {
        Some([d]) if *d >= 1.0 => Dim::Fixed(*d as usize),
        Some([d]) => return Err(cx.input_error(1, "a depth ≥ 1", d.to_string())),
        _ => Dim::Unknown,
    };
    let mut shape = ind.to_vec();
    shape.insert(axis, depth);
    Ok(vec![tensor_out(dtype, Some(shape))])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::ops::infer::Inferred;

    #[test]
    fn gather_shapes_and_values() {
        let g = |data: Inferred, idx: Inferred, axis: i64, want: &'static str| {
            case_with("Gather", 13, vec![int("axis", axis)], vec![Some(data), Some(idx)], &[want])
        };
        check_all(vec![
            g(ty("float[30522,768]"), ty("int64[b,s]"), 0, "float[b,s,768]"),
            g(ty("float[b,s,768]"), i64s0(0), 1, "float[b,768]"),
            g(ty("float[b,s,768]"), i64s(&[0, 2]), -1, "float[b,s,2]"),
            g(ty("float[...]"), ty("int64[3]"), 0, "float[...]"),
            g(ty("float[5,7]"), ty("int64[...]"), 1, "float[...]"),
        ]);
        let cases: Vec<(Inferred, Vec<&str>, &str)> = vec![
            (i64s0(0), vec!["batch"], "int64[]"),
            (i64s0(-1), vec!["768"], "int64[]"),
            (i64s(&[1, 0]), vec!["seq", "batch"], "int64[2]"),
        ];
        for (idx, want, want_ty) in cases {
            let out =
                run(&node("Gather", 2, 1, vec![]), 13, &[Some(syms(&["batch", "seq", "768"])), Some(idx)]).unwrap();
            assert_eq!(
                (show(&out[0]), sym_of(&out[0]).unwrap()),
                (want_ty.to_string(), want.iter().map(|s| s.to_string()).collect())
            );
        }
        check_errors(vec![
            (g(ty("float[]"), i64s0(0), 0, ""), vec!["Gather node 'n'", "input 0", "rank ≥ 1", "rank 0"]),
            (g(ty("float[3,4]"), i64s(&[4]), 1, ""), vec!["input 1", "[-4, 3]", "4"]),
            (g(ty("float[3,4]"), i64s(&[-4]), 0, ""), vec!["[-3, 2]", "-4"]),
            (g(ty("float[3,4]"), ty("int64[2]"), 2, ""), vec!["'axis'", "[-2, 1]"]),
        ]);
    }

    #[test]
    fn gather_scatter_variants() {
        check_all(vec![
            case("GatherElements", 13, vec![int("axis", 1)], &["float[b,5]", "int64[b,3]"], &["float[b,3]"]),
            case("GatherND", 13, vec![], &["float[5,6,7]", "int64[b,2]"], &["float[b,7]"]),
            case("GatherND", 13, vec![int("batch_dims", 1)], &["float[b,6,7]", "int64[b,4,1]"], &["float[b,4,7]"]),
            case("GatherND", 13, vec![], &["float[5,6,7]", "int64[b,?]"], &["float[...]"]),
            case("ScatterND", 18, vec![], &["float[b,9]", "int64[3,1]", "float[3,9]"], &["float[b,9]"]),
            case("ScatterElements", 18, vec![], &["float16[4,4]", "int64[2,4]", "float16[2,4]"], &["float16[4,4]"]),
            case("OneHot", 11, vec![], &["int64[b,s]", "", "float[2]"], &["float[b,s,?]"]),
            case_with(
                "OneHot",
                11,
                vec![int("axis", 0)],
                vec![Some(ty("int64[b]")), Some(f32s(&[10.0])), Some(ty("int32[2]"))],
                &["int32[10,b]"],
            ),
        ]);
        check_errors(vec![
            (case("GatherElements", 13, vec![], &["float[3,4]", "int64[3]"], &[""]), vec!["input 1", "rank 2"]),
            (case("GatherND", 13, vec![], &["float[3,4]", "int64[2,3]"], &[""]), vec!["input 1", "at most 2", "3"]),
            (
                case("GatherND", 13, vec![int("batch_dims", 2)], &["float[3,4]", "int64[3,1]"], &[""]),
                vec!["'batch_dims'"],
            ),
            (case("ScatterND", 18, vec![], &["float[4]", "int64[1,1]", "double[1]"], &[""]), vec!["input 2", "double"]),
            (
                case("OneHot", 11, vec![int("axis", 3)], &["int64[b,s]", "", "float[2]"], &[""]),
                vec!["'axis'", "[-3, 2]"],
            ),
        ]);
    }
}
