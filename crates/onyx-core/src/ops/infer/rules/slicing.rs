//! Ops that cut or grow a tensor along axes: `Concat`, `Split`, `Slice`, `Pad`, `Resize`.
//! `Concat`, `Split` and `Slice` also act on symbolic values of rank 1.

use super::super::{Inferred, SymInt};
use super::ctx::{describe, known, sym_out, tensor_out, unknown, Ctx, Rule};
use super::dims::merge_dim;
use crate::types::Dim;
use crate::Result;

/// The rule for `op`, if it cuts or grows tensors.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "Concat" => concat,
        "Split" => split,
        "Slice" => slice,
        "Pad" => pad,
        "Resize" => resize,
        _ => return None,
    })
}

/// The common rank of the inputs whose rank is known; an error when two differ.
fn common_rank(cx: &Ctx<'_>, inputs: std::ops::Range<usize>) -> Result<Option<usize>> {
    let mut rank: Option<(usize, usize)> = None;
    for i in inputs {
        let Some(s) = cx.shape(i) else { continue };
        match rank {
            Some((r, first)) if r != s.len() => {
                return Err(cx.input_error(i, format!("rank {r} (as input {first})"), describe(s)));
            }
            None => rank = Some((s.len(), i)),
            _ => {}
        }
    }
    Ok(rank.map(|(r, _)| r))
}

fn concat(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let n = cx.input_count();
    for i in 1..n {
        cx.same_dtype(0, i)?;
    }
    let axis_attr = cx.node.get_int("axis")?.ok_or_else(|| cx.attr_error("axis", "the axis to join on", "nothing"))?;
    let Some(dtype) = (0..n).find_map(|i| cx.dtype(i)) else {
        return Ok(vec![unknown()]);
    };
    let Some(rank) = common_rank(cx, 0..n)? else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    let axis = cx.attr_axis("axis", axis_attr, rank)?;
    let mut out = vec![Dim::Unknown; rank];
    for i in 0..n {
        let Some(s) = cx.shape(i) else { continue };
        for (j, d) in s.iter().enumerate().filter(|(j, _)| *j != axis) {
            out[j] = merge_dim(&out[j], d).ok_or_else(|| {
                cx.input_error(i, format!("size {} on axis {j} (as the inputs before it)", out[j]), describe(s))
            })?;
        }
    }
    let along: Option<Vec<Dim>> = (0..n).map(|i| cx.shape(i).map(|s| s[axis].clone())).collect();
    out[axis] = along.map_or(Dim::Unknown, |d| sum_dims(&d));
    if rank == 1 {
        let values: Option<Vec<Vec<SymInt>>> = (0..n).map(|i| cx.sym(i)).collect();
        if let Some(v) = values {
            return Ok(vec![sym_out(dtype, false, v.concat())]);
        }
    }
    Ok(vec![tensor_out(dtype, Some(out))])
}

/// The sum of some sizes: fixed when all are, the one non-zero when the rest are 0.
fn sum_dims(dims: &[Dim]) -> Dim {
    let nonzero: Vec<&Dim> = dims.iter().filter(|d| **d != Dim::Fixed(0)).collect();
    if let [one] = nonzero.as_slice() {
        return (*one).clone();
    }
    dims.iter().try_fold(0usize, |acc, d| acc.checked_add(d.fixed()?)).map_or(Dim::Unknown, Dim::Fixed)
}

/// How Split divides its axis.
enum Parts {
    /// Explicit sizes.
    Sizes(Vec<i64>),
    /// Sizes given by an input whose value is unknown.
    Unknown,
    /// Equal parts (`uneven`: the last may be smaller, opset 18's `num_outputs`).
    Equal { count: usize, uneven: bool },
}

fn split_parts(cx: &Ctx<'_>) -> Result<Parts> {
    let outputs = cx.output_count();
    if let Some(s) = cx.attr_ints("split")? {
        return Ok(Parts::Sizes(s));
    }
    if cx.since >= 13 && cx.node.input(1).is_some() {
        return Ok(cx.ints(1).map_or(Parts::Unknown, Parts::Sizes));
    }
    match cx.node.get_int("num_outputs")? {
        Some(n) if usize::try_from(n).ok() != Some(outputs) => {
            Err(cx.attr_error("num_outputs", format!("the node's output count {outputs}"), n.to_string()))
        }
        Some(_) => Ok(Parts::Equal { count: outputs, uneven: true }),
        None => Ok(Parts::Equal { count: outputs, uneven: false }),
    }
}

