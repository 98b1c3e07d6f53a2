//! Multi-head attention as exporters spell it (BERT-style encoders):
//!
//! ```text
//! Q/K/V [B,S,H] ─Reshape/Transpose─▶ q [B,N,S,D], kᵀ [B,N,D,T], v [B,N,T,D]
//! scores = scale · q kᵀ   (MatMul with Div/Mul by a constant after it or on q and kᵀ before
//!                          it, or FusedMatMul with alpha)
//! probs  = Softmax(scores (+ mask), last axis)   (then NaN → 0, as torch's SDPA export does)
//! Y      = Reshape(Transpose(probs v), [B,S,H])
//! ```
//!
//! becomes one Attention node (opset 23's contract, 3-D inputs, `q_num_heads = kv_num_heads =
//! N`, the scale explicit, the additive mask as `attn_mask`; a fully masked row gives zeros as
//! the NaN → 0 step does): the default-domain op when the model imports opset 23 or later, else
//! the same op in Onyx's domain ([`ONYX_DOMAIN`]). The Shape / Gather / Concat nodes that
//! computed the Reshape shapes die with it (dead-node pass). Where q, k and v are one value's
//! columns side by side (a packed projection, or the Split of projections packed into one
//! product) and the provider takes it, the node is Onyx's PackedAttention instead, which reads
//! them in place: no Split.

use std::collections::{HashMap, HashSet};

mod indices;
mod inputs;

use super::matmul::scale_after;
use super::view::View;
use super::{fresh_name, Changes, Fusion, Rewrite};
use crate::ir::{AttrValue, Attribute, Graph, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::types::{Dim, TensorType};
use crate::{Result, Tensor};
use indices::{broadcast, gather, normalized_axis, split_indices, transpose};
use inputs::Added;

/// The transpose that merges the heads back (`[B,N,S,D]` → `[B,S,N,D]`).
const HEADS_LAST: [i64; 4] = [0, 2, 1, 3];

/// Node `n`'s first output.
fn out<'g>(view: &View<'g>, n: usize) -> &'g str {
    view.node(n).outputs.first().map_or("", String::as_str)
}

/// Heads split off a rank-3 `[B,S,H]` value: `[B,N,S,D]` (or `[B,N,D,S]`, transposed, for
/// Kᵀ), made by a chain of layout nodes. The value may be a column range of a wider one:
/// `[B,S,W]` rows (or any shape with those rows in order, as seq-first `[S,1,W]`) holding the
/// packed projections of q, k and v side by side, which the chain takes apart with Gather.
#[derive(Clone)]
struct Heads {
    /// The chain's nodes that nothing else reads (the fusion removes them).
    owned: Vec<usize>,
    /// The value the chain starts from.
    x: String,
    heads: usize,
    head_size: usize,
    /// B and S.
    lead: [Dim; 2],
    /// When `x` is not `[B,S,H]` itself: its row width W (fixed shapes) and the first column of
    /// these heads.
    packed: Option<(usize, usize)>,
}

impl Heads {
    fn hidden(&self) -> usize {
        self.heads * self.head_size
    }
}

/// True for a node the layout chains of [`layout_chain`] may hold: it only moves or selects
/// elements (Gather by constant indices).
fn is_layout(view: &View<'_>, n: usize) -> bool {
    match view.op(n) {
        "Reshape" | "Transpose" | "Squeeze" | "Unsqueeze" => true,
        "Gather" => view.node(n).input(1).is_some_and(|i| gather_indices(view, i).is_some()),
        _ => false,
    }
}

/// The constant indices of a Gather.
fn gather_indices(view: &View<'_>, value: &str) -> Option<Vec<i64>> {
    let t = view.constant(value)?;
    match (t.as_slice::<i64>(), t.as_slice::<i32>()) {
        (Ok(v), _) => Some(v.to_vec()),
        (_, Ok(v)) => Some(v.iter().map(|&i| i64::from(i)).collect()),
        _ => None,
    }
}

/// The chain of layout nodes producing `v` down to the first value something else makes:
/// (nodes, top first; how many of the first are read only by the chain; that value).
fn layout_chain<'g>(view: &View<'g>, v: &'g str) -> Option<(Vec<usize>, usize, &'g str)> {
    let mut nodes: Vec<usize> = vec![];
    let mut owned = 0;
    let mut cur = v;
    while let Some(p) = view.producer(cur).filter(|&p| is_layout(view, p)) {
        if nodes.len() == 12 {
            return None;
        }
        if owned == nodes.len() && nodes.last().is_none_or(|&last| view.sole_reader(cur) == Some(last)) {
            owned += 1;
        }
        nodes.push(p);
        cur = view.node(p).input(0)?;
    }
    Some((nodes, owned, cur))
}

