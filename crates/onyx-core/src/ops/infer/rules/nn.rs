//! Neural-network ops: convolutions, pools, matrix products, normalizations, softmax, dropout.

use super::super::Inferred;
use super::ctx::{describe, same_type, tensor_out, unknown, Ctx, Rule};
use super::dims::{broadcast_shapes, fmt_dims, merge_dim};
use crate::types::Dim;
use crate::{DataType, Result};

mod attention;
pub(super) mod nchwc;

/// The rule for `op`, if it is a neural-network op.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "Conv" => conv,
        "ConvTranspose" => conv_transpose,
        "MaxPool" | "AveragePool" | "LpPool" => pool,
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => global_pool,
        "Gemm" => gemm,
        "MatMul" | "MatMulInteger" => matmul,
        "BatchNormalization" => batch_norm,
        "InstanceNormalization" | "GroupNormalization" => same_as_input,
        "LayerNormalization" => layer_norm,
        "Softmax" | "LogSoftmax" | "Hardmax" => softmax,
        "Dropout" => dropout,
        "Attention" => attention::attention,
        _ => return None,
    })
}

/// The rule for an `ai.onyx` op of this family without a default-domain twin.
pub fn onyx_rule(op: &str) -> Option<Rule> {
    Some(match op {
        "PackedAttention" => attention::packed_attention,
        "GemmSkipLayerNormalization" => gemm_skip_layer_norm,
        _ => return None,
    })
}

fn same_as_input(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)])
}

/// Sliding-window attributes of Conv, ConvTranspose and the pools, for `n` spatial axes.
struct Window {
    kernel: Vec<Option<usize>>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// (begin, end) padding per axis.
    pads: Vec<(usize, usize)>,
    auto_pad: AutoPad,
    ceil_mode: bool,
    /// Pools accept windows that overhang the input (onnxruntime does); convolutions do not.
    pool: bool,
}

/// The `auto_pad` attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    Same,
    Valid,
}

impl Window {
    /// Reads the attributes; `kernel` is what the weights or `kernel_shape` say.
    fn read(cx: &Ctx<'_>, n: usize, kernel: Vec<Option<usize>>) -> Result<Window> {
        let strides = positive_list(cx, "strides", n)?;
        let dilations = positive_list(cx, "dilations", n)?;
        let pads = match cx.attr_ints("pads")? {
            None => vec![(0, 0); n],
            Some(p) => {
                let ok = p.len() == 2 * n && p.iter().all(|&x| x >= 0);
                if !ok {
                    return Err(cx.attr_error("pads", format!("{} non-negative values", 2 * n), format!("{p:?}")));
                }
                (0..n).map(|i| (p[i] as usize, p[i + n] as usize)).collect()
            }
        };
        let auto_pad = match cx.node.string_or("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" | "SAME_LOWER" => AutoPad::Same,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(cx.attr_error("auto_pad", "NOTSET, SAME_UPPER, SAME_LOWER or VALID", other.to_string()))
            }
        };
        let pads = if auto_pad == AutoPad::Valid { vec![(0, 0); n] } else { pads };
        let pool = cx.node.op_type.ends_with("Pool");
        Ok(Window { kernel, strides, dilations, pads, auto_pad, ceil_mode: cx.attr_int("ceil_mode", 0)? != 0, pool })
    }

    /// Output size of spatial axis `i` for a convolution or pool over `input`.
    fn out_dim(&self, cx: &Ctx<'_>, i: usize, input: &Dim) -> Result<Dim> {
        let (stride, dil, (begin, end)) = (self.strides[i], self.dilations[i], self.pads[i]);
        if self.auto_pad == AutoPad::Same {
            return Ok(match input {
                Dim::Fixed(n) => Dim::Fixed(n.div_ceil(stride)),
                d if stride == 1 => d.clone(),
                _ => Dim::Unknown,
            });
        }
        let Some(k) = self.kernel[i] else {
            return Ok(Dim::Unknown);
        };
        let extent = dil.saturating_mul(k.saturating_sub(1)).saturating_add(1);
        match input {
            Dim::Fixed(n) => {
                let wide = |x: usize| x as i128;
                let (span, stride) = (wide(*n) + wide(begin) + wide(end), wide(stride));
                let diff = span - wide(extent);
                if diff < 0 && !self.pool {
                    return Err(cx.input_error(
                        0,
                        format!("spatial axis {i} (size {n}, padded to {span}) at least the kernel's extent {extent}"),
                        format!("size {n}"),
                    ));
                }
                // Division truncates toward zero, as onnxruntime's does: a pool whose window
                // overhangs a too-small input still gives one output.
                let mut out =
                    if self.ceil_mode && diff > 0 { (diff + stride - 1) / stride + 1 } else { diff / stride + 1 };
                // A last window that would start in the end padding is dropped.
                if self.ceil_mode && out >= 1 && (out - 1) * stride >= wide(*n) + wide(begin) {
                    out -= 1;
                }
                usize::try_from(out).map(Dim::Fixed).map_err(|_| {
                    cx.input_error(
                        0,
                        format!("spatial axis {i} (size {n}) large enough for the kernel's extent {extent}"),
                        format!("size {n}"),
                    )
                })
            }
            d @ Dim::Symbol(_) if stride == 1 && begin.saturating_add(end).saturating_add(1) == extent => Ok(d.clone()),
            _ => Ok(Dim::Unknown),
        }
    }
}

