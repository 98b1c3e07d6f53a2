//! Neural-network ops: convolutions, pools, matrix products, normalizations, softmax, dropout.

use super::super::Inferred;
use super::ctx::{describe, same_type, tensor_out, unknown, Ctx, Rule};
use super::dims::{broadcast_shapes, fmt_dims, merge_dim};
use crate::types::Dim;
use crate::{DataType, Result};

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
mod tests {
    use super::super::testutil::*;

    #[test]
    fn conv_shapes() {
        check_all(vec![
            case("Conv", 11, vec![], &["float[1,3,224,224]", "float[64,3,7,7]"], &["float[1,64,218,218]"]),
            case(
                "Conv",
                11,
                vec![ints("strides", &[2, 2]), ints("pads", &[3, 3, 3, 3])],
                &["float[n,3,224,224]", "float[64,3,7,7]", "float[64]"],
                &["float[n,64,112,112]"],
            ),
            case(
                "Conv",
                11,
                vec![ints("pads", &[1, 1, 1, 1])],
                &["float[n,16,h,w]", "float[32,16,3,3]"],
                &["float[n,32,h,w]"],
            ),
            case(
                "Conv",
                11,
                vec![ints("strides", &[2, 2])],
                &["float[n,16,h,w]", "float[32,16,3,3]"],
                &["float[n,32,?,?]"],
            ),
            case(
                "Conv",
                11,
                vec![int("group", 4), ints("dilations", &[2]), ints("strides", &[3])],
                &["float[2,12,29]", "float[8,3,5]"],
                &["float[2,8,7]"],
            ),
            case(
                "Conv",
                11,
                vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2])],
                &["float[1,3,13]", "float[5,3,4]"],
                &["float[1,5,7]"],
            ),
            case(
                "Conv",
                11,
                vec![string("auto_pad", "SAME_LOWER")],
                &["float[1,3,s]", "float[5,3,4]"],
                &["float[1,5,s]"],
            ),
            case(
                "Conv",
                1,
                vec![string("auto_pad", "VALID"), ints("pads", &[9, 9])],
                &["float[1,3,13]", "float[5,3,4]"],
                &["float[1,5,10]"],
            ),
            case("Conv", 22, vec![ints("kernel_shape", &[3, 3])], &["float[...]", "float[...]"], &["float[...]"]),
            case("Conv", 22, vec![], &["float[...]", "float[6,2,3,3]"], &["float[?,6,?,?]"]),
            case("Conv", 22, vec![ints("kernel_shape", &[3, 3])], &["float16[1,3,9,11]", "?"], &["float16[1,?,7,9]"]),
        ]);
    }

    #[test]
    fn conv_errors() {
        check_errors(vec![
            (
                case("Conv", 11, vec![], &["float[1,3,9,9]", "float[8,4,3,3]"], &[""]),
                vec!["Conv node 'n'", "input 1", "3 channels", "[8,4,3,3]"],
            ),
            (
                case("Conv", 11, vec![int("group", 2)], &["float[1,4,9,9]", "float[7,2,3,3]"], &[""]),
                vec!["divisible by group 2", "7"],
            ),
            (case("Conv", 11, vec![], &["float[1,3,9]", "float[8,3,3,3]"], &[""]), vec!["input 1", "rank 3"]),
            (case("Conv", 11, vec![], &["float[1,3]", "float[8,3]"], &[""]), vec!["input 0", "rank ≥ 3"]),
            (case("Conv", 11, vec![], &["float[1,3,2]", "float[8,3,5]"], &[""]), vec!["input 0", "extent 5", "size 2"]),
            (
                case("Conv", 11, vec![], &["float[1,3,9]", "float[8,3,3]", "float[7]"], &[""]),
                vec!["input 2", "[8]", "[7]"],
            ),
            (
                case("Conv", 11, vec![ints("kernel_shape", &[5])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
                vec!["kernel size 5", "3"],
            ),
            (
                case("Conv", 11, vec![ints("strides", &[0])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
                vec!["'strides'", "[0]"],
            ),
            (
                case("Conv", 11, vec![ints("pads", &[1, 1, 1])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
                vec!["'pads'", "2 non-negative"],
            ),
            (
                case("Conv", 11, vec![string("auto_pad", "BOGUS")], &["float[1,3,9]", "float[8,3,3]"], &[""]),
                vec!["'auto_pad'", "BOGUS"],
            ),
        ]);
    }

    #[test]
    fn conv_transpose_shapes() {
        check_all(vec![
            case("ConvTranspose", 11, vec![], &["float[1,3,5,7]", "float[3,2,3,3]"], &["float[1,2,7,9]"]),
            case(
                "ConvTranspose",
                11,
                vec![ints("strides", &[3, 2]), ints("output_padding", &[1, 1]), ints("pads", &[1, 2, 1, 2])],
                &["float[1,1,3,3]", "float[1,2,3,3]"],
                &["float[1,2,8,4]"],
            ),
            case("ConvTranspose", 11, vec![int("group", 3)], &["float[n,6,s]", "float[6,5,1]"], &["float[n,15,s]"]),
            case(
                "ConvTranspose",
                11,
                vec![ints("output_shape", &[10, 8])],
                &["float[1,3,5,7]", "float[3,2,3,3]"],
                &["float[1,2,10,8]"],
            ),
            case(
                "ConvTranspose",
                11,
                vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2])],
                &["float[1,3,5]", "float[3,4,3]"],
                &["float[1,4,10]"],
            ),
        ]);
        check_errors(vec![
            (
                case("ConvTranspose", 11, vec![], &["float[1,3,5]", "float[4,2,3]"], &[""]),
                vec!["input 1", "3 input channels"],
            ),
            (
                case("ConvTranspose", 11, vec![ints("pads", &[5, 5])], &["float[1,3,2]", "float[3,2,3]"], &[""]),
                vec!["input 0", "padding"],
            ),
        ]);
    }

    #[test]
    fn pool_shapes() {
        check_all(vec![
            case(
                "MaxPool",
                12,
                vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2])],
                &["float[1,64,112,112]"],
                &["float[1,64,55,55]", "int64[1,64,55,55]"],
            ),
            case(
                "MaxPool",
                12,
                vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
                &["float[n,64,112,112]"],
                &["float[n,64,56,56]", "int64[n,64,56,56]"],
            ),
            // Ceil mode keeps a partial window, but not one that starts in the end padding.
            case(
                "MaxPool",
                12,
                vec![ints("kernel_shape", &[5]), ints("strides", &[3])],
                &["float[1,1,3]"],
                &["float[1,1,1]", "int64[1,1,1]"],
            ),
            case(
                "MaxPool",
                12,
                vec![ints("kernel_shape", &[2]), ints("strides", &[2]), int("ceil_mode", 1)],
                &["float[1,1,5]"],
                &["float[1,1,3]", "int64[1,1,3]"],
            ),
            case(
                "AveragePool",
                19,
                vec![ints("kernel_shape", &[2]), ints("strides", &[2]), ints("pads", &[0, 1]), int("ceil_mode", 1)],
                &["float[1,1,4]"],
                &["float[1,1,2]"],
            ),
            case(
                "AveragePool",
                11,
                vec![ints("kernel_shape", &[3]), ints("pads", &[1, 1])],
                &["float[b,c,s]"],
                &["float[b,c,s]"],
            ),
            case(
                "LpPool",
                18,
                vec![ints("kernel_shape", &[2, 2]), ints("dilations", &[2, 1])],
                &["float[2,3,9,9]"],
                &["float[2,3,7,8]"],
            ),
            case(
                "MaxPool",
                12,
                vec![ints("kernel_shape", &[2, 2])],
                &["float[...]"],
                &["float[?,?,?,?]", "int64[?,?,?,?]"],
            ),
            case("GlobalAveragePool", 1, vec![], &["float[n,512,7,9]"], &["float[n,512,1,1]"]),
            case("GlobalMaxPool", 1, vec![], &["float16[2,3,s]"], &["float16[2,3,1]"]),
            case("GlobalMaxPool", 1, vec![], &["float[...]"], &["float[...]"]),
        ]);
        check_errors(vec![
            (case("MaxPool", 12, vec![], &["float[1,3,9,9]"], &[""]), vec!["'kernel_shape'"]),
            (
                case("MaxPool", 12, vec![ints("kernel_shape", &[3])], &["float[1,3,9,9]"], &[""]),
                vec!["'kernel_shape'", "2 values", "[3]"],
            ),
            (case("GlobalAveragePool", 1, vec![], &["float[3]"], &[""]), vec!["input 0", "rank ≥ 2"]),
            (
                case("MaxPool", 12, vec![ints("kernel_shape", &[5])], &["float[1,3,1]"], &[""]),
                vec!["input 0", "extent 5", "size 1"],
            ),
        ]);
    }

    #[test]
    fn matmul_and_gemm_shapes() {
        check_all(vec![
            case("MatMul", 13, vec![], &["float[b,s,768]", "float[768,3072]"], &["float[b,s,3072]"]),
            case("MatMul", 13, vec![], &["float[b,12,s,64]", "float[b,12,64,s]"], &["float[b,12,s,s]"]),
            case("MatMul", 13, vec![], &["float[7]", "float[7]"], &["float[]"]),
            case("MatMul", 13, vec![], &["float[7]", "float[3,7,5]"], &["float[3,5]"]),
            case("MatMul", 13, vec![], &["float[2,1,3,7]", "float[7,5]"], &["float[2,1,3,5]"]),
            case("MatMul", 13, vec![], &["float[2,1,3,7]", "float[5,7,9]"], &["float[2,5,3,9]"]),
            case("MatMul", 13, vec![], &["float[m,k]", "float[?,n]"], &["float[m,n]"]),
            case("MatMul", 13, vec![], &["float[...]", "float[3,4]"], &["float[...]"]),
            case("MatMulInteger", 10, vec![], &["uint8[s,5]", "int8[5,3]"], &["int32[s,3]"]),
            case("Gemm", 13, vec![], &["float[n,9]", "float[9,5]", "float[5]"], &["float[n,5]"]),
            case("Gemm", 13, vec![int("transA", 1), int("transB", 1)], &["float[9,3]", "float[5,9]"], &["float[3,5]"]),
            case("Gemm", 13, vec![], &["float[m,9]", "float[9,5]", "float[7,1]"], &["float[7,5]"]),
        ]);
        check_errors(vec![
            (
                case("MatMul", 13, vec![], &["float[2,3]", "float[4,5]"], &[""]),
                vec!["MatMul node 'n'", "input 1", "inner dimension 3", "4"],
            ),
            (case("MatMul", 13, vec![], &["float[2,5,3]", "float[4,3,5]"], &[""]), vec!["batch dimensions", "[2]"]),
            (case("MatMul", 13, vec![], &["float[]", "float[3]"], &[""]), vec!["input 0", "rank ≥ 1"]),
            (case("MatMul", 13, vec![], &["float[3]", "double[3]"], &[""]), vec!["double"]),
            (
                case("Gemm", 13, vec![int("transB", 1)], &["float[2,3]", "float[3,4]"], &[""]),
                vec!["Gemm", "inner dimension 3", "4"],
            ),
            (case("Gemm", 13, vec![], &["float[2,3,1]", "float[3,4]"], &[""]), vec!["input 0", "rank 2"]),
            (case("Gemm", 13, vec![], &["float[2,3]", "float[3,4]", "float[3]"], &[""]), vec!["input 2", "[2,4]"]),
        ]);
    }

    #[test]
    fn normalization_shapes() {
        check_all(vec![
            case(
                "BatchNormalization",
                15,
                vec![],
                &["float[n,16,h,w]", "float[16]", "float[16]", "float[16]", "float[16]"],
                &["float[n,16,h,w]"],
            ),
            case(
                "BatchNormalization",
                15,
                vec![int("training_mode", 1)],
                &["float16[n,16,5]", "float16[16]", "float16[16]", "float[16]", "float[16]"],
                &["float16[n,16,5]", "float[16]", "float[16]"],
            ),
            case(
                "BatchNormalization",
                9,
                vec![],
                &["float[n,c,5]", "", "", "", ""],
                &["float[n,c,5]", "float[c]", "float[c]", "float[c]", "float[c]"],
            ),
            case("InstanceNormalization", 6, vec![], &["float[n,3,s]", "float[3]", "float[3]"], &["float[n,3,s]"]),
            case(
                "GroupNormalization",
                21,
                vec![int("num_groups", 2)],
                &["float[n,4,s]", "float[4]", "float[4]"],
                &["float[n,4,s]"],
            ),
            case(
                "LayerNormalization",
                17,
                vec![],
                &["float16[b,s,768]", "float16[768]"],
                &["float16[b,s,768]", "float[b,s,1]", "float[b,s,1]"],
            ),
            case(
                "LayerNormalization",
                17,
                vec![int("axis", 1), int("stash_type", 11)],
                &["float[2,3,5]"],
                &["float[2,3,5]", "double[2,1,1]", "double[2,1,1]"],
            ),
            case("Softmax", 13, vec![], &["float[b,12,s,s]"], &["float[b,12,s,s]"]),
            case("LogSoftmax", 11, vec![int("axis", -2)], &["float[3,7]"], &["float[3,7]"]),
            case("Hardmax", 13, vec![int("axis", 0)], &["float[...]"], &["float[...]"]),
            case("Dropout", 13, vec![], &["float[b,s,768]", "", ""], &["float[b,s,768]", "bool[b,s,768]"]),
            case("Dropout", 7, vec![], &["float16[3]"], &["float16[3]", "float16[3]"]),
        ]);
        check_errors(vec![
            (
                case("BatchNormalization", 15, vec![], &["float[1,16,5]", "float[15]", "", "", ""], &[""]),
                vec!["input 1", "[16]", "[15]"],
            ),
            (case("LayerNormalization", 17, vec![int("axis", 3)], &["float[2,3,5]"], &[""]), vec!["'axis'", "3"]),
            (case("Softmax", 13, vec![int("axis", 2)], &["float[2,3]"], &[""]), vec!["'axis'", "[-2, 1]"]),
        ]);
    }

    /// Output shapes onnxruntime computed for random pools:
    /// (op, input, kernel, strides, dilations, pads, ceil_mode, output).
    #[test]
    #[allow(clippy::type_complexity)]
    fn pools_match_onnxruntime() {
        let cases: &[(&str, &[usize], &[i64], &[i64], &[i64], &[i64], i64, &[usize])] = &[
            ("AveragePool", &[1, 2, 9], &[1], &[1], &[3], &[0, 0], 0, &[1, 2, 9]),
            ("MaxPool", &[1, 2, 4], &[4], &[4], &[1], &[1, 0], 1, &[1, 2, 2]),
            ("MaxPool", &[1, 2, 6], &[5], &[1], &[3], &[4, 3], 0, &[1, 2, 1]),
            ("MaxPool", &[1, 2, 11], &[2], &[3], &[2], &[0, 0], 1, &[1, 2, 4]),
            ("MaxPool", &[1, 2, 12], &[5], &[2], &[2], &[0, 4], 0, &[1, 2, 4]),
            ("MaxPool", &[1, 2, 10], &[5], &[4], &[2], &[3, 4], 1, &[1, 2, 3]),
            ("AveragePool", &[1, 2, 6, 15], &[2, 2], &[1, 3], &[3, 2], &[1, 1, 1, 0], 0, &[1, 2, 5, 5]),
            ("AveragePool", &[1, 2, 15], &[3], &[2], &[2], &[1, 0], 0, &[1, 2, 6]),
            ("AveragePool", &[1, 2, 14, 8], &[5, 4], &[4, 1], &[1, 2], &[3, 0, 0, 2], 1, &[1, 2, 4, 4]),
            ("AveragePool", &[1, 2, 17, 13], &[3, 1], &[4, 3], &[1, 3], &[0, 0, 0, 0], 1, &[1, 2, 5, 5]),
            ("MaxPool", &[1, 2, 9], &[4], &[4], &[1], &[1, 3], 1, &[1, 2, 3]),
            ("AveragePool", &[1, 2, 16], &[4], &[3], &[3], &[3, 2], 1, &[1, 2, 5]),
            ("MaxPool", &[1, 2, 4], &[2], &[2], &[1], &[0, 0], 1, &[1, 2, 2]),
            ("MaxPool", &[1, 2, 7, 3], &[2, 4], &[3, 3], &[1, 3], &[0, 3, 1, 3], 1, &[1, 2, 3, 1]),
        ];
        for &(op, x, k, s, d, p, ceil, want) in cases {
            let attrs = vec![
                ints("kernel_shape", k),
                ints("strides", s),
                ints("dilations", d),
                ints("pads", p),
                int("ceil_mode", ceil),
            ];
            let input = format!("float{x:?}").replace(' ', "");
            let out = run(&node(op, 1, 1, attrs), 19, &[Some(ty(&input))]).unwrap();
            assert_eq!(
                show(&out[0]),
                format!("float{want:?}").replace(' ', ""),
                "{op} {x:?} k{k:?} s{s:?} d{d:?} p{p:?} ceil {ceil}"
            );
        }
    }

    /// Output shapes onnxruntime computed for random transposed convolutions:
    /// (input, weights, strides, dilations, pads, output_padding, group, output).
    #[test]
    #[allow(clippy::type_complexity)]
    fn conv_transpose_matches_onnxruntime() {
        let cases: &[(&[usize], &[usize], &[i64], &[i64], &[i64], &[i64], i64, &[usize])] = &[
            (&[1, 2, 2, 5], &[2, 2, 1, 2], &[2, 1], &[1, 2], &[0, 0, 0, 0], &[0, 0], 1, &[1, 2, 3, 7]),
            (&[1, 2, 5], &[2, 1, 4], &[1], &[2], &[2, 2], &[0], 2, &[1, 2, 7]),
            (&[1, 1, 9, 9], &[1, 2, 4, 3], &[1, 1], &[1, 2], &[2, 1, 2, 1], &[0, 0], 1, &[1, 2, 8, 11]),
            (&[1, 2, 6], &[2, 1, 1], &[3], &[2], &[0, 0], &[0], 2, &[1, 2, 16]),
            (&[1, 2, 5, 5], &[2, 1, 4, 2], &[1, 3], &[2, 2], &[0, 0, 0, 0], &[0, 1], 1, &[1, 1, 11, 16]),
            (&[1, 2, 7, 7], &[2, 2, 1, 2], &[1, 1], &[2, 1], &[0, 0, 0, 0], &[0, 0], 1, &[1, 2, 7, 8]),
            (&[1, 2, 8, 5], &[2, 1, 4, 2], &[2, 3], &[2, 1], &[3, 1, 3, 1], &[1, 2], 2, &[1, 2, 16, 14]),
            (&[1, 1, 2], &[1, 1, 2], &[3], &[2], &[0, 0], &[2], 1, &[1, 1, 8]),
            (&[1, 2, 2, 2], &[2, 1, 1, 2], &[2, 1], &[1, 1], &[0, 0, 0, 0], &[1, 0], 2, &[1, 2, 4, 3]),
            (&[1, 4, 2, 7], &[4, 1, 4, 4], &[3, 1], &[1, 1], &[3, 1, 3, 1], &[2, 0], 2, &[1, 2, 3, 8]),
            (&[1, 1, 3], &[1, 2, 1], &[2], &[2], &[0, 0], &[0], 1, &[1, 2, 5]),
            (&[1, 2, 3], &[2, 1, 4], &[3], &[1], &[0, 0], &[1], 1, &[1, 1, 11]),
        ];
        for &(x, w, s, d, p, op, g, want) in cases {
            let attrs = vec![
                ints("strides", s),
                ints("dilations", d),
                ints("pads", p),
                ints("output_padding", op),
                int("group", g),
            ];
            let shape = |v: &[usize]| format!("float{v:?}").replace(' ', "");
            let out =
                run(&node("ConvTranspose", 2, 1, attrs), 11, &[Some(ty(&shape(x))), Some(ty(&shape(w)))]).unwrap();
            assert_eq!(show(&out[0]), shape(want), "{x:?} {w:?} s{s:?} d{d:?} p{p:?} op{op:?} g{g}");
        }
    }
}