/// The size of each part of `dim`.
fn part_sizes(cx: &Ctx<'_>, parts: &Parts, dim: &Dim) -> Result<Vec<Dim>> {
    let outputs = cx.output_count();
    Ok(match parts {
        Parts::Unknown => vec![Dim::Unknown; outputs],
        Parts::Sizes(s) => {
            let (what, found) = (format!("{outputs} sizes ≥ 0 summing to the axis' size {dim}"), format!("{s:?}"));
            let bad = |()| {
                if cx.since >= 13 {
                    cx.input_error(1, what.clone(), found.clone())
                } else {
                    cx.attr_error("split", what.clone(), found.clone())
                }
            };
            if s.len() != outputs || s.iter().any(|&x| x < 0) {
                return Err(bad(()));
            }
            if dim.fixed().is_some_and(|d| s.iter().map(|&x| x as i128).sum::<i128>() != d as i128) {
                return Err(bad(()));
            }
            s.iter().map(|&x| Dim::Fixed(x as usize)).collect()
        }
        Parts::Equal { count, uneven } => match dim {
            _ if *count == 0 => vec![],
            Dim::Fixed(d) if d % count == 0 => vec![Dim::Fixed(d / count); *count],
            Dim::Fixed(d) if *uneven => {
                let chunk = d.div_ceil(*count);
                match chunk.checked_mul(count - 1).and_then(|used| d.checked_sub(used)) {
                    Some(last) => (0..*count).map(|i| Dim::Fixed(if i + 1 == *count { last } else { chunk })).collect(),
                    None => vec![Dim::Unknown; *count],
                }
            }
            Dim::Fixed(d) => {
                return Err(cx.input_error(
                    0,
                    format!("a split axis divisible into {count} equal parts"),
                    format!("size {d}"),
                ))
            }
            d if *count == 1 => vec![d.clone()],
            _ => vec![Dim::Unknown; *count],
        },
    })
}

fn split(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let parts = split_parts(cx)?;
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown(); cx.output_count()]);
    };
    let Some(dims) = &t.shape else {
        return Ok(vec![tensor_out(t.dtype, None); cx.output_count()]);
    };
    let axis = cx.attr_axis("axis", cx.attr_int("axis", 0)?, dims.len())?;
    let sizes = part_sizes(cx, &parts, &dims[axis])?;
    let values = cx.input(0).and_then(|i| i.sym_value.clone());
    let mut offset: usize = 0;
    let mut outputs = vec![];
    for size in sizes {
        let mut shape = dims.clone();
        shape[axis] = size.clone();
        let part = match (&values, size.fixed()) {
            (Some(v), Some(n)) if dims.len() == 1 && offset.saturating_add(n) <= v.len() => {
                Some(sym_out(t.dtype, false, v[offset..offset + n].to_vec()))
            }
            _ => None,
        };
        offset = offset.saturating_add(size.fixed().unwrap_or(usize::MAX));
        outputs.push(part.unwrap_or_else(|| tensor_out(t.dtype, Some(shape))));
    }
    Ok(outputs)
}

/// Starts, ends, axes and steps of a Slice; `None` entries are unknown.
struct SliceArgs {
    starts: Vec<SymInt>,
    ends: Vec<SymInt>,
    axes: Option<Vec<usize>>,
    steps: Option<Vec<i64>>,
}

/// Reads Slice's arguments (attributes before opset 10, inputs since). `None` when even
/// their number is unknown.
fn slice_args(cx: &Ctx<'_>, rank: usize) -> Result<Option<SliceArgs>> {
    let from_attr = cx.since < 10;
    let list = |name: &str, i: usize| -> Result<Option<Vec<SymInt>>> {
        if from_attr {
            Ok(cx.attr_ints(name)?.map(|v| v.into_iter().map(SymInt::Known).collect()))
        } else {
            Ok(cx.sym(i))
        }
    };
    let (Some(starts), Some(ends)) = (list("starts", 1)?, list("ends", 2)?) else {
        return Ok(None);
    };
    if starts.len() != ends.len() {
        return Err(cx.input_error(2, format!("as many ends as starts ({})", starts.len()), ends.len().to_string()));
    }
    let axes_given = if from_attr { cx.attr_ints("axes")?.is_some() } else { cx.node.input(3).is_some() };
    let axes = match (axes_given, if from_attr { cx.attr_ints("axes")? } else { cx.ints(3) }) {
        (false, _) => Some((0..starts.len() as i64).collect::<Vec<_>>()),
        (true, a) => a,
    };
    let axes = match axes {
        Some(a) if a.len() != starts.len() => {
            return Err(cx.input_error(3, format!("{} axes (one per start)", starts.len()), format!("{a:?}")))
        }
        Some(a) => Some(cx.axes(&a, rank, "axes", (!from_attr).then_some(3))?),
        None => None,
    };
    let steps = match (from_attr || cx.node.input(4).is_none(), cx.ints(4)) {
        (true, _) => Some(vec![1; starts.len()]),
        (false, s) => s,
    };
    if let Some(s) = &steps {
        if s.len() != starts.len() || s.contains(&0) {
            return Err(cx.input_error(4, format!("{} non-zero steps", starts.len()), format!("{s:?}")));
        }
    }
    Ok(Some(SliceArgs { starts, ends, axes, steps }))
}

