//! Reductions: `Reduce*` (axes as attribute or input, `keepdims`, `noop_with_empty_axes`) and
//! `ArgMax`/`ArgMin`.

use super::super::Inferred;
use super::ctx::{same_type, tensor_out, unknown, Ctx, Rule};
use crate::types::Dim;
use crate::{DataType, Result};

/// The rule for `op`, if it is a reduction.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
        | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => reduce,
        "ArgMax" | "ArgMin" => arg_reduce,
        _ => return None,
    })
}

/// Which axes a reduction reduces.
enum Axes {
    /// These (resolved, without repeats).
    Known(Vec<usize>),
    /// All of them.
    All,
    /// None: the output is the input.
    Noop,
    /// Given by an input whose value is not known.
    Unknown,
}

/// Reads the axes from the attribute or from input 1, resolved against `rank`.
fn read_axes(cx: &Ctx<'_>, rank: usize) -> Result<Axes> {
    let (list, input) = match cx.attr_ints("axes")? {
        Some(a) => (a, None),
        None if cx.node.input(1).is_some() => match cx.ints(1) {
            Some(a) => (a, Some(1)),
            None => return Ok(Axes::Unknown),
        },
        None => (vec![], None),
    };
    if list.is_empty() {
        let noop = cx.attr_int("noop_with_empty_axes", 0)? != 0;
        return Ok(if noop { Axes::Noop } else { Axes::All });
    }
    Ok(Axes::Known(cx.axes(&list, rank, "axes", input)?))
}

/// The shape left when `axes` of `dims` are reduced.
fn reduced(dims: &[Dim], axes: &[usize], keepdims: bool) -> Vec<Dim> {
    dims.iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Fixed(1)),
            (true, false) => None,
        })
        .collect()
}

fn reduce(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown()]);
    };
    let keepdims = cx.attr_int("keepdims", 1)? != 0;
    let Some(dims) = &t.shape else {
        return Ok(vec![tensor_out(t.dtype, None)]);
    };
    let shape = match read_axes(cx, dims.len())? {
        Axes::Noop => return Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)]),
        Axes::All => Some(reduced(dims, &(0..dims.len()).collect::<Vec<_>>(), keepdims)),
        Axes::Known(axes) => Some(reduced(dims, &axes, keepdims)),
        Axes::Unknown if keepdims => {
            Some(dims.iter().map(|d| if *d == Dim::Fixed(1) { d.clone() } else { Dim::Unknown }).collect())
        }
        Axes::Unknown => None,
    };
    Ok(vec![tensor_out(t.dtype, shape)])
}

fn arg_reduce(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let keepdims = cx.attr_int("keepdims", 1)? != 0;
    let axis = cx.attr_int("axis", 0)?;
    let shape = match cx.shape(0) {
        Some(dims) => Some(reduced(dims, &[cx.attr_axis("axis", axis, dims.len())?], keepdims)),
        None => None,
    };
    Ok(vec![tensor_out(DataType::Int64, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn reductions() {
        let x = || Some(ty("float[b,s,768]"));
        let cases = vec![
            case("ReduceMean", 13, vec![ints("axes", &[-1])], &["float[b,s,768]"], &["float[b,s,1]"]),
            case("ReduceMax", 13, vec![ints("axes", &[0, 2]), int("keepdims", 0)], &["float[b,s,768]"], &["float[s]"]),
            case("ReduceL2", 13, vec![], &["float[b,s,7]"], &["float[1,1,1]"]),
            case("ReduceProd", 13, vec![int("keepdims", 0)], &["int64[3,5]"], &["int64[]"]),
            case("ReduceMin", 18, vec![int("noop_with_empty_axes", 1)], &["float[3,5]"], &["float[3,5]"]),
            case("ReduceSum", 13, vec![], &["float[3,5]", "int64[?]"], &["float[?,?]"]),
            case("ReduceSum", 13, vec![int("keepdims", 0)], &["float[3,5]", "int64[?]"], &["float[...]"]),
            case("ReduceSumSquare", 18, vec![int("keepdims", 0)], &["float[...]", "int64[1]"], &["float[...]"]),
            case("ReduceLogSumExp", 11, vec![], &["?"], &["?"]),
            case("ArgMax", 13, vec![int("axis", -1)], &["float[b,s,30522]"], &["int64[b,s,1]"]),
            case("ArgMin", 13, vec![int("keepdims", 0), int("axis", 1)], &["float16[b,7,3]"], &["int64[b,3]"]),
            case("ArgMax", 13, vec![], &["float[...]"], &["int64[...]"]),
            case_with("ReduceSum", 13, vec![], vec![x(), Some(i64s(&[1]))], &["float[b,1,768]"]),
            case_with("ReduceSum", 13, vec![int("keepdims", 0)], vec![x(), Some(i64s(&[-1, 0]))], &["float[s]"]),
            case_with(
                "ReduceSum",
                13,
                vec![int("noop_with_empty_axes", 1)],
                vec![x(), Some(i64s(&[]))],
                &["float[b,s,768]"],
            ),
            case_with("ReduceMean", 18, vec![int("keepdims", 0)], vec![x(), Some(i64s(&[]))], &["float[]"]),
        ];
        check_all(cases);
        check_errors(vec![
            (
                case("ReduceMean", 13, vec![ints("axes", &[3])], &["float[2,3,4]"], &[""]),
                vec!["ReduceMean node 'n'", "'axes'", "[-3, 2]", "3"],
            ),
            (case("ReduceMean", 13, vec![ints("axes", &[1, -2])], &["float[2,3,4]"], &[""]), vec!["without repeats"]),
            (case_with("ReduceSum", 13, vec![], vec![x(), Some(i64s(&[5]))], &[""]), vec!["input 1", "5"]),
            (case("ArgMax", 13, vec![int("axis", 2)], &["float[2,3]"], &[""]), vec!["'axis'", "2"]),
        ]);
    }
}
