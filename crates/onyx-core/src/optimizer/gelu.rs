//! Gelu fusions: the exact pattern x · 0.5 · (1 + erf(x / √2)) → Gelu, the tanh approximation
//! → FastGelu, and Add(bias) + Gelu → BiasGelu. The exporters' variants are matched: division
//! by √2 or multiplication by 1/√2, the 0.5 applied first, last, or to (1 + erf), and operands
//! of Add and Mul in either order.

use std::collections::HashMap;

use super::view::View;
use super::{Changes, Fusion, Rewrite};
use crate::ir::{Node, MS_DOMAIN};
use crate::types::Dim;
use crate::Result;

/// √2.
const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// √(2/π).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh approximation.
const CUBIC: f64 = 0.044_715;

/// The input of binary node `n` that is not `v` (`None` if `v` is not an input, or both are `v`).
fn other<'a>(node: &'a Node, v: &str) -> Option<&'a str> {
    match node.inputs.as_slice() {
        [a, b] if a == v && b != v => Some(b),
        [a, b] if b == v && a != v => Some(a),
        _ => None,
    }
}

/// Node `n`'s only output.
fn out<'g>(view: &View<'g>, n: usize) -> &'g str {
    view.node(n).outputs.first().map_or("", String::as_str)
}

/// A `Mul` that reads `v` (its only reader) and scales it by the constant `c`.
fn mul_by(view: &View<'_>, v: &str, c: f64) -> Option<usize> {
    let r = view.sole_reader(v)?;
    (view.op(r) == "Mul" && other(view.node(r), v).is_some_and(|o| view.is_scalar(o, c))).then_some(r)
}

/// The end of both Gelu patterns, from `one_plus` = 1 + erf(…) or 1 + tanh(…): the nodes that
/// make `0.5 · x · one_plus`, and the value they produce.
fn half_x_times(view: &View<'_>, x: &str, one_plus: &str) -> Option<(Vec<usize>, String)> {
    let r = view.sole_reader(one_plus)?;
    if view.op(r) != "Mul" {
        return None;
    }
    let o = other(view.node(r), one_plus)?;
    if o == x {
        // (x · one_plus) · 0.5
        let h = mul_by(view, out(view, r), 0.5)?;
        return Some((vec![r, h], out(view, h).to_string()));
    }
    if view.is_scalar(o, 0.5) {
        // x · (one_plus · 0.5)
        let m = view.sole_reader(out(view, r))?;
        return (view.op(m) == "Mul" && other(view.node(m), out(view, r)) == Some(x))
            .then(|| (vec![r, m], out(view, m).to_string()));
    }
    // (x · 0.5) · one_plus
    let h = view.produced_by(o, "Mul")?;
    let half_of_x = other(view.node(h), x).is_some_and(|c| view.is_scalar(c, 0.5));
    (half_of_x && view.sole_reader(o) == Some(r)).then(|| (vec![h, r], out(view, r).to_string()))
}

/// The `Add(v, 1)` reading `v`, and its output.
fn plus_one(view: &View<'_>, v: &str) -> Option<(usize, String)> {
    let a = view.sole_reader(v)?;
    (view.op(a) == "Add" && other(view.node(a), v).is_some_and(|o| view.is_scalar(o, 1.0)))
        .then(|| (a, out(view, a).to_string()))
}

/// The Gelu node for this model: ONNX Gelu from opset 20, else the contrib one.
fn gelu_node(view: &View<'_>, name: &str, x: &str, y: &str) -> Node {
    let domain = if view.graph_opset() >= 20 { "" } else { MS_DOMAIN };
    Node {
        name: name.to_string(),
        op_type: "Gelu".into(),
        domain: domain.into(),
        inputs: vec![x.to_string()],
        outputs: vec![y.to_string()],
        ..Default::default()
    }
}

/// Adds the rewrite replacing `pattern` (anchored at `anchor`) by `fused`, if allowed.
fn propose(
    view: &View<'_>,
    fusion: &Fusion<'_>,
    changes: &mut Changes,
    anchor: usize,
    pattern: Vec<usize>,
    fused: Node,
) {
    if pattern.iter().any(|&n| changes.claimed(n)) {
        return;
    }
    if fusion.allowed(view, anchor, &pattern, &fused, &HashMap::new()) {
        changes.add(Rewrite { remove: pattern, nodes: vec![fused], initializers: vec![] });
    }
}

