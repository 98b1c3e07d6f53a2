//! The inputs of a fused attention node: q, k and v as they are, or taken from packed rows
//! (a Split, Slices, or the rows themselves for PackedAttention), with the nodes and constants
//! that make them.

use std::collections::HashMap;

use super::{fixed, Heads, Names};
use crate::ir::{AttrValue, Attribute, Node};
use crate::optimizer::view::View;
use crate::types::TensorType;
use crate::Tensor;

/// What a rewrite adds: nodes, in order, and their constants.
#[derive(Default)]
pub(super) struct Added {
    pub nodes: Vec<Node>,
    pub initializers: Vec<(String, Tensor)>,
    pub types: HashMap<String, TensorType>,
    /// Packed values already reshaped to rows: value → rows.
    rows: HashMap<String, String>,
}

impl Added {
    /// An i64 constant named after `base`.
    pub fn constant(&mut self, names: &mut Names<'_>, base: &str, values: &[usize]) -> Option<String> {
        let name = names.fresh(base);
        let data = values.iter().map(|&v| i64::try_from(v).ok()).collect::<Option<Vec<i64>>>()?;
        self.initializers.push((name.clone(), Tensor::from_vec(vec![values.len()], data).ok()?));
        Some(name)
    }

    /// Adds `op` on `inputs`, its one output (of type `ty`) named after `base`.
    fn node(&mut self, names: &mut Names<'_>, op: &str, inputs: Vec<String>, base: &str, ty: TensorType) -> String {
        let y = names.fresh(base);
        self.types.insert(y.clone(), ty);
        self.nodes.push(Node {
            name: y.clone(),
            op_type: op.into(),
            inputs,
            outputs: vec![y.clone()],
            ..Default::default()
        });
        y
    }

    /// The rows (`[B,S,W]`) of packed `h`'s value: the value itself, or a Reshape of it.
    fn rows(&mut self, view: &View<'_>, names: &mut Names<'_>, h: &Heads) -> Option<String> {
        let (w, _) = h.packed?;
        let [b, s] = [h.lead[0].fixed()?, h.lead[1].fixed()?];
        Some(match self.rows.get(&h.x) {
            Some(r) => r.clone(),
            None if view.fixed_shape(&h.x)? == [b, s, w] => h.x.clone(),
            None => {
                let shape = self.constant(names, &format!("{}_rows_shape", h.x), &[b, s, w])?;
                let ty = TensorType::fixed(view.dtype(&h.x)?, &[b, s, w]);
                let r = self.node(names, "Reshape", vec![h.x.clone(), shape], &format!("{}_rows", h.x), ty);
                self.rows.insert(h.x.clone(), r.clone());
                r
            }
        })
    }

    /// The `[B,S,H]` inputs of the Attention node for q, k and v when one packed value holds
    /// all three side by side (ViT, Swin): its rows taken apart by one Split (one dispatch,
    /// where a Slice per input took three). `None` when they do not tile the rows exactly.
    pub fn split(&mut self, view: &View<'_>, names: &mut Names<'_>, heads: [&Heads; 3]) -> Option<[String; 3]> {
        let first = heads[0];
        let (w, _) = first.packed?;
        if heads.iter().any(|h| h.x != first.x || h.lead != first.lead || h.packed.map(|p| p.0) != Some(w)) {
            return None;
        }
        let mut order = [0, 1, 2];
        order.sort_by_key(|&i| heads[i].packed.map_or(0, |p| p.1));
        let mut end = 0;
        for &i in &order {
            if heads[i].packed?.1 != end {
                return None;
            }
            end += heads[i].hidden();
        }
        if end != w {
            return None;
        }
        let rows = self.rows(view, names, first)?;
        let [b, s] = [first.lead[0].fixed()?, first.lead[1].fixed()?];
        let dtype = view.dtype(&first.x)?;
        let sizes = order.map(|i| heads[i].hidden());
        let mut inputs = vec![rows];
        let mut attributes = vec![Attribute { name: "axis".into(), value: AttrValue::Int(2) }];
        let split: Vec<i64> = sizes.iter().map(|&n| i64::try_from(n).ok()).collect::<Option<_>>()?;
        if view.graph_opset() >= 13 {
            inputs.push(self.constant(names, &format!("{}_split", first.x), &sizes)?);
        } else {
            attributes.push(Attribute { name: "split".into(), value: AttrValue::Ints(split) });
        }
        let mut parts: [String; 3] = Default::default();
        for (&i, &n) in order.iter().zip(&sizes) {
            parts[i] = names.fresh(&format!("{}_part{i}", first.x));
            self.types.insert(parts[i].clone(), TensorType::fixed(dtype, &[b, s, n]));
        }
        self.nodes.push(Node {
            name: names.fresh(&format!("{}_split", first.x)),
            op_type: "Split".into(),
            inputs,
            outputs: order.iter().map(|&i| parts[i].clone()).collect(),
            attributes,
            ..Default::default()
        });
        Some(parts)
    }