/// An INTS attribute of `n` values ≥ 1, all 1 when absent.
fn positive_list(cx: &Ctx<'_>, name: &str, n: usize) -> Result<Vec<usize>> {
    match cx.attr_ints(name)? {
        None => Ok(vec![1; n]),
        Some(v) if v.len() == n && v.iter().all(|&x| x >= 1) => Ok(v.iter().map(|&x| x as usize).collect()),
        Some(v) => Err(cx.attr_error(name, format!("{n} values ≥ 1"), format!("{v:?}"))),
    }
}

/// The kernel's spatial size: `kernel_shape` when given (checked against the weights), else
/// the weights' trailing dimensions.
fn kernel_dims(cx: &Ctx<'_>, n: usize, weights: Option<&[Dim]>) -> Result<Vec<Option<usize>>> {
    let from_w: Vec<Option<usize>> = match weights {
        Some(w) if w.len() == n + 2 => w[2..].iter().map(Dim::fixed).collect(),
        _ => vec![None; n],
    };
    let Some(ks) = cx.attr_ints("kernel_shape")? else {
        return Ok(from_w);
    };
    if ks.len() != n || ks.iter().any(|&k| k < 1) {
        return Err(cx.attr_error("kernel_shape", format!("{n} values ≥ 1"), format!("{ks:?}")));
    }
    for (i, (&k, w)) in ks.iter().zip(&from_w).enumerate() {
        if let Some(w) = w {
            if *w as i64 != k {
                return Err(cx.input_error(
                    1,
                    format!("kernel size {k} on spatial axis {i} (kernel_shape)"),
                    format!("{w}"),
                ));
            }
        }
    }
    Ok(ks.iter().map(|&k| Some(k as usize)).collect())
}

/// The group count of a convolution.
fn group(cx: &Ctx<'_>) -> Result<usize> {
    let g = cx.attr_int("group", 1)?;
    usize::try_from(g).ok().filter(|&g| g >= 1).ok_or_else(|| cx.attr_error("group", "a value ≥ 1", g.to_string()))
}