/// Fixed dims, or `None`.
fn fixed(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter().map(Dim::fixed).collect()
}

/// Applies the chain (bottom first) to the element indices of its input of shape `input`: for
/// each output element, the index of the input element it holds.
fn evaluate_chain(view: &View<'_>, nodes: &[usize], input: &[usize]) -> Option<Vec<u32>> {
    let count: usize = input.iter().product();
    if count > 1 << 22 {
        return None;
    }
    let mut data: Vec<u32> = (0..count as u32).collect();
    let mut shape = input.to_vec();
    for &n in nodes.iter().rev() {
        let next = view.fixed_shape(out(view, n))?;
        let node = view.node(n);
        match view.op(n) {
            "Transpose" => {
                let perm: Vec<usize> = match node.get_ints("perm").ok()? {
                    Some(p) => p.iter().map(|&a| usize::try_from(a).ok()).collect::<Option<_>>()?,
                    None => (0..shape.len()).rev().collect(),
                };
                data = transpose(&data, &shape, &perm)?;
            }
            "Gather" => {
                let axis = normalized_axis(node.int_or("axis", 0).ok()?, shape.len())?;
                data = gather(&data, &shape, axis, &gather_indices(view, node.input(1)?)?)?;
            }
            _ => {}
        }
        if next.iter().product::<usize>() != data.len() {
            return None;
        }
        shape = next;
    }
    Some(data)
}

/// The heads of `v` (`transposed`: laid out `[B,N,D,S]`), when the chain below it splits the
/// heads of a rank-3 value or of a column range of packed rows. With fixed shapes any chain is
/// accepted that evaluates to the split on element indices; otherwise only Reshape to
/// `[B,S,N,D]` + Transpose of a `[B,S,H]` value.
fn split_heads(view: &View<'_>, v: &str, transposed: bool) -> Option<Heads> {
    let (nodes, owned, x) = layout_chain(view, v)?;
    let [b, n, p, q] = view.shape(v)? else { return None };
    let (n, d) = (n.fixed()?, if transposed { p } else { q }.fixed()?);
    let s = if transposed { q } else { p };
    if nodes.is_empty() || !view.is_float(x) || view.sole_reader(v).is_none() {
        return None;
    }
    let mut heads = Heads {
        owned: nodes[..owned].to_vec(),
        x: x.to_string(),
        heads: n,
        head_size: d,
        lead: [b.clone(), s.clone()],
        packed: None,
    };
    if let (Some(input), Some(b), Some(s)) = (fixed(view.shape(x)?), b.fixed(), s.fixed()) {
        let w = *input.last()?;
        let got = evaluate_chain(view, &nodes, &input)?;
        let base = *got.first()? as usize;
        if input.iter().product::<usize>() != b * s * w || base + n * d > w {
            return None;
        }
        if w != n * d || input != [b, s, w] {
            heads.packed = Some((w, base));
        }
        return (got == split_indices([b, s], n, d, [w, base], transposed)).then_some(heads);
    }
    let [_, _, h] = view.shape(x)? else { return None };
    let perm: &[i64] = if transposed { &[0, 2, 3, 1] } else { &[0, 2, 1, 3] };
    let [t, r] = nodes[..] else { return None };
    let reshaped = view.shape(out(view, r))?;
    heads.lead = [view.shape(x)?[0].clone(), view.shape(x)?[1].clone()];
    let ok = owned == 2
        && h.fixed() == Some(n * d)
        && view.op(t) == "Transpose"
        && view.op(r) == "Reshape"
        && view.node(t).get_ints("perm").ok().flatten() == Some(perm)
        && reshaped.len() == 4
        && reshaped[2] == Dim::Fixed(n)
        && reshaped[3] == Dim::Fixed(d);
    ok.then_some(heads)
}

