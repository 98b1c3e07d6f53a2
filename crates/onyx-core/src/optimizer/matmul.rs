//! Matrix-product fusions: MatMul+Add(bias) → Gemm, Transpose(last two dims) feeding MatMul,
//! or a scalar Mul/Div after it → FusedMatMul with transA/transB/alpha, Gemm+activation →
//! Onyx's FusedGemm, and products of one input by several weights → one product and a Split.

use std::collections::{HashMap, HashSet};

use super::view::View;
use super::{fresh_name, Changes, Fusion, Rewrite};
use crate::ir::{AttrValue, Attribute, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::types::{Dim, TensorType};
use crate::Device;
use crate::{Result, Tensor};

/// MatMul(A, B) → Add(·, C) with B a constant matrix and C a bias of B's columns (`[]`,
/// `[1]`, `[N]` or `[1, N]`): Gemm(A, B, C). An A of higher rank with fixed dims (a sequence of
/// rows, as transformers have) is viewed as a matrix: Reshape, Gemm, Reshape back (both
/// Reshapes are free on the providers, views of their input).
pub(super) fn matmul_add_gemm(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    let mut taken = HashSet::new();
    for a in 0..view.graph.nodes.len() {
        if view.op(a) != "Add" || view.node(a).inputs.len() != 2 {
            continue;
        }
        let add = view.node(a);
        for (mm_out, c) in [(&add.inputs[0], &add.inputs[1]), (&add.inputs[1], &add.inputs[0])] {
            let Some(m) = view.produced_by(mm_out, "MatMul") else { continue };
            if view.sole_reader(mm_out) != Some(a) || changes.claimed(m) {
                continue;
            }
            let mm = view.node(m);
            let (ma, mb) = (&mm.inputs[0], &mm.inputs[1]);
            let Some(b) = view.constant(mb) else { continue };
            let n = match b.shape() {
                [_, n] => *n,
                _ => continue,
            };
            // The rows of A when it has a higher rank (fixed dims): (its shape, rows).
            let rows = view.shape(ma).and_then(|s| fixed_rows(s, b.shape()[0]));
            let a_is_matrix = view.shape(ma).is_some_and(|s| s.len() == 2) || rows.is_some();
            let bias_ok = match view.shape(c) {
                Some([]) => true,
                Some([d]) => *d == Dim::Fixed(n) || *d == Dim::Fixed(1),
                Some([one, d]) => *one == Dim::Fixed(1) && (*d == Dim::Fixed(n) || *d == Dim::Fixed(1)),
                _ => false,
            };
            let types_ok = view.is_float(ma) && view.dtype(ma) == view.dtype(c) && view.dtype(ma) == Some(b.dtype());
            if !(a_is_matrix && bias_ok && types_ok && view.graph_opset() >= 7) {
                continue;
            }
            let mut gemm = Node {
                name: mm.name.clone(),
                op_type: "Gemm".into(),
                inputs: vec![ma.clone(), mb.clone(), c.clone()],
                outputs: vec![add.outputs[0].clone()],
                ..Default::default()
            };
            let Some(rewrite) = as_matrix(view, &mut gemm, rows, n, &mut taken) else { continue };
            if fusion.allowed_typed(view, m, &[m, a], &gemm, &HashMap::new(), &rewrite.types)
                && changes.add(Rewrite { remove: vec![m, a], nodes: rewrite.nodes, initializers: rewrite.initializers })
            {
                break;
            }
        }
    }
    Ok(changes)
}

/// For A of `shape` (rank above 2, fixed dims, last `k`): (its dims, its rows).
fn fixed_rows(shape: &[Dim], k: usize) -> Option<(Vec<usize>, usize)> {
    let dims: Vec<usize> = shape.iter().map(Dim::fixed).collect::<Option<_>>()?;
    (dims.len() > 2 && dims.last() == Some(&k)).then(|| (dims.clone(), dims[..dims.len() - 1].iter().product()))
}

/// The nodes of a Gemm rewrite, with their constants and the types of the values between them.
struct GemmRewrite {
    nodes: Vec<Node>,
    initializers: Vec<(String, Tensor)>,
    types: HashMap<String, TensorType>,
}

/// `gemm` as it is (A a matrix, `rows` none), or between the Reshapes of A (`rows`: its dims and
/// rows) to a matrix and of the product (`n` columns) back to A's leading dims.
fn as_matrix(
    view: &View<'_>,
    gemm: &mut Node,
    rows: Option<(Vec<usize>, usize)>,
    n: usize,
    taken: &mut HashSet<String>,
) -> Option<GemmRewrite> {
    let Some((dims, m)) = rows else {
        return Some(GemmRewrite { nodes: vec![gemm.clone()], initializers: vec![], types: HashMap::new() });
    };
    let dtype = view.dtype(&gemm.inputs[0])?;
    let k = *dims.last()?;
    let mut fresh = |base: String| {
        let name = fresh_name(view.graph, &base, taken);
        taken.insert(name.clone());
        name
    };
    let shape_of =
        |d: &[usize]| Tensor::from_vec(vec![d.len()], d.iter().map(|&x| x as i64).collect::<Vec<i64>>()).ok();
    let (a, y) = (gemm.inputs[0].clone(), gemm.outputs[0].clone());
    let (a2, y2) = (fresh(format!("{a}_matrix")), fresh(format!("{y}_matrix")));
    let (a_shape, y_shape) = (fresh(format!("{a}_matrix_shape")), fresh(format!("{y}_shape")));
    let mut out_dims = dims.clone();
    *out_dims.last_mut()? = n;
    let reshape = |name: String, x: String, shape: String, y: String| Node {
        name,
        op_type: "Reshape".into(),
        inputs: vec![x, shape],
        outputs: vec![y],
        ..Default::default()
    };
    let before = reshape(format!("{}_rows", gemm.name), a, a_shape.clone(), a2.clone());
    let after = reshape(format!("{}_back", gemm.name), y2.clone(), y_shape.clone(), y);
    gemm.inputs[0] = a2.clone();
    gemm.outputs[0] = y2.clone();
    let types = HashMap::from([(a2, TensorType::fixed(dtype, &[m, k])), (y2, TensorType::fixed(dtype, &[m, n]))]);
    Some(GemmRewrite {
        nodes: vec![before, gemm.clone(), after],
        initializers: vec![(a_shape, shape_of(&[m, k])?), (y_shape, shape_of(&out_dims)?)],
        types,
    })
}

/// The activation node `a` applies, as FusedGemm's `activation` and `activation_params`:
/// FusedConv's activations, and Gelu (exact, or `GeluTanh` for the tanh approximation).
fn gemm_activation_of(view: &View<'_>, a: usize) -> Option<(&'static str, Vec<f32>)> {
    super::conv::activation(view, a).or_else(|| super::gelu::gelu_kind(view, a).map(|name| (name, vec![])))
}

/// Gemm [→ Reshape] → activation → Onyx's FusedGemm, which applies the activation as it stores
/// the product (one dispatch fewer on a GPU). A Reshape between them (a Gemm on a sequence of
/// rows, see [`matmul_add_gemm`]) moves after the FusedGemm: the activation is elementwise.
pub(super) fn gemm_activation(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for g in 0..view.graph.nodes.len() {
        if view.op(g) != "Gemm" || changes.claimed(g) {
            continue;
        }
        let gemm = view.node(g);
        let y = gemm.outputs[0].as_str();
        let Some(first) = view.sole_reader(y).filter(|_| view.is_float(y)) else { continue };
        let reshape = (view.op(first) == "Reshape").then_some(first);
        let a = match reshape {
            Some(r) => match view.sole_reader(&view.node(r).outputs[0]) {
                Some(a) => a,
                None => continue,
            },
            None => first,
        };
        let Some((name, params)) = gemm_activation_of(view, a) else { continue };
        let activated = view.node(a).outputs[0].clone();
        let mut attributes = gemm.attributes.clone();
        attributes.push(Attribute { name: "activation".into(), value: AttrValue::String(name.as_bytes().to_vec()) });
        if !params.is_empty() {
            attributes.push(Attribute { name: "activation_params".into(), value: AttrValue::Floats(params) });
        }
        let fused = Node {
            name: gemm.name.clone(),
            op_type: "FusedGemm".into(),
            domain: ONYX_DOMAIN.into(),
            inputs: gemm.inputs.clone(),
            outputs: vec![if reshape.is_some() { y.to_string() } else { activated.clone() }],
            attributes,
            ..Default::default()
        };
        let mut pattern = vec![g, a];
        let mut nodes = vec![fused.clone()];
        if let Some(r) = reshape {
            pattern.insert(1, r);
            let mut moved = view.node(r).clone();
            moved.outputs = vec![activated];
            nodes.push(moved);
        }
        if fusion.allowed(view, g, &pattern, &fused, &HashMap::new()) {
            changes.add(Rewrite { remove: pattern, nodes, initializers: vec![] });
        }
    }
    Ok(changes)
}

/// What products must share to be packed into one: the op, the input (the value itself, or
/// the input and target of the Reshape that makes it), B's layout and K, the scalars, C.
#[derive(Clone, PartialEq)]
struct SiblingKey {
    op: String,
    source: String,
    trans_b: bool,
    k: usize,
    alpha: u32,
    beta: u32,
    has_c: bool,
}

/// Node `n` as one of several products of one input by constant weights: its key and N. A
/// Gemm without transA whose C (if any) is a constant vector of its columns, or a MatMul of an
/// input of rank 2 or more by a constant matrix; float, B and C of the input's dtype.
fn sibling(view: &View<'_>, n: usize) -> Option<(SiblingKey, usize)> {
    let node = view.node(n);
    let op = view.op(n);
    if !matches!(op, "Gemm" | "MatMul") || node.outputs.len() != 1 || !view.is_float(&node.outputs[0]) {
        return None;
    }
    let a = node.input(0)?;
    let dtype = view.dtype(a)?;
    let b = view.constant(node.input(1)?)?;
    let trans_b = op == "Gemm" && node.int_or("transB", 0).ok()? != 0;
    let (k, cols) = match (b.shape(), trans_b) {
        ([k, n], false) | ([n, k], true) => (*k, *n),
        _ => return None,
    };
    let has_c = op == "Gemm" && node.input(2).is_some();
    if has_c {
        let c = view.constant(node.input(2)?)?;
        if !matches!(c.shape(), [x] | [1, x] if *x == cols) || c.dtype() != dtype {
            return None;
        }
    }
    let ok = b.dtype() == dtype
        && match op {
            "Gemm" => node.int_or("transA", 0).ok()? == 0 && node.inputs.len() <= 3,
            _ => view.shape(a).is_some_and(|s| s.len() >= 2) && node.inputs.len() == 2,
        };
    if !ok {
        return None;
    }
    let source = match view.producer(a).filter(|&r| view.op(r) == "Reshape") {
        Some(r) => {
            let target = view.constant(view.node(r).input(1)?)?.view().ok()?.as_slice::<i64>().ok()?.to_vec();
            format!("{}|{target:?}", view.node(r).input(0)?)
        }
        None => a.to_string(),
    };
    let (alpha, beta) = (node.float_or("alpha", 1.0).ok()?, node.float_or("beta", 1.0).ok()?);
    let key = SiblingKey { op: op.into(), source, trans_b, k, alpha: alpha.to_bits(), beta: beta.to_bits(), has_c };
    Some((key, cols))
}

/// `parts` side by side along `axis` (0 or 1) of matrices (or along the only axis of vectors).
fn side_by_side(parts: &[&Tensor], axis: usize) -> Option<Tensor> {
    let first = parts.first()?;
    let width = first.dtype().bit_width() / 8;
    let mut bytes = Vec::new();
    let mut shape = first.shape().to_vec();
    let last = shape.len().checked_sub(1)?;
    shape[axis] = parts.iter().map(|p| p.shape()[axis]).sum();
    if axis == last {
        let rows: usize = first.shape()[..last].iter().product();
        for r in 0..rows {
            for p in parts {
                let row = p.shape()[last] * width;
                bytes.extend_from_slice(p.view().ok()?.bytes().ok()?.get(r * row..(r + 1) * row)?);
            }
        }
    } else {
        for p in parts {
            bytes.extend_from_slice(p.view().ok()?.bytes().ok()?);
        }
    }
    Tensor::from_bytes(first.dtype(), shape, crate::tensor::HostBuffer::from_vec(bytes)).ok()
}

/// Products of one input by constant weights (the q, k and v projections of attention, an MLP's
/// gate and up): one product by the weights side by side, then a Split into the products'
/// values. On a GPU that is one GEMM and one copy where there were several GEMMs (each with
/// its split-K pass at batch 1), and the wider product fills the GPU better. Not for products
/// the CPU provider runs: there the copy costs more than it saves (bert-base on 16 threads
/// ran 45 → 57 ms).
pub(super) fn sibling_products(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    let mut groups: Vec<(SiblingKey, Vec<(usize, usize)>)> = vec![];
    for n in 0..view.graph.nodes.len() {
        let Some((key, cols)) = sibling(view, n) else { continue };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push((n, cols)),
            None => groups.push((key, vec![(n, cols)])),
        }
    }
    let mut taken = HashSet::new();
    for (key, members) in groups.into_iter().filter(|(_, m)| m.len() >= 2) {
        if members.iter().any(|&(n, _)| changes.claimed(n)) {
            continue;
        }
        let Some(rewrite) = packed(view, &key, &members, &mut taken) else { continue };
        let nodes: Vec<usize> = members.iter().map(|m| m.0).collect();
        let extra: HashMap<String, Tensor> = rewrite.initializers.iter().cloned().collect();
        let on_cpu = view
            .placement(view.node(nodes[0]), &HashMap::new(), fusion.providers())
            .is_some_and(|p| fusion.providers()[p].device() == Device::Cpu);
        if on_cpu || !fusion.allowed(view, nodes[0], &nodes, &rewrite.nodes[0], &extra) {
            continue;
        }
        // The packed product goes where the first one was (before every reader of any of
        // them); the others just go.
        changes.add(Rewrite { remove: vec![nodes[0]], nodes: rewrite.nodes, initializers: rewrite.initializers });
        for &n in &nodes[1..] {
            changes.add(Rewrite { remove: vec![n], nodes: vec![], initializers: vec![] });
        }
    }
    Ok(changes)
}

