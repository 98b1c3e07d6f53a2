//! Onyx's NCHWc ops (`ai.onyx`; see `optimizer::nchwc`): a blocked tensor `[N, ceil(C/b), H, W,
//! b]` is the NCHW tensor `[N, C, H, W]` with its channels in blocks of `b`. Each rule runs the
//! rule of the plain op on the NCHW view of its input and blocks the result.

use super::super::super::Inferred;
use super::super::ctx::{describe, tensor_out, unknown, Ctx, Rule};
use crate::types::{Dim, TensorType, ValueType};
use crate::Result;

/// The rule for `op`, if it is an NCHWc op.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "NchwcConv" => conv,
        "NchwcMaxPool" | "NchwcAveragePool" => pool,
        "NchwcGlobalAveragePool" | "NchwcGlobalMaxPool" => global_pool,
        "ReorderInput" => reorder_input,
        "ReorderOutput" => reorder_output,
        _ => return None,
    })
}

/// The `block` attribute.
fn block(cx: &Ctx<'_>) -> Result<usize> {
    match cx.node.get_int("block")? {
        Some(b) if (1..=64).contains(&b) => Ok(b as usize),
        other => Err(cx.attr_error("block", "a block size from 1 to 64", format!("{other:?}"))),
    }
}

/// `ceil(c / b)` of a dimension.
fn blocks_of(c: &Dim, b: usize) -> Dim {
    match c {
        Dim::Fixed(c) => Dim::Fixed(c.div_ceil(b)),
        _ => Dim::Unknown,
    }
}

/// Input 0 seen as NCHW with `channels` channels, when it is blocked (rank 5 ending in `b`);
/// an NCHW input (rank 4) as it is; `None` when its rank is unknown.
fn nchw_view(cx: &Ctx<'_>, b: usize, channels: Dim) -> Result<Option<Inferred>> {
    let Some(t) = cx.tensor(0) else { return Ok(None) };
    let Some(shape) = &t.shape else { return Ok(None) };
    let dims = match shape.as_slice() {
        [n, _, h, w, lanes] if matches!(lanes, Dim::Fixed(l) if *l == b) || *lanes == Dim::Unknown => {
            vec![n.clone(), channels, h.clone(), w.clone()]
        }
        [_, _, _, _] if cx.node.op_type == "NchwcConv" => shape.clone(),
        _ => return Err(cx.input_error(0, format!("a blocked tensor [N, C/{b}, H, W, {b}]"), describe(shape))),
    };
    Ok(Some(Inferred::of_type(ValueType::Tensor(TensorType { dtype: t.dtype, shape: Some(dims) }))))
}

/// Runs the plain op's `rule` on `view` (in place of input 0) and blocks output 0's channels.
fn blocked_output(cx: &Ctx<'_>, rule: Rule, view: Inferred, b: usize) -> Result<Vec<Inferred>> {
    let mut inputs: Vec<Option<&Inferred>> = (0..cx.input_count()).map(|i| cx.input(i)).collect();
    inputs[0] = Some(&view);
    let plain = rule(&Ctx::new(cx.node, cx.since, &inputs))?;
    let Some(ValueType::Tensor(t)) = plain.first().map(|o| &o.ty) else { return Ok(vec![unknown()]) };
    let shape = t.shape.as_ref().map(|s| {
        let mut s = s.clone();
        s[1] = blocks_of(&s[1], b);
        s.push(Dim::Fixed(b));
        s
    });
    Ok(vec![tensor_out(t.dtype, shape)])
}

fn conv(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = block(cx)?;
    // The real input channels: W's dimension 1 times the group.
    let channels = match (cx.shape(1).and_then(|w| w.get(1)), cx.attr_int("group", 1)?) {
        (Some(Dim::Fixed(c)), g) if g >= 1 => Dim::Fixed(c * g as usize),
        _ => Dim::Unknown,
    };
    match nchw_view(cx, b, channels)? {
        Some(view) => blocked_output(cx, super::conv, view, b),
        None => Ok(vec![cx.dtype(0).map(|d| tensor_out(d, None)).unwrap_or_else(unknown)]),
    }
}

fn pool(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = block(cx)?;
    // The pools keep the channels: the blocks stand in for them.
    let blocks = cx.shape(0).and_then(|s| s.get(1)).cloned().unwrap_or(Dim::Unknown);
    match nchw_view(cx, b, blocks)? {
        Some(view) => {
            let mut out = blocked_output(cx, super::pool, view, b)?;
            if let (ValueType::Tensor(t), Some(s)) = (&mut out[0].ty, cx.shape(0)) {
                if let Some(shape) = &mut t.shape {
                    shape[1] = s[1].clone();
                }
            }
            Ok(out)
        }
        None => Ok(vec![cx.dtype(0).map(|d| tensor_out(d, None)).unwrap_or_else(unknown)]),
    }
}