/// `v`, or the other input of the Mul by a scalar constant that makes `v` (read once):
/// (value, the Mul if any, factor).
fn unscaled(view: &View<'_>, v: &str) -> (String, Vec<usize>, f64) {
    if let Some(m) = view.produced_by(v, "Mul").filter(|_| view.sole_reader(v).is_some()) {
        if let [a, b] = view.node(m).inputs.as_slice() {
            for (x, c) in [(a, b), (b, a)] {
                let factor = view.scalar(c).filter(|f| f.is_finite());
                if let (Some(f), true) = (factor, view.sole_reader(x) == Some(m)) {
                    return (x.clone(), vec![m], f);
                }
            }
        }
    }
    (v.to_string(), vec![], 1.0)
}

/// The scaled product of q and kᵀ producing the scores.
struct Product {
    nodes: Vec<usize>,
    q: String,
    /// The second operand: kᵀ, or k itself when the product transposes it (FusedMatMul's
    /// transB, as ONNX Runtime's fusion leaves `q @ k.transpose(-2, -1)`).
    k: String,
    k_transposed: bool,
    scale: f64,
}

/// The scaled product producing `scores`.
fn scaled_product(view: &View<'_>, scores: &str) -> Option<Product> {
    let p = view.producer(scores)?;
    let node = view.node(p);
    // MatMul or FusedMatMul (no transpose but B's last two dims), then a Mul/Div by a constant
    // (or none).
    let (m, mut scale, k_transposed) = if node.domain == MS_DOMAIN && node.op_type == "FusedMatMul" {
        let plain = ["transA", "transBatchA", "transBatchB"].iter().all(|a| node.int_or(a, 0).ok() == Some(0));
        let trans_b = node.int_or("transB", 0).ok()?;
        let alpha = node.float_or("alpha", 1.0).ok()? as f64;
        (plain && matches!(trans_b, 0 | 1)).then_some((p, alpha, trans_b == 0))?
    } else {
        match view.op(p) {
            "MatMul" => (p, 1.0, true),
            "Mul" | "Div" => {
                let m = node.inputs.iter().find_map(|i| view.produced_by(i, "MatMul"))?;
                let (s, scale) = scale_after(view, out(view, m))?;
                (s == p).then_some((m, scale, true))?
            }
            _ => return None,
        }
    };
    let mm = view.node(m);
    let mut nodes = if m == p { vec![m] } else { vec![m, p] };
    // Factors on the operands (torch's SDPA export scales q and kᵀ by √scale each).
    let (q, qn, qf) = unscaled(view, mm.input(0)?);
    let (k, kn, kf) = unscaled(view, mm.input(1)?);
    nodes.extend(qn.into_iter().chain(kn));
    scale *= qf * kf;
    Some(Product { nodes, q, k, k_transposed, scale })
}

/// Most elements of a mask the optimizer sums (4 Mi: 16 MiB in f32).
const MAX_MASK: usize = 1 << 22;

/// The logits as the scores plus constants added through Reshapes of them, as Swin adds its
/// relative position bias and then, through a 5-D view, its shifted-window mask: (the scores,
/// the chain's nodes, the constants' sum as one mask of the logits' shape). Each value of the
/// chain is read only by the next node; Reshapes move no element, so every value's elements
/// are the logits' in the same order.
fn constant_mask_chain(view: &View<'_>, logits: &str) -> Option<(String, Vec<usize>, Tensor)> {
    let shape = view.fixed_shape(logits)?;
    let count: usize = shape.iter().product();
    if count > MAX_MASK {
        return None;
    }
    let mut sum = vec![0.0; count];
    let mut nodes: Vec<usize> = vec![];
    let mut cur = logits.to_string();
    while nodes.is_empty() || scaled_product(view, &cur).is_none() {
        let p = view.producer(&cur)?;
        if nodes.len() == 8 || nodes.last().is_some_and(|&last| view.sole_reader(&cur) != Some(last)) {
            return None;
        }
        let node = view.node(p);
        cur = match view.op(p) {
            "Reshape" => node.input(0)?.to_string(),
            "Add" => {
                let out_shape = view.fixed_shape(out(view, p))?;
                let [x, y] = node.inputs.as_slice() else { return None };
                let (x, c) = if view.constant(y).is_some() { (x, view.constant(y)?) } else { (y, view.constant(x)?) };
                if view.fixed_shape(x)? != out_shape {
                    return None;
                }
                let values = broadcast(&super::view::to_f64s(c)?, c.shape(), &out_shape)?;
                sum.iter_mut().zip(values).for_each(|(s, v)| *s += v);
                x.clone()
            }
            _ => return None,
        };
        nodes.push(p);
    }
    let adds = nodes.iter().filter(|&&n| view.op(n) == "Add").count();
    if adds == 0 || view.fixed_shape(&cur)? != shape {
        return None;
    }
    Some((cur, nodes, super::view::from_f64s(view.dtype(logits)?, shape, sum)?))
}