/// Div(x, √2) or Mul(x, 1/√2) → Erf → Add(1) → (the three forms of 0.5 · x · ·) → Gelu(x).
pub(super) fn gelu(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for e in 0..view.graph.nodes.len() {
        if view.op(e) != "Erf" {
            continue;
        }
        let Some(u) = view.node(e).input(0) else { continue };
        let Some(p) = view.producer(u).filter(|_| view.sole_reader(u) == Some(e)) else { continue };
        let scaled = view.node(p);
        let x = match view.op(p) {
            "Div" if scaled.inputs.len() == 2 && view.is_scalar(&scaled.inputs[1], SQRT_2) => scaled.inputs[0].as_str(),
            "Mul" => match scaled.inputs.as_slice() {
                [a, b] if view.is_scalar(b, 1.0 / SQRT_2) => a.as_str(),
                [a, b] if view.is_scalar(a, 1.0 / SQRT_2) => b.as_str(),
                _ => continue,
            },
            _ => continue,
        };
        if !view.is_float(x) {
            continue;
        }
        let Some((a, one_plus)) = plus_one(view, out(view, e)) else { continue };
        let Some((tail, y)) = half_x_times(view, x, &one_plus) else { continue };
        let mut pattern = vec![p, e, a];
        pattern.extend(tail);
        let fused = gelu_node(view, &view.node(e).name, x, &y);
        propose(view, fusion, &mut changes, e, pattern, fused);
    }
    Ok(changes)
}

/// The `x` of `x³` computed by `v`'s producer (`Pow(x, 3)`, `Mul(x, Mul(x, x))` in any order),
/// with the nodes that compute it; each intermediate read only inside the pattern.
fn cube_of(view: &View<'_>, v: &str) -> Option<(String, Vec<usize>)> {
    let p = view.producer(v)?;
    let node = view.node(p);
    match (view.op(p), node.inputs.as_slice()) {
        ("Pow", [x, e]) if view.is_scalar(e, 3.0) => Some((x.clone(), vec![p])),
        ("Mul", [a, b]) => {
            for (x, sq) in [(a, b), (b, a)] {
                let Some(s) = view.produced_by(sq, "Mul") else { continue };
                let sn = view.node(s);
                if sn.inputs.len() == 2 && sn.inputs[0] == *x && sn.inputs[1] == *x && view.sole_reader(sq) == Some(p) {
                    return Some((x.clone(), vec![s, p]));
                }
            }
            None
        }
        _ => None,
    }
}

/// 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))) → FastGelu(x).
pub(super) fn fast_gelu(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for t in 0..view.graph.nodes.len() {
        if view.op(t) != "Tanh" {
            continue;
        }
        let Some(u) = view.node(t).input(0) else { continue };
        // u = √(2/π) · inner
        let Some(m) = view.produced_by(u, "Mul").filter(|_| view.sole_reader(u) == Some(t)) else { continue };
        let inner = match view.node(m).inputs.as_slice() {
            [a, b] if view.is_scalar(b, SQRT_2_OVER_PI) => a.clone(),
            [a, b] if view.is_scalar(a, SQRT_2_OVER_PI) => b.clone(),
            _ => continue,
        };
        // inner = x + 0.044715 · x³
        let Some(s) = view.produced_by(&inner, "Add").filter(|_| view.sole_reader(&inner) == Some(m)) else { continue };
        let mut found = None;
        for (x, scaled) in [(0, 1), (1, 0)].map(|(i, j)| (&view.node(s).inputs[i], &view.node(s).inputs[j])) {
            let Some(c) = view.produced_by(scaled, "Mul").filter(|_| view.sole_reader(scaled) == Some(s)) else {
                continue;
            };
            let cube = match view.node(c).inputs.as_slice() {
                [a, b] if view.is_scalar(b, CUBIC) => a,
                [a, b] if view.is_scalar(a, CUBIC) => b,
                _ => continue,
            };
            if view.sole_reader(cube) != Some(c) {
                continue;
            }
            if let Some((cx, nodes)) = cube_of(view, cube).filter(|(cx, _)| cx == x) {
                found = Some((cx, nodes, c));
                break;
            }
        }
        let Some((x, cube_nodes, c)) = found else { continue };
        if view.node(s).inputs.len() != 2 || !view.is_float(&x) {
            continue;
        }
        let Some((a, one_plus)) = plus_one(view, out(view, t)) else { continue };
        let Some((tail, y)) = half_x_times(view, &x, &one_plus) else { continue };
        let mut pattern = cube_nodes;
        pattern.extend([c, s, m, t, a]);
        pattern.extend(tail);
        let fused = Node {
            name: view.node(t).name.clone(),
            op_type: "FastGelu".into(),
            domain: MS_DOMAIN.into(),
            inputs: vec![x],
            outputs: vec![y],
            ..Default::default()
        };
        propose(view, fusion, &mut changes, t, pattern, fused);
    }
    Ok(changes)
}