/// The rank of a conv/pool input: X's, else the weights'; checks that it is at least 3.
fn conv_rank(cx: &Ctx<'_>, weights: Option<usize>) -> Result<Option<usize>> {
    let rank = cx.shape(0).map(<[Dim]>::len).or(weights);
    if let Some(r) = rank.filter(|&r| r < 3) {
        let found = cx.shape(0).map(describe).unwrap_or_else(|| format!("weights of rank {r}"));
        return Err(cx.input_error(0, "a tensor of rank ≥ 3 (N, C, spatial...)", found));
    }
    if let (Some(x), Some(w)) = (cx.shape(0), cx.shape(1)) {
        if x.len() != w.len() {
            return Err(cx.input_error(1, format!("weights of rank {} (as the input)", x.len()), describe(w)));
        }
    }
    Ok(rank)
}

/// Dimension `i` of input `input`, unknown when the rank is not.
fn dim(cx: &Ctx<'_>, input: usize, i: usize) -> Dim {
    cx.shape(input).and_then(|s| s.get(i)).cloned().unwrap_or(Dim::Unknown)
}

/// Checks that the bias (input 2) has `channels` elements.
fn check_bias(cx: &Ctx<'_>, channels: &Dim) -> Result<()> {
    if let Some(b) = cx.shape(2) {
        let ok = matches!(b, [d] if merge_dim(d, channels).is_some());
        if !ok {
            return Err(cx.input_error(2, format!("a bias of shape [{channels}]"), describe(b)));
        }
    }
    Ok(())
}

fn conv(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let w = cx.shape(1);
    let Some(rank) = conv_rank(cx, w.map(<[Dim]>::len))? else {
        return Ok(vec![cx.dtype(0).map(|d| tensor_out(d, None)).unwrap_or_else(unknown)]);
    };
    let n = rank - 2;
    let g = group(cx)?;
    let (c, wc, m) = (dim(cx, 0, 1), dim(cx, 1, 1), dim(cx, 1, 0));
    if let (Some(c), Some(wc)) = (c.fixed(), wc.fixed()) {
        if wc.checked_mul(g) != Some(c) {
            return Err(cx.input_error(
                1,
                format!("weights whose dimension 1 times group {g} is the input's {c} channels"),
                format!("{} ({wc})", w.map(fmt_dims).unwrap_or_default()),
            ));
        }
    }
    if let Some(m) = m.fixed().filter(|m| m % g != 0) {
        return Err(cx.input_error(1, format!("a number of output channels divisible by group {g}"), m.to_string()));
    }
    check_bias(cx, &m)?;
    let window = Window::read(cx, n, kernel_dims(cx, n, w)?)?;
    let mut out = vec![dim(cx, 0, 0), m];
    for i in 0..n {
        out.push(window.out_dim(cx, i, &dim(cx, 0, i + 2))?);
    }
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, Some(out))).unwrap_or_else(unknown)])
}

fn conv_transpose(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let w = cx.shape(1);
    let Some(rank) = conv_rank(cx, w.map(<[Dim]>::len))? else {
        return Ok(vec![cx.dtype(0).map(|d| tensor_out(d, None)).unwrap_or_else(unknown)]);
    };
    let n = rank - 2;
    let g = group(cx)?;
    let (c, wc) = (dim(cx, 0, 1), dim(cx, 1, 0));
    if merge_dim(&c, &wc).is_none() {
        return Err(cx.input_error(
            1,
            format!("weights with {c} input channels (as the input)"),
            w.map(fmt_dims).unwrap_or_default(),
        ));
    }
    let m = match dim(cx, 1, 1) {
        Dim::Fixed(x) => x.checked_mul(g).map_or(Dim::Unknown, Dim::Fixed),
        d if g == 1 => d,
        _ => Dim::Unknown,
    };
    check_bias(cx, &m)?;
    let window = Window::read(cx, n, kernel_dims(cx, n, w)?)?;
    let output_padding = match cx.attr_ints("output_padding")? {
        None => vec![0; n],
        Some(p) if p.len() == n && p.iter().all(|&x| x >= 0) => p.iter().map(|&x| x as usize).collect(),
        Some(p) => return Err(cx.attr_error("output_padding", format!("{n} non-negative values"), format!("{p:?}"))),
    };
    let explicit = match cx.attr_ints("output_shape")? {
        None => None,
        Some(s) if s.len() == n || s.len() == n + 2 => Some(s[s.len() - n..].to_vec()),
        Some(s) => return Err(cx.attr_error("output_shape", format!("{n} spatial sizes"), format!("{s:?}"))),
    };
    let mut out = vec![dim(cx, 0, 0), m];
    for i in 0..n {
        let d = match &explicit {
            Some(s) => usize::try_from(s[i]).map(Dim::Fixed).unwrap_or(Dim::Unknown),
            None => transposed_dim(cx, &window, i, &dim(cx, 0, i + 2), output_padding[i])?,
        };
        out.push(d);
    }
    Ok(vec![cx.dtype(0).map(|d| tensor_out(d, Some(out))).unwrap_or_else(unknown)])
}