fn global_pool(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = block(cx)?;
    let Some(t) = cx.tensor(0) else { return Ok(vec![unknown()]) };
    let shape = match &t.shape {
        Some(s) if s.len() == 5 => Some(vec![s[0].clone(), s[1].clone(), Dim::Fixed(1), Dim::Fixed(1), Dim::Fixed(b)]),
        Some(s) => return Err(cx.input_error(0, format!("a blocked tensor [N, C/{b}, H, W, {b}]"), describe(s))),
        None => None,
    };
    Ok(vec![tensor_out(t.dtype, shape)])
}

fn reorder_input(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = block(cx)?;
    let Some(t) = cx.tensor(0) else { return Ok(vec![unknown()]) };
    let shape = match &t.shape {
        Some(s) if s.len() == 4 => {
            Some(vec![s[0].clone(), blocks_of(&s[1], b), s[2].clone(), s[3].clone(), Dim::Fixed(b)])
        }
        Some(s) => return Err(cx.input_error(0, "an NCHW tensor of rank 4", describe(s))),
        None => None,
    };
    Ok(vec![tensor_out(t.dtype, shape)])
}

fn reorder_output(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let b = block(cx)?;
    let channels = match cx.node.get_int("channels")? {
        Some(c) if c >= 1 => c as usize,
        other => return Err(cx.attr_error("channels", "a positive channel count", format!("{other:?}"))),
    };
    let Some(t) = cx.tensor(0) else { return Ok(vec![unknown()]) };
    let shape = match &t.shape {
        Some(s) if s.len() == 5 => {
            if let Dim::Fixed(blocks) = s[1] {
                if blocks != channels.div_ceil(b) {
                    return Err(cx.input_error(
                        0,
                        format!("{} blocks of {b} for {channels} channels", channels.div_ceil(b)),
                        describe(s),
                    ));
                }
            }
            Some(vec![s[0].clone(), Dim::Fixed(channels), s[2].clone(), s[3].clone()])
        }
        Some(s) => return Err(cx.input_error(0, format!("a blocked tensor [N, C/{b}, H, W, {b}]"), describe(s))),
        None => None,
    };
    Ok(vec![tensor_out(t.dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::super::testutil::{node, ty};
    use super::*;
    use crate::ir::{AttrValue, Attribute, ONYX_DOMAIN};

    fn show(i: &Inferred) -> String {
        match &i.ty {
            ValueType::Tensor(t) => {
                format!("{}{}", t.dtype, super::super::super::dims::fmt_dims(t.shape.as_deref().unwrap_or_default()))
                    .replace(' ', "")
            }
            other => format!("{other:?}"),
        }
    }

    fn run(op: &str, attrs: Vec<(&str, AttrValue)>, inputs: &[&str]) -> Result<Vec<String>> {
        let mut n = node(op, inputs.len(), 1, vec![]);
        n.domain = ONYX_DOMAIN.into();
        n.attributes = attrs.into_iter().map(|(name, value)| Attribute { name: name.into(), value }).collect();
        let types: Vec<Inferred> = inputs.iter().map(|s| ty(s)).collect();
        let refs: Vec<Option<&Inferred>> = types.iter().map(Some).collect();
        Ok(rule(op).unwrap()(&Ctx::new(&n, 1, &refs))?.iter().map(show).collect())
    }

    #[test]
    fn shapes_of_the_nchwc_ops() {
        let b16 = || ("block", AttrValue::Int(16));
        let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
        let conv = |x: &str| {
            run(
                "NchwcConv",
                vec![b16(), ("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
                &[x, "float[40,17,3,3]"],
            )
        };
        assert_eq!(conv("float[n,2,56,56,16]").unwrap(), ["float[n,3,28,28,16]"]);
        assert_eq!(conv("float[1,17,56,55]").unwrap(), ["float[1,3,28,28,16]"]);
        assert!(conv("float[1,2,56,56,8]").unwrap_err().to_string().contains("blocked tensor"));
        let pool = run(
            "NchwcMaxPool",
            vec![b16(), ("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
            &["float[1,4,112,112,16]"],
        );
        assert_eq!(pool.unwrap(), ["float[1,4,56,56,16]"]);
        assert_eq!(
            run("NchwcGlobalAveragePool", vec![b16()], &["float[n,32,7,7,16]"]).unwrap(),
            ["float[n,32,1,1,16]"]
        );
        assert_eq!(run("ReorderInput", vec![b16()], &["float[n,20,5,5]"]).unwrap(), ["float[n,2,5,5,16]"]);
        let out = |c: i64| run("ReorderOutput", vec![b16(), ("channels", AttrValue::Int(c))], &["float[n,2,5,5,16]"]);
        assert_eq!(out(20).unwrap(), ["float[n,20,5,5]"]);
        assert!(out(40).unwrap_err().to_string().contains("3 blocks of 16 for 40 channels"));
        assert!(run("ReorderInput", vec![], &["float[1,2,3,4]"]).unwrap_err().to_string().contains("block"));
    }
}