/// Softmax over the last axis of a rank-4 value.
fn is_last_axis_softmax(view: &View<'_>, s: usize) -> bool {
    let node = view.node(s);
    let axis = node.int_or("axis", -1).unwrap_or(0);
    view.op(s) == "Softmax"
        && view.graph_opset() >= 13
        && node.input(0).and_then(|x| view.shape(x)).is_some_and(|sh| sh.len() == 4)
        && (axis == -1 || axis == 3)
}

/// The attention probabilities after Softmax `s`: its output, or `Where(IsNaN(p), 0, p)` on it
/// (read by nothing else): (value, the IsNaN and Where nodes).
fn probabilities<'g>(view: &View<'g>, s: usize) -> Option<(&'g str, Vec<usize>)> {
    let p = out(view, s);
    if view.sole_reader(p).is_some() {
        return Some((p, vec![]));
    }
    let [a, b] = view.readers(p) else { return None };
    let (i, w) = if view.op(*a) == "IsNaN" { (*a, *b) } else { (*b, *a) };
    let where_node = view.node(w);
    let nan = out(view, i);
    let ok = view.op(i) == "IsNaN"
        && view.op(w) == "Where"
        && !view.is_output(p)
        && view.sole_reader(nan) == Some(w)
        && where_node.inputs.len() == 3
        && where_node.inputs[0] == nan
        && view.is_scalar(&where_node.inputs[1], 0.0)
        && where_node.inputs[2] == p;
    ok.then(|| (out(view, w), vec![i, w]))
}

/// Finds every attention block and proposes its fused node.
pub(super) fn attention(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let mut changes = Changes::default();
    let mut names = Names { graph: view.graph, taken: HashSet::new() };
    for s in 0..view.graph.nodes.len() {
        if !is_last_axis_softmax(view, s) {
            continue;
        }
        // The packed form first (q, k and v read in place from their projection) where the
        // provider takes it, else Attention on separate inputs.
        for packed in [true, false] {
            let Some(block) = match_block(view, s, &mut names, packed) else { continue };
            let Block { pattern, nodes, initializers, types, shapes } = block;
            let free = pattern.iter().chain(shapes.iter().map(|(n, _)| n)).all(|&n| !changes.claimed(n));
            let fused = nodes.iter().find(|n| n.op_type == "Attention" || n.op_type == "PackedAttention");
            let constants: HashMap<String, Tensor> = initializers.iter().cloned().collect();
            if free && fused.is_some_and(|f| fusion.allowed_typed(view, s, &pattern, f, &constants, &types)) {
                changes.add(Rewrite { remove: pattern, nodes, initializers });
                for (n, shape) in shapes {
                    changes.add(Rewrite { remove: vec![n], nodes: vec![shape], initializers: vec![] });
                }
                break;
            }
        }
    }
    Ok(changes)
}

/// One attention block's rewrite.
struct Block {
    pattern: Vec<usize>,
    /// What replaces it: the inputs' preparation (Reshape, Slice) where q, k or v are packed,
    /// the Attention node, and a Reshape of its output where the block's output has another shape.
    nodes: Vec<Node>,
    initializers: Vec<(String, Tensor)>,
    /// The types of the values the new nodes make.
    types: HashMap<String, TensorType>,
    /// Shape nodes to re-point (see [`shape_readers`]).
    shapes: Vec<(usize, Node)>,
}

/// Names for the values and constants a pass adds.
struct Names<'g> {
    graph: &'g Graph,
    taken: HashSet<String>,
}

impl Names<'_> {
    fn fresh(&mut self, base: &str) -> String {
        let name = fresh_name(self.graph, base, &self.taken);
        self.taken.insert(name.clone());
        name
    }
}