/// A bound large enough to mean "to the end" (exporters write INT_MAX or INT64_MAX).
const TO_END: i64 = i32::MAX as i64;

/// The indices `start..end` by `step` of an axis of known size `n`, as (first, count).
pub fn slice_range(n: usize, start: i64, end: i64, step: i64) -> (i64, usize) {
    if n == 0 || step == 0 {
        return (0, 0);
    }
    let n = n.min(i64::MAX as usize) as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    let (s, e) = (fix(start), fix(end));
    let (s, e) = if step > 0 { (s.clamp(0, n), e.clamp(0, n)) } else { (s.clamp(0, n - 1), e.clamp(-1, n - 1)) };
    let span = if step > 0 { e as i128 - s as i128 } else { s as i128 - e as i128 };
    let stride = (step as i128).abs();
    let count = if span <= 0 { 0 } else { (span + stride - 1) / stride };
    (s, count as usize)
}

/// The size of one sliced axis.
fn slice_dim(d: &Dim, start: &SymInt, end: &SymInt, step: i64) -> Dim {
    if let (Dim::Fixed(n), Some(s), Some(e)) = (d, known(start), known(end)) {
        return Dim::Fixed(slice_range(*n, s, e, step).1);
    }
    match (start, end, step) {
        (SymInt::Known(0), SymInt::Known(e), 1) if *e >= TO_END => d.clone(),
        (SymInt::Known(-1), SymInt::Known(e), -1) if *e <= -TO_END => d.clone(),
        // Heuristic: a free dimension used as the end (position ids sliced to the sequence
        // length) is taken to be within the axis. Symbols never cause errors or constants, so
        // a wrong guess only blurs symbolic shapes; plans for concrete inputs are exact.
        (SymInt::Known(0), SymInt::Symbol(s), 1) => Dim::Symbol(s.clone()),
        _ => Dim::Unknown,
    }
}

fn slice(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown()]);
    };
    let Some(dims) = &t.shape else {
        return Ok(vec![tensor_out(t.dtype, None)]);
    };
    let Some(args) = slice_args(cx, dims.len())? else {
        return Ok(vec![tensor_out(t.dtype, Some(vec![Dim::Unknown; dims.len()]))]);
    };
    let Some(axes) = &args.axes else {
        return Ok(vec![tensor_out(t.dtype, Some(vec![Dim::Unknown; dims.len()]))]);
    };
    let mut out = dims.clone();
    for (k, &a) in axes.iter().enumerate() {
        out[a] = match &args.steps {
            Some(steps) => slice_dim(&dims[a], &args.starts[k], &args.ends[k], steps[k]),
            None => Dim::Unknown,
        };
    }
    if let Some(v) = slice_values(cx, &args, dims) {
        return Ok(vec![sym_out(t.dtype, false, v)]);
    }
    Ok(vec![tensor_out(t.dtype, Some(out))])
}

/// The sliced elements of a symbolic value of rank 1.
fn slice_values(cx: &Ctx<'_>, args: &SliceArgs, dims: &[Dim]) -> Option<Vec<SymInt>> {
    let values = cx.input(0)?.sym_value.as_ref().filter(|_| dims.len() == 1)?;
    let (start, end, step) = match args.axes.as_deref()? {
        [] => return Some(values.clone()),
        [0] => (known(&args.starts[0])?, known(&args.ends[0])?, args.steps.as_ref()?[0]),
        _ => return None,
    };
    let (first, count) = slice_range(values.len(), start, end, step);
    (0..count as i64)
        .map(|i| {
            let j = i.checked_mul(step).and_then(|o| o.checked_add(first))?;
            values.get(usize::try_from(j).ok()?).cloned()
        })
        .collect()
}