    /// The rows (`[B,S,3H]`) of the value holding q, k and v side by side in that order, for a
    /// PackedAttention node: one packed value whose columns the heads take (ViT, Swin), or the
    /// input of the Split whose three outputs they are (bert's projections packed into one
    /// product on a GPU; the Split is left unread). `None` when they are not.
    pub fn packed(&mut self, view: &View<'_>, names: &mut Names<'_>, heads: [&Heads; 3]) -> Option<String> {
        let first = heads[0];
        let hidden = first.hidden();
        if heads.iter().any(|h| h.hidden() != hidden || h.lead != first.lead) {
            return None;
        }
        if let Some((w, _)) = first.packed.filter(|_| heads.iter().all(|h| h.x == first.x)) {
            let in_order = heads.iter().enumerate().all(|(i, h)| h.packed == Some((w, i * hidden)));
            return if in_order && w == 3 * hidden { self.rows(view, names, first) } else { None };
        }
        let split = view.node(view.produced_by(&first.x, "Split")?);
        let x = split.input(0)?;
        let x_shape = view.fixed_shape(x)?;
        let (&width, lead) = x_shape.split_last()?;
        let part = |i: usize, h: &Heads| {
            let shape = view.shape(&h.x).and_then(fixed);
            split.outputs.get(i) == Some(&h.x)
                && h.packed.is_none_or(|p| p == (hidden, 0))
                && shape.is_some_and(|s| s.split_last() == Some((&hidden, lead)))
        };
        if split.outputs.len() != 3 || width != 3 * hidden || !heads.iter().enumerate().all(|(i, h)| part(i, h)) {
            return None;
        }
        let whole = Heads { owned: vec![], x: x.to_string(), packed: Some((width, 0)), ..first.clone() };
        self.rows(view, names, &whole)
    }

    /// The `[B,S,H]` input of the Attention node for `h`: its value itself, or its rows
    /// (`[B,S,W]`, a Reshape) and their columns (a Slice) when it is packed.
    pub fn input(&mut self, view: &View<'_>, names: &mut Names<'_>, h: &Heads) -> Option<String> {
        let Some((w, base)) = h.packed else { return Some(h.x.clone()) };
        let [b, s] = [h.lead[0].fixed()?, h.lead[1].fixed()?];
        let dtype = view.dtype(&h.x)?;
        let rows = self.rows(view, names, h)?;
        if w == h.hidden() {
            return Some(rows);
        }
        let base_name = format!("{}_{base}", h.x);
        let starts = self.constant(names, &format!("{base_name}_starts"), &[base])?;
        let ends = self.constant(names, &format!("{base_name}_ends"), &[base + h.hidden()])?;
        let axes = self.constant(names, &format!("{base_name}_axes"), &[2])?;
        let ty = TensorType::fixed(dtype, &[b, s, h.hidden()]);
        Some(self.node(names, "Slice", vec![rows, starts, ends, axes], &format!("{base_name}_heads"), ty))
    }
}