/// Shape nodes reading the merged heads `merged` (`[B,S,N,D]`) besides the final Reshape, as
/// exporters emit to compute that Reshape's target: each is re-pointed at `x` (`[B,S,H]`, made
/// before the block) when only dims 0 and 1 of it are read (Gather of index 0 or 1) and `x` has
/// the same (known) dims there. `None` when another kind of reader exists.
fn shape_readers(view: &View<'_>, merged: &str, reshape: usize, x: &str) -> Option<Vec<(usize, Node)>> {
    let (ms, xs) = (view.shape(merged)?, view.shape(x)?);
    let same_lead = ms.len() == 4 && xs.len() == 3 && ms[..2] == xs[..2] && ms[..2].iter().all(|d| *d != Dim::Unknown);
    let mut shapes = vec![];
    for &r in view.readers(merged).iter().filter(|&&r| r != reshape) {
        let node = view.node(r);
        let leading_only = |&g: &usize| {
            let gather = view.node(g);
            let index = gather.input(1).and_then(|i| view.constant(i));
            let leading = |i: i64| matches!(i, 0 | 1 | -4 | -3);
            let index_ok = index.is_some_and(|t| match (t.as_slice::<i64>(), t.as_slice::<i32>()) {
                (Ok(v), _) => v.iter().all(|&i| leading(i)),
                (_, Ok(v)) => v.iter().all(|&i| leading(i64::from(i))),
                _ => false,
            });
            view.op(g) == "Gather" && gather.int_or("axis", 0).ok() == Some(0) && index_ok
        };
        let ok = same_lead
            && view.op(r) == "Shape"
            && node.attributes.is_empty()
            && !view.is_output(out(view, r))
            && view.readers(out(view, r)).iter().all(leading_only);
        if !ok {
            return None;
        }
        shapes.push((r, Node { inputs: vec![x.to_string()], ..node.clone() }));
    }
    Some(shapes)
}

/// True when Transpose `t` of the heads' product (`[B,N,S,D]`) merges the heads back
/// (`[B,S,N,D]`): perm `[0,2,1,3]`, or with fixed shapes any perm moving the elements as it does
/// (one that also moves size-1 dims).
fn merges_heads(view: &View<'_>, t: usize) -> bool {
    let node = view.node(t);
    let Some(perm) = node.get_ints("perm").ok().flatten() else { return false };
    if perm == HEADS_LAST {
        return true;
    }
    let shape = node.input(0).and_then(|x| view.shape(x)).and_then(fixed);
    let Some(shape) = shape.filter(|s| s.len() == 4 && s.iter().product::<usize>() <= 1 << 22) else { return false };
    let Some(perm) = perm.iter().map(|&a| usize::try_from(a).ok()).collect::<Option<Vec<_>>>() else { return false };
    let iota: Vec<u32> = (0..shape.iter().product::<usize>() as u32).collect();
    let merged = transpose(&iota, &shape, &[0, 2, 1, 3]);
    merged.is_some() && transpose(&iota, &shape, &perm) == merged
}