/// Output size of spatial axis `i` of a transposed convolution.
fn transposed_dim(cx: &Ctx<'_>, w: &Window, i: usize, input: &Dim, output_padding: usize) -> Result<Dim> {
    let stride = w.strides[i];
    if w.auto_pad == AutoPad::Same {
        return Ok(match input {
            Dim::Fixed(n) => n.checked_mul(stride).map_or(Dim::Unknown, Dim::Fixed),
            d if stride == 1 => d.clone(),
            _ => Dim::Unknown,
        });
    }
    let Some(k) = w.kernel[i] else {
        return Ok(Dim::Unknown);
    };
    // i128 holds every product of two values that came from i64 attributes or dims.
    let wide = |x: usize| x as i128;
    let extent = wide(w.dilations[i]) * (wide(k) - 1) + 1;
    let (begin, end) = (wide(w.pads[i].0), wide(w.pads[i].1));
    let growth = wide(output_padding) + extent - 1 - begin - end;
    match input {
        Dim::Fixed(n) => {
            let out = wide(stride) * (wide(*n) - 1) + 1 + growth;
            usize::try_from(out).map(Dim::Fixed).map_err(|_| {
                cx.input_error(
                    0,
                    format!("spatial axis {i} large enough for the padding ({begin}+{end})"),
                    format!("size {n}"),
                )
            })
        }
        d @ Dim::Symbol(_) if stride == 1 && growth == 0 => Ok(d.clone()),
        _ => Ok(Dim::Unknown),
    }
}

fn pool(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let ks = cx
        .attr_ints("kernel_shape")?
        .ok_or_else(|| cx.attr_error("kernel_shape", "the kernel's spatial sizes", "nothing"))?;
    let Some(rank) = conv_rank(cx, Some(ks.len() + 2))? else {
        return Ok(vec![]);
    };
    let n = rank - 2;
    let window = Window::read(cx, n, kernel_dims(cx, n, None)?)?;
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown()]);
    };
    let mut out = vec![dim(cx, 0, 0), dim(cx, 0, 1)];
    for i in 0..n {
        out.push(window.out_dim(cx, i, &dim(cx, 0, i + 2))?);
    }
    let mut outputs = vec![tensor_out(dtype, Some(out.clone()))];
    if cx.node.op_type == "MaxPool" {
        outputs.push(tensor_out(DataType::Int64, Some(out)));
    }
    Ok(outputs)
}

fn global_pool(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![unknown()]);
    };
    let shape = match &t.shape {
        Some(s) if s.len() < 2 => return Err(cx.input_error(0, "a tensor of rank ≥ 2 (N, C, ...)", describe(s))),
        Some(s) => Some(s.iter().enumerate().map(|(i, d)| if i < 2 { d.clone() } else { Dim::Fixed(1) }).collect()),
        None => None,
    };
    Ok(vec![tensor_out(t.dtype, shape)])
}