/// The packed product of `members` (node, columns) and the Split of its value.
fn packed(
    view: &View<'_>,
    key: &SiblingKey,
    members: &[(usize, usize)],
    taken: &mut HashSet<String>,
) -> Option<GemmRewrite> {
    let first = view.node(members[0].0);
    let y_rank = view.shape(&first.outputs[0])?.len();
    let mut fresh = |base: String| {
        let name = fresh_name(view.graph, &base, taken);
        taken.insert(name.clone());
        name
    };
    let weights: Vec<&Tensor> =
        members.iter().map(|&(n, _)| view.constant(view.node(n).input(1)?)).collect::<Option<_>>()?;
    let b = side_by_side(&weights, if key.trans_b { 0 } else { 1 })?;
    let mut initializers = vec![(fresh(format!("{}_packed_weights", first.name)), b)];
    if key.has_c {
        let biases: Vec<Tensor> = members
            .iter()
            .map(|&(n, cols)| view.constant(view.node(n).input(2)?)?.reshaped(vec![cols]).ok())
            .collect::<Option<_>>()?;
        let refs: Vec<&Tensor> = biases.iter().collect();
        initializers.push((fresh(format!("{}_packed_bias", first.name)), side_by_side(&refs, 0)?));
    }
    let y = fresh(format!("{}_packed", first.outputs[0]));
    let mut product = first.clone();
    product.inputs =
        std::iter::once(first.inputs[0].clone()).chain(initializers.iter().map(|(n, _)| n.clone())).collect();
    product.outputs = vec![y.clone()];
    let sizes: Vec<i64> = members.iter().map(|&(_, cols)| i64::try_from(cols).ok()).collect::<Option<_>>()?;
    let axis = Attribute { name: "axis".into(), value: AttrValue::Int(i64::try_from(y_rank.checked_sub(1)?).ok()?) };
    let mut split = Node {
        name: fresh(format!("{}_split", first.name)),
        op_type: "Split".into(),
        inputs: vec![y],
        outputs: members.iter().map(|&(n, _)| view.node(n).outputs[0].clone()).collect(),
        attributes: vec![axis],
        ..Default::default()
    };
    if view.graph_opset() >= 13 {
        let name = fresh(format!("{}_split_sizes", first.name));
        split.inputs.push(name.clone());
        initializers.push((name, Tensor::from_vec(vec![sizes.len()], sizes).ok()?));
    } else {
        split.attributes.push(Attribute { name: "split".into(), value: AttrValue::Ints(sizes) });
    }
    Some(GemmRewrite { nodes: vec![product, split], initializers, types: HashMap::new() })
}

