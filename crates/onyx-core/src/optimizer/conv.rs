//! Convolution fusions: BatchNormalization folded into the Conv before it, and
//! Conv(+Add residual)(+activation) → FusedConv.

use std::collections::{HashMap, HashSet};

use super::view::{from_f64s, to_f64s, View};
use super::{fresh_name, Changes, Fusion, Rewrite};
use crate::ir::{AttrValue, Attribute, Node, MS_DOMAIN};
use crate::{DataType, Result, Tensor};

/// True when none of `node`'s outputs after the first is read or is a graph output.
pub(super) fn only_first_output_used(view: &View<'_>, node: &Node) -> bool {
    node.outputs.iter().skip(1).all(|o| o.is_empty() || (view.readers(o).is_empty() && !view.is_output(o)))
}

/// Conv(X, W, B?) → BatchNormalization(scale, bias, mean, var) with constant weights and
/// parameters, the Conv output read only by the BN: one Conv with
/// `W' = W * s` and `B' = (B - mean) * s + bias` per output channel, `s = scale / sqrt(var + eps)`.
pub(super) fn conv_batch_norm(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    let mut taken: HashSet<String> = HashSet::new();
    for b in 0..view.graph.nodes.len() {
        if view.op(b) != "BatchNormalization" {
            continue;
        }
        let bn = view.node(b);
        let Some(x) = bn.input(0) else { continue };
        let Some(c) = view.produced_by(x, "Conv") else { continue };
        if view.sole_reader(x) != Some(b) || !only_first_output_used(view, bn) || bn.inputs.len() != 5 {
            continue;
        }
        if bn.int_or("training_mode", 0).ok() != Some(0) || bn.int_or("spatial", 1).ok() != Some(1) {
            continue;
        }
        let conv = view.node(c);
        let Some((w, bias)) = folded_weights(view, conv, bn) else { continue };
        let w_name = fresh_name(view.graph, &format!("{}_bn", conv.inputs[1]), &taken);
        taken.insert(w_name.clone());
        let b_name = fresh_name(view.graph, &format!("{}_bn_bias", conv.inputs[1]), &taken);
        taken.insert(b_name.clone());
        let mut fused = conv.clone();
        fused.inputs = vec![conv.inputs[0].clone(), w_name.clone(), b_name.clone()];
        fused.outputs = vec![bn.outputs[0].clone()];
        let extra: HashMap<String, Tensor> = [(w_name.clone(), w.clone()), (b_name.clone(), bias.clone())].into();
        if fusion.allowed(view, c, &[c, b], &fused, &extra) {
            changes.add(Rewrite {
                remove: vec![c, b],
                nodes: vec![fused],
                initializers: vec![(w_name, w), (b_name, bias)],
            });
        }
    }
    Ok(changes)
}

/// The folded weights and bias, when W, B and the BN parameters are constant float tensors of
/// matching sizes.
fn folded_weights(view: &View<'_>, conv: &Node, bn: &Node) -> Option<(Tensor, Tensor)> {
    let w = view.constant(conv.input(1)?)?;
    let m = *w.shape().first()?;
    if w.shape().len() < 3 || m == 0 {
        return None;
    }
    let param = |i: usize| -> Option<Vec<f64>> {
        let t = view.constant(bn.input(i)?)?;
        (t.shape() == [m]).then(|| to_f64s(t)).flatten()
    };
    let (scale, beta, mean, var) = (param(1)?, param(2)?, param(3)?, param(4)?);
    let old_bias = match conv.input(2) {
        Some(name) => {
            let t = view.constant(name)?;
            if t.shape() != [m] {
                return None;
            }
            to_f64s(t)?
        }
        None => vec![0.0; m],
    };
    let eps = f64::from(bn.float_or("epsilon", 1e-5).ok()?);
    let s: Vec<f64> = scale.iter().zip(&var).map(|(g, v)| g / (v + eps).sqrt()).collect();
    if s.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let bias: Vec<f64> = (0..m).map(|i| (old_bias[i] - mean[i]) * s[i] + beta[i]).collect();
    Some((scale_rows(w, &s)?, from_f64s(w.dtype(), vec![m], bias)?))
}