fn pad(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown()]);
    };
    let Some(dims) = &t.shape else {
        return Ok(vec![tensor_out(t.dtype, None)]);
    };
    let r = dims.len();
    let pads: Option<Vec<SymInt>> = if cx.since < 11 {
        cx.attr_ints("pads")?.map(|v| v.into_iter().map(SymInt::Known).collect())
    } else {
        cx.sym(1)
    };
    let axes: Option<Vec<usize>> = if cx.since >= 18 && cx.node.input(3).is_some() {
        match cx.ints(3) {
            Some(a) => Some(cx.axes(&a, r, "axes", Some(3))?),
            None => None,
        }
    } else {
        Some((0..r).collect())
    };
    let (Some(pads), Some(axes)) = (pads, axes) else {
        return Ok(vec![tensor_out(t.dtype, Some(vec![Dim::Unknown; r]))]);
    };
    let n = axes.len();
    if pads.len() != 2 * n {
        return Err(cx.input_error(1, format!("{} pads (begin and end for {n} axes)", 2 * n), pads.len().to_string()));
    }
    let mut out = dims.clone();
    for (k, &a) in axes.iter().enumerate() {
        out[a] = match (known(&pads[k]), known(&pads[k + n])) {
            (Some(b), Some(e)) => pad_dim(cx, &dims[a], a, b.saturating_add(e))?,
            _ => Dim::Unknown,
        };
    }
    Ok(vec![tensor_out(t.dtype, Some(out))])
}

/// `d + total`, an error when a fixed size would go negative.
fn pad_dim(cx: &Ctx<'_>, d: &Dim, axis: usize, total: i64) -> Result<Dim> {
    match d {
        Dim::Fixed(n) => {
            let out = (*n as i64).saturating_add(total);
            usize::try_from(out).map(Dim::Fixed).map_err(|_| {
                cx.input_error(
                    1,
                    format!("pads that leave axis {axis} (size {n}) non-negative"),
                    format!("{total} in all"),
                )
            })
        }
        d if total == 0 => Ok(d.clone()),
        _ => Ok(Dim::Unknown),
    }
}

/// Whether an optional input is given and not an empty tensor.
fn given(cx: &Ctx<'_>, i: usize) -> bool {
    cx.node.input(i).is_some() && cx.len_1d(i) != Some(0)
}

fn resize(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown()]);
    };
    let (scales_at, sizes_at) = if cx.since < 11 { (1, usize::MAX) } else { (2, 3) };
    let (has_scales, has_sizes) = (given(cx, scales_at), sizes_at != usize::MAX && given(cx, sizes_at));
    if has_scales && has_sizes {
        return Err(cx.input_error(sizes_at, "no sizes when scales are given", "both"));
    }
    let Some(dims) = &t.shape else {
        let from = if has_sizes { sizes_at } else { scales_at };
        let rank = cx.attr_ints("axes")?.is_none().then(|| cx.len_1d(from)).flatten();
        return Ok(vec![tensor_out(t.dtype, rank.map(|r| vec![Dim::Unknown; r]))]);
    };
    let r = dims.len();
    let axes = match cx.attr_ints("axes")? {
        Some(a) => cx.axes(&a, r, "axes", None)?,
        None => (0..r).collect(),
    };
    let mut out = dims.clone();
    let resized: Option<Vec<Dim>> = if has_sizes {
        resize_by_sizes(cx, dims, &axes, sizes_at)?
    } else if has_scales {
        resize_by_scales(cx, dims, &axes, scales_at)?
    } else {
        None
    };
    for (k, &a) in axes.iter().enumerate() {
        out[a] = resized.as_ref().and_then(|v| v.get(k).cloned()).unwrap_or(Dim::Unknown);
    }
    Ok(vec![tensor_out(t.dtype, Some(out))])
}

/// Checks that a sizes/scales input has one entry per resized axis.
fn check_len(cx: &Ctx<'_>, i: usize, len: usize, n: usize, what: &str) -> Result<()> {
    if len != n {
        return Err(cx.input_error(i, format!("{n} {what} (one per resized axis)"), len.to_string()));
    }
    Ok(())
}

/// Output sizes from the `sizes` input, honouring `keep_aspect_ratio_policy`.
fn resize_by_sizes(cx: &Ctx<'_>, dims: &[Dim], axes: &[usize], at: usize) -> Result<Option<Vec<Dim>>> {
    let Some(sizes) = cx.ints(at) else {
        return Ok(None);
    };
    check_len(cx, at, sizes.len(), axes.len(), "sizes")?;
    let policy = cx.node.string_or("keep_aspect_ratio_policy", "stretch")?;
    if policy == "stretch" || cx.since < 18 {
        return Ok(Some(sizes.iter().map(|&s| usize::try_from(s).map_or(Dim::Unknown, Dim::Fixed)).collect()));
    }
    let Some(input) = axes.iter().map(|&a| dims[a].fixed()).collect::<Option<Vec<usize>>>() else {
        return Ok(None);
    };
    let ratios = sizes.iter().zip(&input).map(|(&s, &d)| s as f64 / d as f64);
    let scale = match policy.as_str() {
        "not_larger" => ratios.fold(f64::INFINITY, f64::min),
        "not_smaller" => ratios.fold(f64::NEG_INFINITY, f64::max),
        other => {
            return Err(cx.attr_error(
                "keep_aspect_ratio_policy",
                "stretch, not_larger or not_smaller",
                other.to_string(),
            ))
        }
    };
    Ok(Some(input.iter().map(|&d| Dim::Fixed((scale * d as f64 + 0.5).floor().max(0.0) as usize)).collect()))
}