/// The block around Softmax `s` and its rewrite.
fn match_block(view: &View<'_>, s: usize, names: &mut Names<'_>, packed: bool) -> Option<Block> {
    let mut pattern = vec![s];
    let logits = view.node(s).input(0)?;
    view.sole_reader(logits)?;
    // An additive mask: Add(scores, mask) in either order, or constants added through reshaped
    // views of the scores (summed into one new constant).
    let mut mask_constant = None;
    let (scores, mask) = match view.producer(logits) {
        Some(a) if view.op(a) == "Add" => {
            let [x, y] = view.node(a).inputs.as_slice() else { return None };
            pattern.push(a);
            match (scaled_product(view, x), scaled_product(view, y)) {
                (Some(_), _) => (x.clone(), Some(y.clone())),
                (None, Some(_)) => (y.clone(), Some(x.clone())),
                _ => return None,
            }
        }
        Some(r) if view.op(r) == "Reshape" => {
            let (scores, nodes, sum) = constant_mask_chain(view, logits)?;
            pattern.extend(nodes);
            let name = names.fresh(&format!("{}_mask", view.node(s).name));
            mask_constant = Some((name.clone(), sum));
            (scores, Some(name))
        }
        _ => (logits.to_string(), None),
    };
    view.sole_reader(&scores)?;
    let product = scaled_product(view, &scores)?;
    pattern.extend(&product.nodes);
    let q = split_heads(view, &product.q, false)?;
    let k = split_heads(view, &product.k, product.k_transposed)?;
    let (probs, tail) = probabilities(view, s)?;
    pattern.extend(tail);
    let pv = view.sole_reader(probs).filter(|&m| view.op(m) == "MatMul" && view.node(m).inputs[0] == probs)?;
    let v = split_heads(view, &view.node(pv).inputs[1], false)?;
    // The heads merged back: Transpose, Reshape to [B,S,H] (or to another shape of its elements).
    let merged = view.sole_reader(out(view, pv)).filter(|&t| view.op(t) == "Transpose" && merges_heads(view, t))?;
    let merged_heads = out(view, merged);
    let back = view
        .readers(merged_heads)
        .iter()
        .copied()
        .find(|&r| view.op(r) == "Reshape" && view.node(r).input(0) == Some(merged_heads))?;
    let shapes = shape_readers(view, merged_heads, back, &q.x)?;
    let y = out(view, back);
    let (n, d) = (q.heads, q.head_size);
    let same_heads = k.heads == n && v.heads == n && k.head_size == d;
    let bsh = [q.lead[0].clone(), q.lead[1].clone(), Dim::Fixed(n * d)];
    let y_shape = view.shape(y)?;
    // Otherwise the Attention output is reshaped to y's shape (fixed, the same element count).
    let y_direct = y_shape == bsh;
    let y_fixed =
        fixed(y_shape).filter(|ys| Some(ys.iter().product::<usize>()) == fixed(&bsh).map(|b| b.iter().product()));
    if !same_heads
        || !(y_direct || y_fixed.is_some())
        || view.dtype(&k.x) != view.dtype(&q.x)
        || view.dtype(&v.x) != view.dtype(&q.x)
    {
        return None;
    }
    if q.packed.is_none() && k.packed.is_none() && !view.same_type(&q.x, &k.x) {
        return None;
    }
    if let (Some(m), None) = (&mask, &mask_constant) {
        // attn_mask must broadcast to [B, N, S, T]: rank <= 4, the scores' dtype.
        if view.dtype(m) != view.dtype(&q.x) || view.shape(m).is_none_or(|sh| sh.len() > 4) {
            return None;
        }
    }
    pattern.extend(q.owned.iter().chain(&k.owned).chain(&v.owned).chain(&[pv, merged, back]));
    let mut added = Added::default();
    added.initializers.extend(mask_constant);
    let attention_y = if y_direct { y.to_string() } else { names.fresh(&format!("{y}_bsh")) };
    let name = view.node(s).name.clone();
    let mut inputs = if packed {
        vec![added.packed(view, names, [&q, &k, &v])?]
    } else {
        match added.split(view, names, [&q, &k, &v]) {
            Some(parts) => parts.to_vec(),
            None => vec![added.input(view, names, &q)?, added.input(view, names, &k)?, added.input(view, names, &v)?],
        }
    };
    inputs.extend(mask);
    added.nodes.push(attention_node(view, packed, name, inputs, n, product.scale, attention_y.clone()));
    if let (false, Some(ys)) = (y_direct, y_fixed) {
        let shape = added.constant(names, &format!("{y}_shape"), &ys)?;
        added.nodes.push(Node {
            name: format!("{}_reshape", view.node(back).name),
            op_type: "Reshape".into(),
            inputs: vec![attention_y, shape],
            outputs: vec![y.to_string()],
            ..Default::default()
        });
    }
    Some(Block { pattern, nodes: added.nodes, initializers: added.initializers, types: added.types, shapes })
}

/// The fused node: Attention (`inputs` q, k, v and the mask if any; in the default domain from
/// opset 23, else in Onyx's) or `ai.onyx` PackedAttention (the packed rows and the mask).
fn attention_node(
    view: &View<'_>,
    packed: bool,
    name: String,
    inputs: Vec<String>,
    heads: usize,
    scale: f64,
    y: String,
) -> Node {
    let attr = |name: &str, value| Attribute { name: name.into(), value };
    let default_domain = !packed && view.graph_opset() >= 23;
    Node {
        name,
        op_type: if packed { "PackedAttention" } else { "Attention" }.into(),
        domain: if default_domain { String::new() } else { ONYX_DOMAIN.into() },
        inputs,
        outputs: vec![y],
        attributes: vec![
            attr("q_num_heads", AttrValue::Int(heads as i64)),
            attr("kv_num_heads", AttrValue::Int(heads as i64)),
            attr("scale", AttrValue::Float(scale as f32)),
        ],
        ..Default::default()
    }
}