/// `w` with each of its `s.len()` leading-axis rows multiplied by that row's factor, in f64 and
/// rounded once, without widening the whole tensor (resnet50's weights are 100 MB).
fn scale_rows(w: &Tensor, s: &[f64]) -> Option<Tensor> {
    fn map<T: crate::tensor::Element + Copy>(w: &Tensor, s: &[f64], f: impl Fn(T, f64) -> T) -> Option<Tensor> {
        let data = w.as_slice::<T>().ok()?;
        let per = (data.len() / s.len()).max(1);
        let mut out = Vec::with_capacity(data.len());
        for (row, &k) in data.chunks(per).zip(s) {
            out.extend(row.iter().map(|&x| f(x, k)));
        }
        Tensor::from_vec(w.shape().to_vec(), out).ok()
    }
    match w.dtype() {
        DataType::Float => map(w, s, |x: f32, k| (f64::from(x) * k) as f32),
        DataType::Double => map(w, s, |x: f64, k| x * k),
        DataType::Float16 => map(w, s, |x: half::f16, k| half::f16::from_f64(x.to_f64() * k)),
        DataType::BFloat16 => map(w, s, |x: half::bf16, k| half::bf16::from_f64(x.to_f64() * k)),
        _ => None,
    }
}

/// An activation FusedConv applies: its name and parameters.
pub(super) fn activation(view: &View<'_>, a: usize) -> Option<(&'static str, Vec<f32>)> {
    let node = view.node(a);
    Some(match view.op(a) {
        "Relu" => ("Relu", vec![]),
        "Tanh" => ("Tanh", vec![]),
        "Sigmoid" => ("Sigmoid", vec![]),
        "LeakyRelu" => ("LeakyRelu", vec![node.float_or("alpha", 0.01).ok()?]),
        "HardSigmoid" => ("HardSigmoid", vec![node.float_or("alpha", 0.2).ok()?, node.float_or("beta", 0.5).ok()?]),
        "Clip" => {
            let since = crate::ops::registry::since_version(node, &view.opsets).ok()?;
            let (min, max) = if since < 11 {
                (node.float_or("min", f32::NEG_INFINITY).ok()?, node.float_or("max", f32::INFINITY).ok()?)
            } else {
                let bound = |i: usize, default: f32| match node.input(i) {
                    None => Some(default),
                    Some(n) => view.scalar(n).map(|v| v as f32),
                };
                (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?)
            };
            ("Clip", vec![min, max])
        }
        _ => return None,
    })
}

/// Conv(X, W, B?) [→ Add(·, Z)] [→ Relu/Clip/LeakyRelu/Sigmoid/Tanh/HardSigmoid] → FusedConv,
/// when each intermediate is read only by the next node and Z has the output's exact type.
pub(super) fn fused_conv(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for c in 0..view.graph.nodes.len() {
        if view.op(c) != "Conv" || changes.claimed(c) {
            continue;
        }
        let conv = view.node(c);
        let y = conv.outputs[0].as_str();
        if y.is_empty() || !view.is_float(y) || conv.inputs.len() < 2 {
            continue;
        }
        let mut pattern = vec![c];
        let mut out = y;
        let mut z = None;
        if let Some(a) = view.sole_reader(out).filter(|&a| view.op(a) == "Add") {
            let add = view.node(a);
            let other = if add.inputs[0] == y { &add.inputs[1] } else { &add.inputs[0] };
            if add.inputs.len() == 2 && other != y && view.same_type(other, y) {
                z = Some(other.clone());
                pattern.push(a);
                out = add.outputs[0].as_str();
            }
        }
        let mut act = None;
        if let Some(a) = view.sole_reader(out) {
            if let Some(found) = activation(view, a) {
                act = Some(found);
                pattern.push(a);
                out = view.node(a).outputs[0].as_str();
            }
        }
        if pattern.len() == 1 {
            continue;
        }
        let mut inputs: Vec<String> = conv.inputs.iter().take(3).cloned().collect();
        if let Some(z) = z {
            inputs.resize(3, String::new());
            inputs.push(z);
        }
        let mut attributes = conv.attributes.clone();
        if let Some((name, params)) = act {
            attributes
                .push(Attribute { name: "activation".into(), value: AttrValue::String(name.as_bytes().to_vec()) });
            if !params.is_empty() {
                attributes.push(Attribute { name: "activation_params".into(), value: AttrValue::Floats(params) });
            }
        }
        let fused = Node {
            name: conv.name.clone(),
            op_type: "FusedConv".into(),
            domain: MS_DOMAIN.into(),
            inputs,
            outputs: vec![out.to_string()],
            attributes,
            ..Default::default()
        };
        if fusion.allowed(view, c, &pattern, &fused, &HashMap::new()) {
            changes.add(Rewrite { remove: pattern, nodes: vec![fused], initializers: vec![] });
        }
    }
    Ok(changes)
}
