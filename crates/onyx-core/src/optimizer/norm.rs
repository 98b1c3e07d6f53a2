//! Normalization fusions: the decomposed ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add
//! pattern → LayerNormalization (opset 17 and later), Add + LayerNormalization →
//! SkipLayerNormalization, and a bias Add before a SkipLayerNormalization folded into its `bias`
//! input (the Add after a MatMul in every transformer block), and Gemm → SkipLayerNormalization
//! → Onyx's GemmSkipLayerNormalization where a provider takes it.

use std::collections::{BTreeSet, HashMap};

use super::conv::only_first_output_used;
use super::view::View;
use super::{Changes, Fusion, Rewrite};
use crate::ir::{AttrValue, Attribute, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::types::Dim;
use crate::Result;

/// True when ReduceMean node `r` averages its input over the last axis only, keeping it.
fn mean_over_last_axis(view: &View<'_>, r: usize) -> bool {
    let node = view.node(r);
    let Some(rank) = node.input(0).and_then(|x| view.shape(x)).map(<[Dim]>::len) else {
        return false;
    };
    let axes: Option<Vec<i64>> = match node.get_ints("axes").ok().flatten() {
        Some(a) => Some(a.to_vec()),
        None => {
            node.input(1).and_then(|a| view.constant(a)).and_then(|t| t.as_slice::<i64>().ok().map(<[i64]>::to_vec))
        }
    };
    let last = rank as i64 - 1;
    rank >= 1
        && node.int_or("keepdims", 1).ok() == Some(1)
        && matches!(axes.as_deref(), Some([a]) if *a == -1 || *a == last)
}

/// The 1-D `[H]` shape of a gamma or beta for `x`, checked.
fn is_channel_vector(view: &View<'_>, v: &str, x: &str) -> bool {
    let h = view.shape(x).and_then(|s| s.last()).and_then(Dim::fixed);
    h.is_some_and(|h| view.shape(v) == Some(&[Dim::Fixed(h)][..])) && view.dtype(v) == view.dtype(x)
}

/// The only reader of `v` when it is a default-domain `op` node.
fn next(view: &View<'_>, v: &str, op: &str) -> Option<usize> {
    view.sole_reader(v).filter(|&n| view.op(n) == op)
}

/// Node `n`'s first output.
fn out<'g>(view: &View<'g>, n: usize) -> &'g str {
    view.node(n).outputs.first().map_or("", String::as_str)
}

/// The decomposed LayerNormalization over the last axis, as older exporters write it:
/// `d = x - ReduceMean(x)`, `y = d / Sqrt(ReduceMean(d²) + eps) * gamma (+ beta)`.
pub(super) fn layer_norm(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    if view.graph_opset() < 17 {
        return Ok(changes);
    }
    for r1 in 0..view.graph.nodes.len() {
        if view.op(r1) != "ReduceMean" || !mean_over_last_axis(view, r1) {
            continue;
        }
        let Some(found) = match_layer_norm(view, r1) else { continue };
        let (pattern, x, gamma, beta, eps, y) = found;
        let mut inputs = vec![x, gamma];
        inputs.extend(beta);
        let fused = Node {
            name: view.node(r1).name.clone(),
            op_type: "LayerNormalization".into(),
            inputs,
            outputs: vec![y],
            attributes: vec![
                Attribute { name: "axis".into(), value: AttrValue::Int(-1) },
                Attribute { name: "epsilon".into(), value: AttrValue::Float(eps) },
            ],
            ..Default::default()
        };
        if !pattern.iter().any(|&n| changes.claimed(n)) && fusion.allowed(view, r1, &pattern, &fused, &HashMap::new()) {
            changes.add(Rewrite { remove: pattern, nodes: vec![fused], initializers: vec![] });
        }
    }
    Ok(changes)
}

/// What a matched decomposed LayerNormalization is made of: its nodes, x, gamma, beta,
/// epsilon and the output.
type LayerNormMatch = (Vec<usize>, String, String, Option<String>, f32, String);