/// Requires input `i` to have rank 2 when its rank is known.
fn matrix(cx: &Ctx<'_>, i: usize) -> Result<Option<(Dim, Dim)>> {
    cx.expect_rank(i, 2)?;
    Ok(cx.shape(i).and_then(|s| Some((s.first()?.clone(), s.get(1)?.clone()))))
}

fn gemm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    cx.same_dtype(0, 1)?;
    let (trans_a, trans_b) = (cx.attr_int("transA", 0)? != 0, cx.attr_int("transB", 0)? != 0);
    let a = matrix(cx, 0)?.map(|(r, c)| if trans_a { (c, r) } else { (r, c) });
    let b = matrix(cx, 1)?.map(|(r, c)| if trans_b { (c, r) } else { (r, c) });
    if let (Some((_, ka)), Some((kb, _))) = (&a, &b) {
        if merge_dim(ka, kb).is_none() {
            return Err(inner_mismatch(cx, ka, kb));
        }
    }
    let m = a.map(|(m, _)| m).unwrap_or(Dim::Unknown);
    let n = b.map(|(_, n)| n).unwrap_or(Dim::Unknown);
    let mut out = vec![m, n];
    if let Some(c) = cx.shape(2) {
        let merged = broadcast_shapes(&out, c).filter(|s| s.len() == 2);
        out = merged
            .ok_or_else(|| cx.input_error(2, format!("a shape broadcastable to {}", fmt_dims(&out)), describe(c)))?;
    }
    Ok(vec![cx.dtype(0).or(cx.dtype(1)).map(|d| tensor_out(d, Some(out))).unwrap_or_else(unknown)])
}

/// `ai.onyx` GemmSkipLayerNormalization(A, B, bias?, skip, gamma, beta?) with `transB` and
/// `epsilon`: SkipLayerNormalization of the product `A @ op(B)` (`[M, N]`, read in the skip's
/// shape, whose last dim is N and whose elements are M * N), the skip and the bias. Y and the
/// sum (output 1) have the skip's shape.
fn gemm_skip_layer_norm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    for i in [1, 2, 3, 4, 5] {
        if cx.input(i).is_some() {
            cx.same_dtype(0, i)?;
        }
    }
    let product = gemm(&Ctx::new(cx.node, cx.since, &[cx.input(0), cx.input(1), None]))?;
    let Some(skip) = cx.input(3) else { return Ok(vec![unknown(), unknown()]) };
    let fixed = |dims: &[Dim]| dims.iter().map(Dim::fixed).collect::<Option<Vec<usize>>>();
    let count = |dims: &[usize]| dims.iter().try_fold(1usize, |c, &d| c.checked_mul(d));
    let mn = product[0].tensor_type().and_then(|t| t.shape.as_deref()).and_then(fixed);
    if let (Some(mn), Some(s)) = (mn, cx.shape(3).and_then(fixed)) {
        if s.last() != mn.last() || count(&s) != count(&mn) {
            let (m, n) = (mn[0], mn[1]);
            return Err(cx.input_error(3, format!("the product's {m} x {n} elements, rows of {n}"), format!("{s:?}")));
        }
    }
    let n = product[0].tensor_type().and_then(|t| t.shape.as_deref()).and_then(|s| s.last().cloned());
    for i in [2, 4, 5] {
        if let (Some(v), Some(n)) = (cx.shape(i), &n) {
            if v.len() != 1 || merge_dim(&v[0], n).is_none() {
                return Err(cx.input_error(i, format!("a vector [{n}] (the product's columns)"), describe(v)));
            }
        }
    }
    Ok(vec![same_type(skip), same_type(skip)])
}

fn inner_mismatch(cx: &Ctx<'_>, ka: &Dim, kb: &Dim) -> crate::Error {
    cx.input_error(
        1,
        format!("inner dimension {ka} (as input 0's)"),
        format!("{kb} ({})", cx.shape(1).map(describe).unwrap_or_default()),
    )
}

