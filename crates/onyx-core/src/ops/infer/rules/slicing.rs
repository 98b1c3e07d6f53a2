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
mod tests;