fn match_layer_norm(view: &View<'_>, r1: usize) -> Option<LayerNormMatch> {
    let x = view.node(r1).inputs[0].clone();
    if !view.is_float(&x) {
        return None;
    }
    let mean = out(view, r1);
    let sub = next(view, mean, "Sub")?;
    if view.node(sub).inputs != [x.clone(), mean.to_string()] {
        return None;
    }
    let d = out(view, sub);
    // d is read by the square and by the division, nothing else.
    let readers: BTreeSet<usize> = view.readers(d).iter().copied().collect();
    if readers.len() != 2 || view.is_output(d) {
        return None;
    }
    let square = *readers.iter().find(|&&n| {
        let node = view.node(n);
        match view.op(n) {
            "Pow" => node.inputs.len() == 2 && node.inputs[0] == d && view.is_scalar(&node.inputs[1], 2.0),
            "Mul" => node.inputs.len() == 2 && node.inputs[0] == d && node.inputs[1] == d,
            _ => false,
        }
    })?;
    let div = *readers.iter().find(|&&n| n != square)?;
    let r2 = next(view, out(view, square), "ReduceMean").filter(|&r| mean_over_last_axis(view, r))?;
    let add_eps = next(view, out(view, r2), "Add")?;
    let eps_node = view.node(add_eps);
    let eps_name = if eps_node.inputs[0] == out(view, r2) { eps_node.inputs.get(1)? } else { &eps_node.inputs[0] };
    let eps = view.scalar(eps_name).filter(|e| *e > 0.0 && e.is_finite())?;
    let sqrt = next(view, out(view, add_eps), "Sqrt")?;
    if view.op(div) != "Div" || view.node(div).inputs != [d.to_string(), out(view, sqrt).to_string()] {
        return None;
    }
    if view.sole_reader(out(view, sqrt)) != Some(div) {
        return None;
    }
    let mul = next(view, out(view, div), "Mul")?;
    let normed = out(view, div);
    let mul_node = view.node(mul);
    let gamma = if mul_node.inputs[0] == normed { mul_node.inputs.get(1)? } else { &mul_node.inputs[0] };
    if gamma == normed || !is_channel_vector(view, gamma, &x) {
        return None;
    }
    let mut pattern = vec![r1, sub, square, r2, add_eps, sqrt, div, mul];
    let mut y = out(view, mul).to_string();
    let mut beta = None;
    if let Some(a) = next(view, &y, "Add") {
        let add = view.node(a);
        let b = if add.inputs[0] == y { add.inputs.get(1)? } else { &add.inputs[0] };
        if *b != y && is_channel_vector(view, b, &x) {
            beta = Some(b.clone());
            pattern.push(a);
            y = out(view, a).to_string();
        }
    }
    Some((pattern, x, gamma.clone(), beta, eps as f32, y))
}

/// True when `skip` has `input`'s dims or broadcasts to them over leading dims only (the
/// contract of SkipLayerNormalization's `skip`).
fn skip_fits(skip: &[Dim], input: &[Dim]) -> bool {
    let first = skip.iter().position(|d| *d != Dim::Fixed(1)).unwrap_or(skip.len());
    !skip.is_empty()
        && skip.len() <= input.len()
        && skip.last() == input.last()
        && input.ends_with(&skip[first..])
        && !input.contains(&Dim::Unknown)
}

/// Add(x, bias) → SkipLayerNormalization(…) without a bias, where `bias` is a constant `[H]`
/// vector and `x` has the sum's type (so no broadcast is lost), on the SkipLayerNormalization's
/// input or skip: SkipLayerNormalization(x, skip, gamma, beta, bias).
pub(super) fn skip_layer_norm_bias(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for l in 0..view.graph.nodes.len() {
        let sln = view.node(l);
        if sln.op_type != "SkipLayerNormalization" || sln.domain != MS_DOMAIN {
            continue;
        }
        if sln.input(4).is_some_and(|b| !b.is_empty()) || sln.inputs.len() < 3 {
            continue;
        }
        for slot in 0..2 {
            let Some(sum) = sln.input(slot) else { continue };
            let Some(a) = view.produced_by(sum, "Add").filter(|_| view.sole_reader(sum) == Some(l)) else {
                continue;
            };
            let [p, q] = view.node(a).inputs.as_slice() else { continue };
            let is_bias = |b: &str| view.constant(b).is_some() && is_channel_vector(view, b, sum);
            let (x, bias) = if is_bias(q) && view.same_type(p, sum) {
                (p, q)
            } else if is_bias(p) && view.same_type(q, sum) {
                (q, p)
            } else {
                continue;
            };
            let mut fused = sln.clone();
            fused.inputs.resize(5, String::new());
            fused.inputs[slot] = x.clone();
            fused.inputs[4] = bias.clone();
            if !changes.claimed(a) && !changes.claimed(l) && fusion.allowed(view, l, &[a, l], &fused, &HashMap::new()) {
                changes.add(Rewrite { remove: vec![a, l], nodes: vec![fused], initializers: vec![] });
                break;
            }
        }
    }
    Ok(changes)
}