/// True when Transpose node `t` swaps the last two dimensions and keeps the others.
fn swaps_last_two(view: &View<'_>, t: usize) -> bool {
    let node = view.node(t);
    let rank = node.input(0).and_then(|x| view.shape(x)).map(<[Dim]>::len);
    match node.get_ints("perm").ok().flatten() {
        Some(p) => {
            let r = p.len();
            r >= 2
                && rank.is_none_or(|k| k == r)
                && p.iter().enumerate().all(|(i, &v)| {
                    let want = if i + 2 == r {
                        r - 1
                    } else if i + 1 == r {
                        r - 2
                    } else {
                        i
                    };
                    v == want as i64
                })
        }
        None => rank == Some(2),
    }
}

/// MatMul(Transpose(A)?, Transpose(B)?) [→ Mul/Div by a scalar constant] → FusedMatMul with
/// the transposes as transA/transB and the scale as alpha (at least one of them present).
pub(super) fn transpose_matmul(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for m in 0..view.graph.nodes.len() {
        if view.op(m) != "MatMul" || changes.claimed(m) {
            continue;
        }
        let mm = view.node(m);
        let y = mm.outputs[0].as_str();
        if mm.inputs.len() != 2 || y.is_empty() || !view.is_float(y) {
            continue;
        }
        let mut pattern = vec![m];
        let mut inputs = mm.inputs.clone();
        let mut trans = [0i64; 2];
        for i in 0..2 {
            let operand = &mm.inputs[i];
            let Some(t) = view.produced_by(operand, "Transpose") else { continue };
            if view.sole_reader(operand) == Some(m) && swaps_last_two(view, t) && !changes.claimed(t) {
                inputs[i] = view.node(t).inputs[0].clone();
                trans[i] = 1;
                pattern.push(t);
            }
        }
        let mut out = y.to_string();
        let mut alpha = 1.0f64;
        if let Some((s, scale)) = scale_after(view, y) {
            alpha = scale;
            pattern.push(s);
            out = view.node(s).outputs[0].clone();
        }
        if pattern.len() == 1 {
            continue;
        }
        let attr = |name: &str, value| Attribute { name: name.into(), value };
        let fused = Node {
            name: mm.name.clone(),
            op_type: "FusedMatMul".into(),
            domain: MS_DOMAIN.into(),
            inputs,
            outputs: vec![out],
            attributes: vec![
                attr("alpha", AttrValue::Float(alpha as f32)),
                attr("transA", AttrValue::Int(trans[0])),
                attr("transB", AttrValue::Int(trans[1])),
            ],
            ..Default::default()
        };
        if fusion.allowed(view, m, &pattern, &fused, &HashMap::new()) {
            changes.add(Rewrite { remove: pattern, nodes: vec![fused], initializers: vec![] });
        }
    }
    Ok(changes)
}

/// The node scaling `y` by a scalar constant (`Mul(y, c)`, `Mul(c, y)` or `Div(y, c)`), its
/// only reader, and the factor; only when the result keeps `y`'s shape.
pub(super) fn scale_after(view: &View<'_>, y: &str) -> Option<(usize, f64)> {
    let s = view.sole_reader(y)?;
    let node = view.node(s);
    if node.inputs.len() != 2 || !view.same_type(&node.outputs[0], y) {
        return None;
    }
    let factor = match view.op(s) {
        "Mul" => {
            let other = if node.inputs[0] == y { &node.inputs[1] } else { &node.inputs[0] };
            view.scalar(other)?
        }
        "Div" if node.inputs[0] == y => 1.0 / view.scalar(&node.inputs[1])?,
        _ => return None,
    };
    (factor.is_finite() && node.inputs[0] != node.inputs[1]).then_some((s, factor))
}