/// The activation name FusedGemm gives Gelu node `g`: `Gelu` (exact) or `GeluTanh` (ONNX
/// Gelu with the tanh approximation, or contrib FastGelu without a bias).
pub(super) fn gelu_kind(view: &View<'_>, g: usize) -> Option<&'static str> {
    let node = view.node(g);
    if is_exact_gelu(view, g) {
        return Some("Gelu");
    }
    let tanh = match node.domain.as_str() {
        "" | "ai.onnx" => node.op_type == "Gelu" && node.string_or("approximate", "none").is_ok_and(|a| a == "tanh"),
        d => d == MS_DOMAIN && node.op_type == "FastGelu" && node.inputs.iter().filter(|i| !i.is_empty()).count() == 1,
    };
    tanh.then_some("GeluTanh")
}

/// True when node `g` is an exact Gelu (ONNX Gelu without approximation, or contrib Gelu).
fn is_exact_gelu(view: &View<'_>, g: usize) -> bool {
    let node = view.node(g);
    match node.domain.as_str() {
        "" | "ai.onnx" => node.op_type == "Gelu" && node.string_or("approximate", "none").is_ok_and(|a| a == "none"),
        d => d == MS_DOMAIN && node.op_type == "Gelu",
    }
}

/// Add(x, bias) → Gelu with bias 1-D of x's last dimension (and the sum of x's shape) →
/// BiasGelu(x, bias).
pub(super) fn bias_gelu(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    for g in 0..view.graph.nodes.len() {
        if !is_exact_gelu(view, g) {
            continue;
        }
        let Some(v) = view.node(g).input(0) else { continue };
        let Some(a) = view.produced_by(v, "Add").filter(|_| view.sole_reader(v) == Some(g)) else { continue };
        let add = view.node(a);
        if add.inputs.len() != 2 {
            continue;
        }
        let is_bias_of = |bias: &str, x: &str| -> bool {
            let last = view.shape(x).and_then(|s| s.last()).and_then(Dim::fixed);
            let b = view.shape(bias);
            last.is_some() && b == Some(&[Dim::Fixed(last.unwrap_or(0))][..]) && view.same_type(x, v)
        };
        let (x, bias) = if is_bias_of(&add.inputs[1], &add.inputs[0]) {
            (&add.inputs[0], &add.inputs[1])
        } else if is_bias_of(&add.inputs[0], &add.inputs[1]) {
            (&add.inputs[1], &add.inputs[0])
        } else {
            continue;
        };
        if !view.is_float(x) || view.dtype(x) != view.dtype(bias) {
            continue;
        }
        let fused = Node {
            name: view.node(g).name.clone(),
            op_type: "BiasGelu".into(),
            domain: MS_DOMAIN.into(),
            inputs: vec![x.clone(), bias.clone()],
            outputs: vec![out(view, g).to_string()],
            ..Default::default()
        };
        propose(view, fusion, &mut changes, g, vec![a, g], fused);
    }
    Ok(changes)
}
