//! Rules for the `com.microsoft` ops the graph optimizer emits (FusedConv, FusedMatMul, Gelu,
//! BiasGelu, FastGelu, SkipLayerNormalization), built on the rules of the ops they fuse.

use super::super::Inferred;
use super::ctx::{same_type, tensor_out, unknown, Ctx, Rule};
use crate::types::{Dim, TensorType, ValueType};
use crate::{DataType, Result};

/// The rule for contrib op `op`, if Onyx has one.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "FusedConv" => fused_conv,
        "FusedMatMul" => fused_matmul,
        "Gelu" | "BiasGelu" | "FastGelu" => gelu,
        "SkipLayerNormalization" => skip_layer_norm,
        _ => return super::llm::rule(op),
    })
}

/// Conv's rule (the residual Z has the output's shape and changes nothing).
fn fused_conv(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let conv = super::nn::rule("Conv").ok_or_else(|| cx.error("no inference rule for Conv"))?;
    conv(cx)
}

/// `Inferred` of an operand with its last two dimensions swapped (rank ≥ 2 only).
fn transposed(input: &Inferred) -> Inferred {
    match &input.ty {
        ValueType::Tensor(TensorType { dtype, shape: Some(s) }) if s.len() >= 2 => {
            let mut s = s.clone();
            let r = s.len();
            s.swap(r - 2, r - 1);
            tensor_out(*dtype, Some(s))
        }
        _ => same_type(input),
    }
}

/// MatMul's rule on the operands as transA / transB present them.
fn fused_matmul(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let matmul = super::nn::rule("MatMul").ok_or_else(|| cx.error("no inference rule for MatMul"))?;
    let flags = [cx.attr_int("transA", 0)? != 0, cx.attr_int("transB", 0)? != 0];
    let swapped: Vec<Option<Inferred>> =
        (0..2).map(|i| cx.input(i).map(|inf| if flags[i] { transposed(inf) } else { same_type(inf) })).collect();
    let refs: Vec<Option<&Inferred>> = swapped.iter().map(Option::as_ref).collect();
    matmul(&Ctx::new(cx.node, cx.since, &refs))
}

/// The Gelu family: the input's type (a bias must have the input's element type).
fn gelu(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    if cx.input_count() > 1 {
        cx.same_dtype(0, 1)?;
    }
    Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)])
}

/// SkipLayerNormalization: output and sum of the input's type; mean and inverse standard
/// deviation in float (double for double inputs) with the last dimension reduced to 1.
fn skip_layer_norm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(x) = cx.input(0) else {
        return Ok(vec![unknown(), unknown(), unknown(), unknown()]);
    };
    for i in 1..cx.input_count() {
        cx.same_dtype(0, i)?;
    }
    let stash = if cx.dtype(0) == Some(DataType::Double) { DataType::Double } else { DataType::Float };
    let stats_shape = cx.shape(0).filter(|s| !s.is_empty()).map(|s| {
        let mut s = s.to_vec();
        if let Some(last) = s.last_mut() {
            *last = Dim::Fixed(1);
        }
        s
    });
    let stats = tensor_out(stash, stats_shape);
    Ok(vec![same_type(x), stats.clone(), stats, same_type(x)])
}

#[cfg(test)]
mod tests {
    use super::super::infer_node;
    use super::super::testutil::{int, ints, node, ty};
    use super::*;
    use crate::ir::{AttrValue, Attribute, MS_DOMAIN};

    fn contrib(op: &str, inputs: usize, outputs: usize, attrs: Vec<Attribute>) -> crate::ir::Node {
        let mut n = node(op, inputs, outputs, attrs);
        n.domain = MS_DOMAIN.into();
        n
    }

    fn infer(n: &crate::ir::Node, inputs: &[&str]) -> Result<Vec<String>> {
        let inf: Vec<Inferred> = inputs.iter().map(|s| ty(s)).collect();
        let refs: Vec<Option<&Inferred>> = inf.iter().map(Some).collect();
        Ok(infer_node(n, 1, &refs)?.iter().map(|o| o.ty.to_string()).collect())
    }

    #[test]
    fn fused_conv_is_conv() {
        let attrs = vec![
            ints("pads", &[1, 1, 1, 1]),
            ints("strides", &[2, 2]),
            Attribute { name: "activation".into(), value: AttrValue::String(b"Relu".to_vec()) },
        ];
        let n = contrib("FusedConv", 4, 1, attrs);
        let out = infer(&n, &["float[b,3,7,9]", "float[5,3,3,3]", "float[5]", "float[b,5,4,5]"]).unwrap();
        assert_eq!(out, ["float[b,5,4,5]"]);
        let err = infer(&n, &["float[b,3,7,9]", "float[5,2,3,3]"]).unwrap_err().to_string();
        assert!(err.contains("FusedConv"), "{err}");
    }

    #[test]
    fn fused_matmul_transposes_the_last_two_dims() {
        let cases = [
            (0, 0, ["float[2,3,4]", "float[4,5]"], "float[2,3,5]"),
            (1, 0, ["float[2,4,3]", "float[4,5]"], "float[2,3,5]"),
            (0, 1, ["float[2,3,4]", "float[1,5,4]"], "float[2,3,5]"),
            (0, 1, ["float[1,3,4]", "float[7,5,4]"], "float[7,3,5]"),
            (1, 1, ["float[s,3]", "float[5,s]"], "float[3,5]"),
            (1, 1, ["float[4]", "float[5,4]"], "float[5]"),
        ];
        for (ta, tb, inputs, want) in cases {
            let n = contrib("FusedMatMul", 2, 1, vec![int("transA", ta), int("transB", tb)]);
            assert_eq!(infer(&n, &inputs).unwrap(), [want], "{ta} {tb} {inputs:?}");
        }
        let n = contrib("FusedMatMul", 2, 1, vec![int("transA", 1)]);
        assert!(infer(&n, &["float[3,4]", "float[4,5]"]).is_err(), "4x3 by 4x5 does not multiply");
    }

    #[test]
    fn gelu_family_and_skip_layer_norm() {
        for op in ["Gelu", "BiasGelu", "FastGelu"] {
            let n = contrib(op, 2, 1, vec![]);
            assert_eq!(infer(&n, &["float16[b,s,8]", "float16[8]"]).unwrap(), ["float16[b,s,8]"], "{op}");
            assert!(infer(&n, &["float16[b,s,8]", "float[8]"]).is_err(), "{op}: mixed types");
        }
        let n = contrib("SkipLayerNormalization", 5, 4, vec![]);
        let out = infer(&n, &["float16[b,s,8]", "float16[b,s,8]", "float16[8]", "float16[8]", "float16[8]"]).unwrap();
        assert_eq!(out, ["float16[b,s,8]", "float[b,s,1]", "float[b,s,1]", "float16[b,s,8]"]);
        let other = node("SkipLayerNormalization", 1, 1, vec![]);
        assert!(infer(&other, &["float[2]"]).unwrap().is_empty(), "default domain: no such op");
    }
}
