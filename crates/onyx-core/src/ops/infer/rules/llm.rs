//! Rules for the ONNX Runtime contrib ops of LLM models (the ops onnxruntime-genai's model
//! builder emits), on the contracts of `ops::contrib`: attributes are decoded and checked
//! there, once, for inference and every EP alike.

use super::super::Inferred;
use super::ctx::{same_type, tensor_out, unknown, Ctx, Rule};
use super::dims::all_fixed;
use crate::ops::contrib::gqa::GroupQueryAttentionOp;
use crate::ops::contrib::mha::{MultiHeadAttentionOp, PackedAttentionOp};
use crate::ops::contrib::nbits::{GatherBlockQuantizedOp, MatMulNBitsOp};
use crate::ops::contrib::rms_norm::RmsNormOp;
use crate::ops::contrib::rotary::RotaryOp;
use crate::types::Dim;
use crate::{DataType, Result};

/// The rule for contrib op `op`, if it is one of these.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "SimplifiedLayerNormalization" | "SkipSimplifiedLayerNormalization" => rms_norm,
        "MatMulNBits" => matmul_nbits,
        "RotaryEmbedding" => rotary,
        "GroupQueryAttention" => group_query_attention,
        "GatherBlockQuantized" => gather_block_quantized,
        "MultiHeadAttention" => multi_head_attention,
        "Attention" => packed_attention,
        _ => return None,
    })
}

/// Y (and the Skip form's sum) of the input's type; the statistics in float with the
/// normalized dims set to 1.
pub fn rms_norm(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = RmsNormOp::from_node(cx.node)?;
    let Some(x) = cx.input(0) else {
        return Ok(vec![unknown(), unknown(), unknown(), unknown()]);
    };
    let gamma = if op.skip { 2 } else { 1 };
    // The plain form's scale may have another float type, which Y then has (ONNX Runtime's V).
    if op.skip {
        for i in (1..cx.input_count()).filter(|&i| cx.input(i).is_some()) {
            cx.same_dtype(0, i)?;
        }
    }
    let y = match (op.skip, cx.dtype(gamma), cx.shape(0)) {
        (false, Some(t), shape) if Some(t) != cx.dtype(0) => tensor_out(t, shape.map(<[Dim]>::to_vec)),
        _ => same_type(x),
    };
    let stash = if cx.dtype(0) == Some(DataType::Double) { DataType::Double } else { DataType::Float };
    let stats_shape = match cx.shape(0) {
        Some(s) => {
            let axis = op.first_axis(s.len())?;
            Some(s.iter().enumerate().map(|(i, d)| if i < axis { d.clone() } else { Dim::Fixed(1) }).collect())
        }
        None => None,
    };
    // Known shapes are checked with the contract (the Skip form's skip and bias at run time).
    if let (Some(x), Some(g)) = (cx.shape(0).and_then(all_fixed), cx.shape(gamma).and_then(all_fixed)) {
        let skip = op.skip.then_some(&x[..]);
        op.geometry(&x, skip, &g, None)?;
    }
    let stats = tensor_out(stash, stats_shape);
    Ok(if op.skip { vec![y, stats.clone(), stats, same_type(x)] } else { vec![y, stats] })
}

/// A's type, A's shape with the last dimension (K) replaced by N.
fn matmul_nbits(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = MatMulNBitsOp::from_node(cx.node)?;
    let Some(dtype) = cx.dtype(MatMulNBitsOp::A) else {
        return Ok(vec![unknown()]);
    };
    let shape = match cx.shape(MatMulNBitsOp::A) {
        Some([lead @ .., k]) => {
            if k.fixed().is_some_and(|k| k != op.k) {
                return Err(cx.input_error(
                    MatMulNBitsOp::A,
                    format!("a last dimension of K = {}", op.k),
                    format!("{k:?}"),
                ));
            }
            Some(lead.iter().cloned().chain([Dim::Fixed(op.n)]).collect())
        }
        Some([]) => return Err(cx.input_error(MatMulNBitsOp::A, "a tensor of rank >= 1", "a scalar")),
        None => None,
    };
    Ok(vec![tensor_out(dtype, shape)])
}

/// The input's type.
fn rotary(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    RotaryOp::from_node(cx.node)?;
    Ok(vec![cx.input(0).map(same_type).unwrap_or_else(unknown)])
}