/// Output sizes from the `scales` input: `floor(size * scale)` (times the ROI's extent for
/// `tf_crop_and_resize`).
fn resize_by_scales(cx: &Ctx<'_>, dims: &[Dim], axes: &[usize], at: usize) -> Result<Option<Vec<Dim>>> {
    let Some(scales) = cx.floats(at) else {
        return Ok(None);
    };
    check_len(cx, at, scales.len(), axes.len(), "scales")?;
    let crop = cx.node.string_or("coordinate_transformation_mode", "half_pixel")? == "tf_crop_and_resize";
    let extent: Vec<Option<f64>> = match (crop, cx.floats(1)) {
        (false, _) => vec![Some(1.0); axes.len()],
        (true, Some(roi)) if roi.len() == 2 * axes.len() => {
            (0..axes.len()).map(|k| Some(roi[k + axes.len()] - roi[k])).collect()
        }
        (true, _) => vec![None; axes.len()],
    };
    Ok(Some(
        axes.iter()
            .zip(scales.iter().zip(extent))
            .map(|(&a, (&s, e))| match (&dims[a], e) {
                (Dim::Fixed(n), Some(e)) => Dim::Fixed((*n as f64 * e * s).floor().max(0.0) as usize),
                (d, Some(e)) if s == 1.0 && e == 1.0 => d.clone(),
                _ => Dim::Unknown,
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::slice_range;
    use crate::ops::infer::Inferred;

    #[test]
    fn concat_shapes_and_values() {
        check_all(vec![
            case("Concat", 13, vec![int("axis", 1)], &["float[b,3,s]", "float[b,5,s]"], &["float[b,8,s]"]),
            case("Concat", 13, vec![int("axis", -1)], &["float[b,s,64]", "float[?,s,k]"], &["float[b,s,?]"]),
            case("Concat", 13, vec![int("axis", 0)], &["float[0,7]", "float[n,7]"], &["float[n,7]"]),
            case("Concat", 13, vec![int("axis", 0)], &["float[2,?]", "float[...]", "float[3,7]"], &["float[?,7]"]),
            case("Concat", 13, vec![int("axis", 0)], &["float[...]", "?"], &["float[...]"]),
        ]);
        let out = run(
            &node("Concat", 4, 1, vec![int("axis", 0)]),
            13,
            &[Some(syms(&["batch"])), Some(syms(&["seq"])), Some(i64s(&[12])), Some(i64s(&[64]))],
        )
        .unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["batch", "seq", "12", "64"]);
        assert!(out[0].constant.is_none());
        let out =
            run(&node("Concat", 2, 1, vec![int("axis", 0)]), 13, &[Some(i64s(&[2, 3])), Some(ty("int64[2]"))]).unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["2", "3", "?", "?"]);
        check_errors(vec![
            (
                case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "float[2,3,1]"], &[""]),
                vec!["Concat node 'n'", "input 1", "rank 2", "rank 3"],
            ),
            (
                case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "float[2,4]"], &[""]),
                vec!["input 1", "size 3 on axis 1", "[2,4]"],
            ),
            (case("Concat", 13, vec![int("axis", 2)], &["float[2,3]", "float[2,3]"], &[""]), vec!["'axis'", "2"]),
            (case("Concat", 13, vec![], &["float[2,3]"], &[""]), vec!["'axis'", "nothing"]),
            (case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "int32[2,3]"], &[""]), vec!["int32"]),
        ]);
    }

    #[test]
    fn split_shapes() {
        let split_in = |data: &str, sizes: Inferred, want: &[&'static str]| {
            case_with("Split", 13, vec![int("axis", 1)], vec![Some(ty(data)), Some(sizes)], want)
        };
        check_all(vec![
            case("Split", 11, vec![int("axis", 1)], &["float[b,9]"], &["float[b,3]", "float[b,3]", "float[b,3]"]),
            case("Split", 11, vec![ints("split", &[2, 7])], &["float[9,s]"], &["float[2,s]", "float[7,s]"]),
            split_in("float[b,10,s]", i64s(&[3, 7]), &["float[b,3,s]", "float[b,7,s]"]),
            split_in("float[b,10]", ty("int64[2]"), &["float[b,?]", "float[b,?]"]),
            case("Split", 18, vec![int("num_outputs", 3)], &["float[7]"], &["float[3]", "float[3]", "float[1]"]),
            case(
                "Split",
                18,
                vec![int("num_outputs", 2), int("axis", -1)],
                &["float[b,s]"],
                &["float[b,?]", "float[b,?]"],
            ),
            case("Split", 13, vec![], &["float[s,4]"], &["float[s,4]"]),
            case("Split", 13, vec![], &["float[...]"], &["float[...]", "float[...]"]),
        ]);
        let out =
            run(&node("Split", 2, 2, vec![]), 13, &[Some(syms(&["b", "s", "768"])), Some(i64s(&[2, 1]))]).unwrap();
        assert_eq!(
            (sym_of(&out[0]).unwrap(), sym_of(&out[1]).unwrap()),
            (vec!["b".into(), "s".into()], vec!["768".into()])
        );
        check_errors(vec![
            (case("Split", 11, vec![], &["float[7]"], &["", ""]), vec!["Split node 'n'", "divisible into 2", "size 7"]),
            (
                case("Split", 11, vec![ints("split", &[3, 3])], &["float[7]"], &["", ""]),
                vec!["'split'", "[3, 3]", "size 7"],
            ),
            (split_in("float[2,7]", i64s(&[7]), &["", ""]), vec!["input 1", "2 sizes"]),
            (case("Split", 18, vec![int("num_outputs", 3)], &["float[7]"], &["", ""]), vec!["'num_outputs'", "2"]),
        ]);
    }

    #[test]
    fn slice_range_matches_numpy() {
        // (n, start, end, step, first, count) from Python: len(range(n)[start:end:step])
        let cases = [
            (10, 2, 7, 1, 2, 5),
            (10, -3, 100, 1, 7, 3),
            (10, 0, -1, 2, 0, 5),
            (10, 9, -100, -1, 9, 10),
            (10, -1, -11, -3, 9, 4),
            (10, 0, 10, i64::MIN, 0, 0),
            (10, 9, -11, i64::MIN, 9, 1),
            (0, -1, -5, -1, 0, 0),
            (10, 5, 2, 1, 5, 0),
            (7, 100, 0, -2, 6, 3),
            (0, 0, 5, 1, 0, 0),
            (5, i64::MIN, i64::MAX, 1, 0, 5),
        ];
        for (n, s, e, step, first, count) in cases {
            assert_eq!(slice_range(n, s, e, step), (first, count), "n={n} {s}:{e}:{step}");
        }
    }

    #[test]
    fn slice_shapes_and_values() {
        let sl = |data: &str,
                  starts: Inferred,
                  ends: Inferred,
                  axes: Option<Inferred>,
                  steps: Option<Inferred>,
                  want: &'static str| {
            case_with("Slice", 13, vec![], vec![Some(ty(data)), Some(starts), Some(ends), axes, steps], &[want])
        };
        check_all(vec![
            sl("float[10,b,7]", i64s(&[2, 1]), i64s(&[-1, 100]), None, None, "float[7,?,7]"),
            sl("float[b,s,768]", i64s(&[0]), i64s(&[i64::MAX]), Some(i64s(&[1])), None, "float[b,s,768]"),
            sl("float[b,s,768]", i64s(&[0]), syms(&["s"]), Some(i64s(&[1])), None, "float[b,s,768]"),
            sl("float[b,s,768]", i64s(&[0]), syms(&["b"]), Some(i64s(&[1])), None, "float[b,b,768]"),
            sl("int64[1,512]", i64s(&[0]), syms(&["seq"]), Some(i64s(&[1])), None, "int64[1,seq]"),
            sl("int64[1,512]", i64s(&[1]), syms(&["seq"]), Some(i64s(&[1])), None, "int64[1,?]"),
            sl("float[b,s,9]", i64s(&[-1]), i64s(&[i64::MIN]), Some(i64s(&[-1])), Some(i64s(&[-2])), "float[b,s,5]"),
            sl("float[b,s,9]", i64s(&[-1]), i64s(&[-i64::MAX]), Some(i64s(&[1])), Some(i64s(&[-1])), "float[b,s,9]"),
            sl("float[b,s,9]", ty("int64[1]"), i64s(&[3]), Some(i64s(&[2])), None, "float[b,s,?]"),
            sl("float[b,s,9]", i64s(&[0]), i64s(&[3]), Some(ty("int64[1]")), None, "float[?,?,?]"),
            sl("float[b,s,9]", i64s(&[0]), i64s(&[3]), None, Some(ty("int64[1]")), "float[?,s,9]"),
            sl("float[...]", i64s(&[0]), i64s(&[3]), None, None, "float[...]"),
            case(
                "Slice",
                1,
                vec![ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])],
                &["float[4,9]"],
                &["float[4,2]"],
            ),
        ]);
        let out = run(
            &node("Slice", 3, 1, vec![]),
            13,
            &[Some(syms(&["b", "s", "768"])), Some(i64s(&[0])), Some(i64s(&[2]))],
        )
        .unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["b", "s"]);
        let out = run(
            &node("Slice", 5, 1, vec![]),
            13,
            &[Some(syms(&["b", "s", "7"])), Some(i64s(&[-1])), Some(i64s(&[-9])), Some(i64s(&[0])), Some(i64s(&[-1]))],
        )
        .unwrap();
        assert_eq!(sym_of(&out[0]).unwrap(), vec!["7", "s", "b"]);
        check_errors(vec![
            (
                sl("float[3,4]", i64s(&[0, 0]), i64s(&[1]), None, None, ""),
                vec!["Slice node 'n'", "input 2", "as many ends as starts"],
            ),
            (sl("float[3,4]", i64s(&[0]), i64s(&[1]), Some(i64s(&[2])), None, ""), vec!["input 3", "[-2, 1]"]),
            (sl("float[3,4]", i64s(&[0, 0]), i64s(&[1, 1]), Some(i64s(&[1, -1])), None, ""), vec!["without repeats"]),
            (sl("float[3,4]", i64s(&[0]), i64s(&[1]), None, Some(i64s(&[0])), ""), vec!["input 4", "non-zero"]),
        ]);
    }

    #[test]
    fn pad_shapes() {
        let pd = |data: &str, pads: Inferred, axes: Option<Inferred>, want: &'static str| {
            case_with("Pad", 18, vec![], vec![Some(ty(data)), Some(pads), None, axes], &[want])
        };
        check_all(vec![
            pd("float[1,3,5,7]", i64s(&[0, 0, 1, 2, 0, 0, 1, 2]), None, "float[1,3,7,11]"),
            pd("float[b,3,s]", i64s(&[0, 0, 0, 0, 1, 0]), None, "float[b,4,s]"),
            pd("float[b,3,s]", i64s(&[2, -1]), Some(i64s(&[-1])), "float[b,3,?]"),
            pd("float[b,3,5]", i64s(&[2, -1]), Some(i64s(&[-1])), "float[b,3,6]"),
            pd("float[b,3,5]", ty("int64[6]"), None, "float[?,?,?]"),
            case("Pad", 2, vec![ints("pads", &[1, 0, 1, 0])], &["float[3,s]"], &["float[5,s]"]),
        ]);
        check_errors(vec![
            (pd("float[3,4]", i64s(&[1, 1, 1]), None, ""), vec!["Pad node 'n'", "input 1", "4 pads"]),
            (pd("float[3,4]", i64s(&[-2, 0, -2, 0]), None, ""), vec!["axis 0 (size 3)", "-4"]),
        ]);
    }

    #[test]
    fn resize_shapes() {
        let rs = |data: &str, scales: Option<Inferred>, sizes: Option<Inferred>, attrs, want: &'static str| {
            case_with("Resize", 19, attrs, vec![Some(ty(data)), None, scales, sizes], &[want])
        };
        check_all(vec![
            rs("float[1,3,5,7]", Some(f32s(&[1.0, 1.0, 2.0, 1.5])), None, vec![], "float[1,3,10,10]"),
            rs("float[n,3,h,w]", Some(f32s(&[1.0, 1.0, 2.0, 2.0])), None, vec![], "float[n,3,?,?]"),
            rs("float[n,3,h,w]", Some(f32s(&[])), Some(i64s(&[1, 3, 64, 32])), vec![], "float[1,3,64,32]"),
            rs("float[n,3,h,w]", None, Some(i64s(&[64, 32])), vec![ints("axes", &[2, 3])], "float[n,3,64,32]"),
            rs(
                "float[1,3,20,10]",
                None,
                Some(i64s(&[8, 8])),
                vec![ints("axes", &[2, 3]), string("keep_aspect_ratio_policy", "not_larger")],
                "float[1,3,8,4]",
            ),
            rs(
                "float[1,3,20,10]",
                None,
                Some(i64s(&[8, 8])),
                vec![ints("axes", &[2, 3]), string("keep_aspect_ratio_policy", "not_smaller")],
                "float[1,3,16,8]",
            ),
            rs("float[n,3,h,w]", None, Some(ty("int64[4]")), vec![], "float[?,?,?,?]"),
            rs("float[...]", None, Some(ty("int64[4]")), vec![], "float[?,?,?,?]"),
            case_with(
                "Resize",
                10,
                vec![],
                vec![Some(ty("float[2,3,4]")), Some(f32s(&[1.0, 0.5, 2.5]))],
                &["float[2,1,10]"],
            ),
            case_with(
                "Resize",
                13,
                vec![string("coordinate_transformation_mode", "tf_crop_and_resize")],
                vec![Some(ty("float[1,10]")), Some(f32s(&[0.0, 0.0, 1.0, 0.5])), Some(f32s(&[1.0, 2.0]))],
                &["float[1,10]"],
            ),
        ]);
        check_errors(vec![
            (
                rs("float[1,3,5,7]", Some(f32s(&[2.0, 2.0])), None, vec![], ""),
                vec!["Resize node 'n'", "input 2", "4 scales"],
            ),
            (
                rs("float[1,3,5,7]", Some(f32s(&[2.0; 4])), Some(i64s(&[1, 3, 5, 7])), vec![], ""),
                vec!["input 3", "both"],
            ),
        ]);
    }

    /// Output shapes onnxruntime computed for Resize with random scales: (input, scales, output).
    #[test]
    fn resize_matches_onnxruntime() {
        let cases: &[(&[usize], &[f32], &[usize])] = &[
            (&[1, 2, 11, 10], &[1.0, 1.0, 1.94, 0.84], &[1, 2, 21, 8]),
            (&[1, 2, 9, 10], &[1.0, 1.0, 1.74, 1.59], &[1, 2, 15, 15]),
            (&[1, 1, 13, 10], &[1.0, 1.0, 2.67, 2.84], &[1, 1, 34, 28]),
            (&[1, 2, 10, 5], &[1.0, 1.0, 2.57, 0.67], &[1, 2, 25, 3]),
            (&[1, 1, 8, 9], &[1.0, 1.0, 1.15, 2.11], &[1, 1, 9, 18]),
            (&[1, 2, 3, 5], &[1.0, 1.0, 2.11, 2.42], &[1, 2, 6, 12]),
            (&[1, 1, 13, 12], &[1.0, 1.0, 2.08, 0.69], &[1, 1, 27, 8]),
            (&[1, 1, 9, 5], &[1.0, 1.0, 2.32, 0.55], &[1, 1, 20, 2]),
            (&[1, 2, 4, 12], &[1.0, 1.0, 2.55, 0.74], &[1, 2, 10, 8]),
            (&[1, 2, 10, 8], &[1.0, 1.0, 1.22, 0.83], &[1, 2, 12, 6]),
        ];
        for &(x, scales, want) in cases {
            let shape = |v: &[usize]| format!("float{v:?}").replace(' ', "");
            let out = run(&node("Resize", 3, 1, vec![]), 19, &[Some(ty(&shape(x))), None, Some(f32s(scales))]).unwrap();
            assert_eq!(show(&out[0]), shape(want), "{x:?} {scales:?}");
        }
    }

    /// Python's `range(n)[start:end:step]` for random arguments: (n, start, end, step, first, len).
    #[test]
    #[allow(clippy::type_complexity)]
    fn slice_range_matches_python() {
        const NONE: Option<i64> = None;
        let cases: &[(usize, i64, i64, i64, Option<i64>, usize)] = &[
            (5, -13, 2147483647, 1, Some(0), 5),
            (5, 2, 2147483647, -4, NONE, 0),
            (0, -3, -2147483648, -2, NONE, 0),
            (4, 1, 15, 1, Some(1), 3),
            (12, -8, 13, 1, Some(4), 8),
            (4, -7, -14, 3, NONE, 0),
            (12, -11, 2147483647, -4, NONE, 0),
            (4, -3, -2147483648, -2, Some(1), 1),
            (9, 0, 2147483647, 1, Some(0), 9),
            (4, -14, -2147483648, 2, NONE, 0),
            (6, 13, 2147483647, 1, NONE, 0),
            (10, -13, 2147483647, 1, Some(0), 10),
        ];
        for &(n, s, e, step, first, len) in cases {
            let (f, count) = slice_range(n, s, e, step);
            assert_eq!(count, len, "range({n})[{s}:{e}:{step}]");
            if let Some(first) = first {
                assert_eq!(f, first, "range({n})[{s}:{e}:{step}]");
            }
        }
    }
}