fn matmul(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let integer = cx.node.op_type == "MatMulInteger";
    if !integer {
        cx.same_dtype(0, 1)?;
    }
    let dtype = if integer { Some(DataType::Int32) } else { cx.dtype(0).or(cx.dtype(1)) };
    let Some(dtype) = dtype else {
        return Ok(vec![unknown()]);
    };
    let (Some(a), Some(b)) = (cx.shape(0), cx.shape(1)) else {
        return Ok(vec![tensor_out(dtype, None)]);
    };
    for (i, s) in [(0, a), (1, b)] {
        if s.is_empty() {
            return Err(cx.input_error(i, "a tensor of rank ≥ 1", describe(s)));
        }
    }
    let a2: Vec<Dim> = if a.len() == 1 { vec![Dim::Fixed(1), a[0].clone()] } else { a.to_vec() };
    let b2: Vec<Dim> = if b.len() == 1 { vec![b[0].clone(), Dim::Fixed(1)] } else { b.to_vec() };
    let (ka, kb) = (&a2[a2.len() - 1], &b2[b2.len() - 2]);
    if merge_dim(ka, kb).is_none() {
        return Err(inner_mismatch(cx, ka, kb));
    }
    let mut out = broadcast_shapes(&a2[..a2.len() - 2], &b2[..b2.len() - 2]).ok_or_else(|| {
        cx.input_error(1, format!("batch dimensions broadcastable with {}", fmt_dims(&a2[..a2.len() - 2])), describe(b))
    })?;
    if a.len() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    Ok(vec![tensor_out(dtype, Some(out))])
}

fn batch_norm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let c = dim(cx, 0, 1);
    if cx.since >= 9 {
        for i in 1..5 {
            if let Some(s) = cx.shape(i) {
                if !matches!(s, [d] if merge_dim(d, &c).is_some()) {
                    return Err(cx.input_error(
                        i,
                        format!("a tensor of shape [{c}] (the input's channels)"),
                        describe(s),
                    ));
                }
            }
        }
    }
    let Some(x) = cx.input(0) else {
        return Ok(vec![unknown()]);
    };
    let stats_dtype = if cx.since >= 14 { cx.dtype(3).or(cx.dtype(0)) } else { cx.dtype(0) };
    let stats = stats_dtype.map(|d| tensor_out(d, Some(vec![c]))).unwrap_or_else(unknown);
    let extra = if cx.since >= 14 { 2 } else { 4 };
    let mut out = vec![same_type(x)];
    out.extend(std::iter::repeat_n(stats, extra));
    Ok(out)
}

fn layer_norm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(x) = cx.input(0) else {
        return Ok(vec![unknown()]);
    };
    let code = cx.attr_int("stash_type", 1)?;
    let stash = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| cx.attr_error("stash_type", "an ONNX data type code", code.to_string()))?;
    let stats_shape = match cx.shape(0) {
        Some(s) => {
            let axis = cx.attr_axis("axis", cx.attr_int("axis", -1)?, s.len())?;
            Some(s.iter().enumerate().map(|(i, d)| if i < axis { d.clone() } else { Dim::Fixed(1) }).collect())
        }
        None => None,
    };
    let stats = tensor_out(stash, stats_shape);
    Ok(vec![same_type(x), stats.clone(), stats])
}

fn softmax(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    if let Some(s) = cx.shape(0) {
        let default = if cx.since >= 13 { -1 } else { 1 };
        let axis = cx.attr_int("axis", default)?;
        if !s.is_empty() {
            cx.attr_axis("axis", axis, s.len())?;
        }
    }
    same_as_input(cx)
}

fn dropout(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(t) = cx.tensor(0) else {
        return Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)]);
    };
    let mask = if cx.since >= 10 { DataType::Bool } else { t.dtype };
    Ok(vec![tensor_out(t.dtype, t.shape.clone()), tensor_out(mask, t.shape.clone())])
}

#[cfg(test)]
mod tests;