/// Output `[batch, seq, num_heads * head]`; present key and value `[batch, kv_num_heads,
/// present, head]`, `present = max(past capacity, total_sequence_length)` when both are known.
fn group_query_attention(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = GroupQueryAttentionOp::from_node(cx.node)?;
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown(), unknown(), unknown(), unknown()]);
    };
    let packed = cx.node.input(1).is_none();
    let head = match cx.shape(0) {
        Some([_, _, h]) => h.fixed().map(|h| op.head_size(h, packed)).transpose()?,
        Some(s) => return Err(cx.input_error(0, "a 3-D query [batch, seq, hidden]", format!("rank {}", s.len()))),
        None => None,
    };
    let (batch, seq) = match cx.shape(0) {
        Some([b, s, _]) => (b.clone(), s.clone()),
        _ => (Dim::Unknown, Dim::Unknown),
    };
    let fixed = |n: Option<usize>| n.map_or(Dim::Unknown, Dim::Fixed);
    let y = tensor_out(dtype, cx.shape(0).map(|_| vec![batch.clone(), seq, fixed(head.map(|h| h * op.num_heads))]));
    let past = cx.shape(GroupQueryAttentionOp::PAST_KEY).and_then(|s| s.get(2)).and_then(Dim::fixed);
    let total = cx
        .ints(GroupQueryAttentionOp::TOTAL_SEQUENCE_LENGTH)
        .and_then(|v| v.first().copied())
        .and_then(|t| usize::try_from(t).ok());
    let present_len = match (past, total) {
        (Some(p), Some(t)) => Dim::Fixed(p.max(t)),
        (None, Some(t)) if cx.node.input(GroupQueryAttentionOp::PAST_KEY).is_none() => Dim::Fixed(t),
        _ => Dim::Unknown,
    };
    let present = tensor_out(dtype, Some(vec![batch.clone(), Dim::Fixed(op.kv_num_heads), present_len, fixed(head)]));
    let qk = tensor_out(dtype, None);
    Ok(vec![y, present.clone(), present, qk])
}

/// The shapes of inputs `0..n` when all are known (absent inputs `None`), for the contracts'
/// checks.
fn fixed_shapes(cx: &Ctx<'_>, n: usize) -> Option<Vec<Option<Vec<usize>>>> {
    (0..n)
        .map(|i| match cx.node.input(i) {
            None => Some(None),
            Some(_) => cx.shape(i).and_then(all_fixed).map(Some),
        })
        .collect()
}

/// Output `[batch, seq, num_heads * value head]`; the presents' shapes depend on the past's
/// length, so only their type is inferred. Known shapes are checked with the contract.
fn multi_head_attention(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = MultiHeadAttentionOp::from_node(cx.node)?;
    let Some(dtype) = cx.dtype(MultiHeadAttentionOp::QUERY) else {
        return Ok(vec![unknown(), unknown(), unknown(), unknown()]);
    };
    // With a shared past buffer the total length is past_sequence_length's value, known at run time.
    let shared = cx.node.input(MultiHeadAttentionOp::PAST_SEQUENCE_LENGTH).is_some();
    if let Some(shapes) = fixed_shapes(cx, MultiHeadAttentionOp::PAST_SEQUENCE_LENGTH).filter(|_| !shared) {
        let views: Vec<Option<&[usize]>> = shapes.iter().map(Option::as_deref).collect();
        op.shapes(&views, None)?;
    }
    let v_hidden = match cx.shape(MultiHeadAttentionOp::VALUE) {
        Some([_, _, dv]) => dv.clone(),
        Some([_, _, _, h]) => h.fixed().map_or(Dim::Unknown, |h| Dim::Fixed(h * op.0.num_heads)),
        _ => Dim::Unknown,
    };
    let y = match cx.shape(MultiHeadAttentionOp::QUERY) {
        Some([b, s, _]) => tensor_out(dtype, Some(vec![b.clone(), s.clone(), v_hidden])),
        _ => tensor_out(dtype, None),
    };
    let other = tensor_out(dtype, None);
    Ok(vec![y, other.clone(), other.clone(), other])
}