/// Add(a, b) → LayerNormalization(axis -1, gamma, beta) with only its first output used, one
/// operand of the sum's shape and the other the same or broadcast over leading dims:
/// SkipLayerNormalization(input, skip, gamma, beta).
pub(super) fn skip_layer_norm(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for l in 0..view.graph.nodes.len() {
        if view.op(l) != "LayerNormalization" {
            continue;
        }
        let ln = view.node(l);
        let Some(s) = ln.input(0) else { continue };
        let Some(rank) = view.shape(s).map(<[Dim]>::len) else { continue };
        let axis = ln.int_or("axis", -1).unwrap_or(0);
        if !(axis == -1 || axis == rank as i64 - 1) || ln.int_or("stash_type", 1).ok() != Some(1) {
            continue;
        }
        if !only_first_output_used(view, ln) || !view.is_float(s) {
            continue;
        }
        // The sum may have other readers (the next residual): the fused node makes it too (its
        // output 3), in the LayerNormalization's place, so they must come after it.
        let keep_sum = view.sole_reader(s) != Some(l) || view.is_output(s);
        if view.readers(s).iter().any(|&r| r < l) {
            continue;
        }
        let Some(a) = view.produced_by(s, "Add") else { continue };
        let add = view.node(a);
        let [p, q] = add.inputs.as_slice() else { continue };
        let fits = |input: &str, skip: &str| {
            view.same_type(input, s)
                && view.dtype(skip) == view.dtype(s)
                && view.shape(skip).zip(view.shape(s)).is_some_and(|(k, i)| skip_fits(k, i))
        };
        let (input, skip) = if fits(p, q) {
            (p, q)
        } else if fits(q, p) {
            (q, p)
        } else {
            continue;
        };
        let gamma = ln.input(1).filter(|g| is_channel_vector(view, g, s));
        let beta_ok = ln.input(2).is_none_or(|b| is_channel_vector(view, b, s));
        let (Some(gamma), true) = (gamma, beta_ok) else { continue };
        let mut inputs = vec![input.clone(), skip.clone(), gamma.to_string()];
        inputs.extend(ln.input(2).map(str::to_string));
        let epsilon = ln.float_or("epsilon", 1e-5).unwrap_or(1e-5);
        let fused = Node {
            name: ln.name.clone(),
            op_type: "SkipLayerNormalization".into(),
            domain: MS_DOMAIN.into(),
            inputs,
            outputs: if keep_sum {
                vec![ln.outputs[0].clone(), String::new(), String::new(), s.to_string()]
            } else {
                vec![ln.outputs[0].clone()]
            },
            attributes: vec![Attribute { name: "epsilon".into(), value: AttrValue::Float(epsilon) }],
            ..Default::default()
        };
        if !changes.claimed(a) && fusion.allowed(view, l, &[a, l], &fused, &HashMap::new()) {
            changes.add(Rewrite { remove: vec![a, l], nodes: vec![fused], initializers: vec![] });
        }
    }
    Ok(changes)
}

/// True when node `t` is a Transpose that moves only dims of size 1 (a reshape).
fn is_view_transpose(view: &View<'_>, t: usize) -> bool {
    let node = view.node(t);
    let (Some(x), Ok(Some(perm))) = (node.input(0).and_then(|x| view.fixed_shape(x)), node.get_ints("perm")) else {
        return false;
    };
    let Some(perm) = perm.iter().map(|&d| usize::try_from(d).ok().filter(|&d| d < x.len())).collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let mut seen = vec![false; x.len()];
    let permutation = perm.len() == x.len() && perm.iter().all(|&d| !std::mem::replace(&mut seen[d], true));
    let moved: Vec<usize> = perm.into_iter().filter(|&d| x[d] != 1).collect();
    permutation && moved.windows(2).all(|w| w[0] < w[1])
}

/// The Gemm whose output `value` is, read through Reshapes and Transposes of size-1 dims that
/// only the next node reads: (Gemm, the view nodes).
fn gemm_through_views(view: &View<'_>, value: &str) -> Option<(usize, Vec<usize>)> {
    let mut views = vec![];
    let mut v = value;
    loop {
        let p = view.producer(v).filter(|_| view.sole_reader(v).is_some())?;
        match view.op(p) {
            "Gemm" => return Some((p, views)),
            "Reshape" => {}
            "Transpose" if is_view_transpose(view, p) => {}
            _ => return None,
        }
        views.push(p);
        v = view.node(p).input(0)?;
    }
}