/// Output `[batch, seq, v hidden]` (the weights' v columns); present `[2, batch, num_heads,
/// past + seq, head]` when its dims are known.
fn packed_attention(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = PackedAttentionOp::from_node(cx.node)?;
    let Some(dtype) = cx.dtype(PackedAttentionOp::INPUT) else {
        return Ok(vec![unknown(), unknown()]);
    };
    if let Some(shapes) = fixed_shapes(cx, PackedAttentionOp::PAST_SEQUENCE_LENGTH + 1) {
        let views: Vec<Option<&[usize]>> = shapes.iter().map(Option::as_deref).collect();
        op.shapes(&views)?;
    }
    let hidden = match cx.shape(PackedAttentionOp::WEIGHTS) {
        Some([_, c]) => c.fixed().map(|c| op.hidden_sizes(c)).transpose()?,
        _ => None,
    };
    let Some([b, s, _]) = cx.shape(PackedAttentionOp::INPUT) else {
        return Ok(vec![tensor_out(dtype, None), tensor_out(dtype, None)]);
    };
    let n = op.common.num_heads;
    let y = tensor_out(dtype, Some(vec![b.clone(), s.clone(), hidden.map_or(Dim::Unknown, |(_, v)| Dim::Fixed(v))]));
    let total = match (cx.node.input(PackedAttentionOp::PAST), cx.shape(PackedAttentionOp::PAST), s.fixed()) {
        (None, _, Some(s)) => Dim::Fixed(s),
        (Some(_), Some([_, _, _, p, _]), Some(s)) => p.fixed().map_or(Dim::Unknown, |p| Dim::Fixed(p + s)),
        _ => Dim::Unknown,
    };
    let head = hidden.map_or(Dim::Unknown, |(q, _)| Dim::Fixed(q / n));
    let present = tensor_out(dtype, Some(vec![Dim::Fixed(2), b.clone(), Dim::Fixed(n), total, head]));
    Ok(vec![y, present])
}

/// The scales' type; data's shape with the gathered axis replaced by the indices' shape
/// (and packed 4-bit data's last dimension doubled).
fn gather_block_quantized(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let op = GatherBlockQuantizedOp::from_node(cx.node)?;
    let Some(dtype) = cx.dtype(GatherBlockQuantizedOp::SCALES) else {
        return Ok(vec![unknown()]);
    };
    let shape = match (cx.tensor(GatherBlockQuantizedOp::DATA), cx.shape(GatherBlockQuantizedOp::INDICES)) {
        (Some(t), Some(indices)) => match (&t.shape, op.logical_dims_sym(t.dtype, t.shape.as_deref())) {
            (Some(_), Some(dims)) => {
                let axis = op.gather_axis(dims.len())?;
                Some(
                    dims[..axis]
                        .iter()
                        .cloned()
                        .chain(indices.iter().cloned())
                        .chain(dims[axis + 1..].iter().cloned())
                        .collect(),
                )
            }
            _ => None,
        },
        _ => None,
    };
    Ok(vec![tensor_out(dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{int, node, run, show, ty};
    use crate::ir::MS_DOMAIN;

    fn contrib(op: &str, inputs: usize, outputs: usize, attrs: &[(&str, i64)]) -> crate::ir::Node {
        let mut n = node(op, inputs, outputs, attrs.iter().map(|(k, v)| int(k, *v)).collect());
        n.domain = MS_DOMAIN.into();
        n
    }

    fn infer(n: &crate::ir::Node, inputs: &[&str]) -> crate::Result<Vec<String>> {
        let ins: Vec<_> = inputs.iter().map(|s| (!s.is_empty()).then(|| ty(s))).collect();
        Ok(run(n, 1, &ins)?.iter().map(show).collect())
    }

    #[test]
    fn llm_op_shapes() {
        let mnb = contrib("MatMulNBits", 3, 1, &[("K", 64), ("N", 5), ("block_size", 32)]);
        assert_eq!(infer(&mnb, &["float16[b,s,64]", "uint8[5,2,16]", "float16[10]"]).unwrap(), ["float16[b,s,5]"]);
        let err = infer(&mnb, &["float[b,s,63]", "uint8[5,2,16]", "float[10]"]).unwrap_err().to_string();
        assert!(err.contains("K = 64"), "{err}");
        let mut gqa = contrib("GroupQueryAttention", 7, 3, &[("num_heads", 4), ("kv_num_heads", 2)]);
        // Packed q, k, v: key and value omitted.
        gqa.inputs[1].clear();
        gqa.inputs[2].clear();
        let out = infer(&gqa, &["float[b,s,128]", "", "", "float[b,2,p,16]", "float[b,2,p,16]", "int32[b]", "int32[]"])
            .unwrap();
        assert_eq!(out, ["float[b,s,64]", "float[b,2,?,16]", "float[b,2,?,16]"]);
        let skip = contrib("SkipSimplifiedLayerNormalization", 3, 4, &[]);
        let out = infer(&skip, &["float[b,s,8]", "float[b,s,8]", "float[8]"]).unwrap();
        assert_eq!(out, ["float[b,s,8]", "float[b,s,1]", "float[b,s,1]", "float[b,s,8]"]);
        let mut sln = node("SimplifiedLayerNormalization", 2, 1, vec![]);
        sln.domain = String::new();
        assert_eq!(infer(&sln, &["float16[2,8]", "float[8]"]).unwrap(), ["float[2,8]"]);
        assert!(infer(&sln, &["float[2,8]", "float[3]"]).is_err());
    }
}