/// Gemm(A, B, C?) with alpha and beta 1, A not transposed and C absent or a `[N]` vector,
/// read (through views, see [`gemm_through_views`]) by a SkipLayerNormalization as its input or
/// skip, the other of the viewed product's shape, the statistics outputs unread, at most one of
/// C and the node's bias: Onyx's GemmSkipLayerNormalization(A, B, bias, skip, gamma, beta),
/// which normalizes the product's split-K partial sums as it reads them (no separate sum pass).
/// C becomes the node's bias, added with the skip after the product is rounded to its type
/// rather than inside the product: in f16 that rounding falls at another point of the sum, in
/// f32 only the order of the additions changes.
pub(super) fn gemm_skip_layer_norm(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for l in 0..view.graph.nodes.len() {
        let sln = view.node(l);
        if sln.op_type != "SkipLayerNormalization" || sln.domain != MS_DOMAIN {
            continue;
        }
        let unread =
            |o: Option<&String>| o.is_none_or(|o| o.is_empty() || (view.readers(o).is_empty() && !view.is_output(o)));
        if !unread(sln.outputs.get(1)) || !unread(sln.outputs.get(2)) || sln.input(2).is_none() {
            continue;
        }
        for slot in 0..2 {
            let (Some(v), Some(skip)) = (sln.input(slot), sln.input(1 - slot)) else { continue };
            let Some((g, views)) = gemm_through_views(view, v) else { continue };
            let Some(fused) = gemm_skip_node(view, g, sln, v, skip) else { continue };
            let mut pattern = views;
            pattern.extend([g, l]);
            if !pattern.iter().any(|&n| changes.claimed(n))
                && fusion.allowed(view, l, &pattern, &fused, &HashMap::new())
            {
                changes.add(Rewrite { remove: pattern, nodes: vec![fused], initializers: vec![] });
                break;
            }
        }
    }
    Ok(changes)
}

/// The number of elements of `dims`, if it fits.
fn element_count(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |c, &d| c.checked_mul(d))
}

/// The GemmSkipLayerNormalization node for Gemm `g` read as `value` by `sln`, with `skip`.
fn gemm_skip_node(view: &View<'_>, g: usize, sln: &Node, value: &str, skip: &str) -> Option<Node> {
    let gemm = view.node(g);
    let plain = gemm.float_or("alpha", 1.0).ok()? == 1.0 && gemm.int_or("transA", 0).ok()? == 0;
    let (a, b) = (gemm.input(0)?, gemm.input(1)?);
    let product = view.fixed_shape(gemm.outputs.first()?)?;
    let n = *product.last()?;
    let shape = view.fixed_shape(value)?;
    let fits = plain
        && product.len() == 2
        && shape.last() == Some(&n)
        && view.same_type(value, skip)
        && view.dtype(a) == view.dtype(value)
        && element_count(&shape).is_some_and(|c| Some(c) == element_count(&product));
    let c = gemm.input(2).filter(|c| !c.is_empty());
    let c_ok = c.is_none_or(|c| gemm.float_or("beta", 1.0).ok() == Some(1.0) && view.fixed_shape(c) == Some(vec![n]));
    let bias = match (c, sln.input(4).filter(|b| !b.is_empty())) {
        (Some(_), Some(_)) => return None,
        (c, b) => c.or(b).unwrap_or(""),
    };
    if !fits || !c_ok {
        return None;
    }
    let mut inputs = vec![a.to_string(), b.to_string(), bias.to_string(), skip.to_string(), sln.input(2)?.to_string()];
    inputs.extend(sln.input(3).filter(|b| !b.is_empty()).map(str::to_string));
    let mut outputs = vec![sln.outputs.first()?.clone()];
    outputs.extend(sln.outputs.get(3).filter(|o| !o.is_empty()).cloned());
    let attributes = vec![
        Attribute { name: "transB".into(), value: AttrValue::Int(gemm.int_or("transB", 0).ok()?) },
        Attribute { name: "epsilon".into(), value: AttrValue::Float(sln.float_or("epsilon", 1e-12).ok()?) },
    ];
    Some(Node {
        name: sln.name.clone(),
        op_type: "GemmSkipLayerNormalization".into(),
        domain: ONYX_DOMAIN.into(),
        inputs,
        outputs,
        attributes,
        ..Default::default()
    })
}
