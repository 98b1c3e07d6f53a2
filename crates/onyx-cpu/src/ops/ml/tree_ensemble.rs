//! TreeEnsemble (`ai.onnx.ml` opset 5): each row of `X [N, F]` walks every tree from its root
//! (`tree_roots`) through the decision nodes (`nodes_*`, compared with `nodes_modes`: `<=`,
//! `<`, `>=`, `>`, `==`, `!=` or set membership) to a leaf, whose weight adds into its target
//! (`leaf_targetids`); the trees are aggregated by sum, average, min or max into `[N, n_targets]`,
//! then post-transformed (none, softmax, logistic, softmax ignoring zeros).
//!
//! A root whose two branches are the same leaf is itself that leaf (index = the root's value),
//! as ONNX's reference reads it. The membership sets are listed in `membership_values` in node
//! order, each ended by a NaN. NaN features go the true way where
//! `nodes_missing_value_tracks_true` says so, otherwise they fail every comparison.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use crate::ops::elementwise::to_f64_vec;
use crate::ops::matmul::real::float_output;
use crate::ops::util;

/// How a decision node compares its feature with its split.
#[derive(Clone, Debug, PartialEq)]
enum Test {
    Leq(f64),
    Lt(f64),
    Gte(f64),
    Gt(f64),
    Eq(f64),
    Neq(f64),
    Member(Vec<f64>),
}

impl Test {
    fn holds(&self, x: f64) -> bool {
        match self {
            Test::Leq(s) => x <= *s,
            Test::Lt(s) => x < *s,
            Test::Gte(s) => x >= *s,
            Test::Gt(s) => x > *s,
            Test::Eq(s) => x == *s,
            Test::Neq(s) => x != *s,
            Test::Member(set) => set.contains(&x),
        }
    }
}

/// Where a branch goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    Node(usize),
    Leaf(usize),
}

/// One decision node.
#[derive(Clone, Debug)]
struct Decision {
    feature: usize,
    test: Test,
    nan_true: bool,
    yes: Next,
    no: Next,
}

/// How the trees' leaf weights combine per target.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

/// What is applied to each output row at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Post {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
}

/// A TreeEnsemble node with its trees decoded.
struct TreeEnsemble {
    nodes: Vec<Decision>,
    /// (weight, target) per leaf.
    leaves: Vec<(f64, usize)>,
    roots: Vec<Next>,
    targets: usize,
    aggregate: Aggregate,
    post: Post,
    at: Location,
}

/// An INTS attribute, required.
fn ints<'a>(ctx: &'a NodeContext<'_>, name: &str, at: &Location) -> Result<&'a [i64]> {
    ctx.node.get_ints(name)?.ok_or_else(|| Error::attribute(at, name, "a list of ints (required)", "nothing"))
}

/// A TENSOR attribute as f64 values, required.
fn floats(ctx: &NodeContext<'_>, name: &str, at: &Location) -> Result<Vec<f64>> {
    let t: &Tensor =
        ctx.node.get_tensor(name)?.ok_or_else(|| Error::attribute(at, name, "a float tensor (required)", "nothing"))?;
    to_f64_vec(&t.view()?).map_err(|_| Error::attribute(at, name, "a float tensor", t.dtype().name()))
}

/// Checked index into `0..len`.
fn index(v: i64, len: usize, name: &str, at: &Location) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| Error::attribute(at, name, format!("indices in 0..{len}"), v.to_string()))
}

/// The membership sets in node order, each ended by NaN.
fn member_sets(values: &[f64], count: usize, at: &Location) -> Result<Vec<Vec<f64>>> {
    let sets: Vec<Vec<f64>> = values.split(|v| v.is_nan()).map(<[f64]>::to_vec).collect();
    // A trailing NaN leaves an empty piece after the last set.
    let ends = values.iter().filter(|v| v.is_nan()).count();
    if ends != count {
        return Err(Error::attribute(
            at,
            "membership_values",
            format!("{count} NaN-ended sets (one per membership node)"),
            format!("{ends} sets"),
        ));
    }
    Ok(sets.into_iter().take(count).collect())
}

pub(crate) fn build_tree_ensemble(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let at = &at;
    let splits = floats(ctx, "nodes_splits", at)?;
    let n = splits.len();
    let modes = ctx
        .node
        .get_tensor("nodes_modes")?
        .ok_or_else(|| Error::attribute(at, "nodes_modes", "a uint8 tensor (required)", "nothing"))?;
    let modes = util::to_i64(&modes.view()?)?;
    let per_node = |name: &str| -> Result<&[i64]> {
        let v = ints(ctx, name, at)?;
        if v.len() != n {
            return Err(Error::attribute(at, name, format!("{n} values (one per node)"), v.len().to_string()));
        }
        Ok(v)
    };
    let (feature, yes, no) =
        (per_node("nodes_featureids")?, per_node("nodes_truenodeids")?, per_node("nodes_falsenodeids")?);
    let (yes_leaf, no_leaf) = (per_node("nodes_trueleafs")?, per_node("nodes_falseleafs")?);
    let nan_true = match ctx.node.get_ints("nodes_missing_value_tracks_true")? {
        Some(v) if v.len() == n => v.to_vec(),
        Some(v) => {
            return Err(Error::attribute(
                at,
                "nodes_missing_value_tracks_true",
                format!("{n} values"),
                v.len().to_string(),
            ))
        }
        None => vec![0; n],
    };
    if modes.len() != n {
        return Err(Error::attribute(at, "nodes_modes", format!("{n} values (one per node)"), modes.len().to_string()));
    }
    let weights = floats(ctx, "leaf_weights", at)?;
    let targets_of = ints(ctx, "leaf_targetids", at)?;
    if targets_of.len() != weights.len() {
        return Err(Error::attribute(
            at,
            "leaf_targetids",
            format!("{} values (one per leaf)", weights.len()),
            targets_of.len().to_string(),
        ));
    }
    let targets = usize::try_from(ctx.node.get_int("n_targets")?.unwrap_or(0)).unwrap_or(0);
    if targets == 0 {
        return Err(Error::attribute(
            at,
            "n_targets",
            "a positive number of targets",
            format!("{:?}", ctx.node.get_int("n_targets")?),
        ));
    }
    let leaves = weights
        .iter()
        .zip(targets_of)
        .map(|(&w, &t)| Ok((w, index(t, targets, "leaf_targetids", at)?)))
        .collect::<Result<Vec<_>>>()?;
    let member_count = modes.iter().filter(|&&m| m == 6).count();
    let mut sets = match ctx.node.get_tensor("membership_values")? {
        Some(t) => member_sets(&to_f64_vec(&t.view()?)?, member_count, at)?,
        None if member_count == 0 => vec![],
        None => return Err(Error::attribute(at, "membership_values", "the sets of the membership nodes", "nothing")),
    }
    .into_iter();
    let next = |id: i64, leaf: i64, name: &str| -> Result<Next> {
        Ok(if leaf != 0 { Next::Leaf(index(id, leaves.len(), name, at)?) } else { Next::Node(index(id, n, name, at)?) })
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let s = splits[i];
        let test = match modes[i] {
            0 => Test::Leq(s),
            1 => Test::Lt(s),
            2 => Test::Gte(s),
            3 => Test::Gt(s),
            4 => Test::Eq(s),
            5 => Test::Neq(s),
            6 => Test::Member(sets.next().unwrap_or_default()),
            m => {
                return Err(Error::attribute(
                    at,
                    "nodes_modes",
                    "modes 0..=6 (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER)",
                    m.to_string(),
                ))
            }
        };
        let feature = usize::try_from(feature[i]).map_err(|_| {
            Error::attribute(at, "nodes_featureids", "non-negative feature indices", feature[i].to_string())
        })?;
        nodes.push(Decision {
            feature,
            test,
            nan_true: nan_true[i] != 0,
            yes: next(yes[i], yes_leaf[i], "nodes_truenodeids")?,
            no: next(no[i], no_leaf[i], "nodes_falsenodeids")?,
        });
    }
    let roots = ints(ctx, "tree_roots", at)?
        .iter()
        .map(|&r| {
            let i = index(r, n, "tree_roots", at)?;
            // A root whose branches are one and the same leaf is that leaf.
            let degenerate = yes_leaf[i] != 0 && no_leaf[i] != 0 && yes[i] == no[i];
            if degenerate {
                Ok(Next::Leaf(index(r, leaves.len(), "tree_roots", at)?))
            } else {
                Ok(Next::Node(i))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let aggregate = match ctx.node.int_or("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        v => return Err(Error::attribute(at, "aggregate_function", "0..=3 (AVERAGE, SUM, MIN, MAX)", v.to_string())),
    };
    let post = match ctx.node.int_or("post_transform", 0)? {
        0 => Post::None,
        1 => Post::Softmax,
        2 => Post::Logistic,
        3 => Post::SoftmaxZero,
        4 => return Err(Error::Unsupported(format!("{at}: post_transform PROBIT"))),
        v => {
            return Err(Error::attribute(
                at,
                "post_transform",
                "0..=4 (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT)",
                v.to_string(),
            ))
        }
    };
    Ok(Box::new(TreeEnsemble { nodes, leaves, roots, targets, aggregate, post, at: at.clone() }))
}

impl TreeEnsemble {
    /// The leaf row `x` reaches from `start`; an error for a feature out of range or a cycle.
    fn leaf(&self, x: &[f64], start: Next) -> Result<usize> {
        let mut at = start;
        for _ in 0..=self.nodes.len() {
            let node = match at {
                Next::Leaf(l) => return Ok(l),
                Next::Node(i) => &self.nodes[i],
            };
            let v = *x.get(node.feature).ok_or_else(|| {
                Error::input(
                    &self.at,
                    0,
                    format!("rows of more than {} features", node.feature),
                    format!("{} features", x.len()),
                )
            })?;
            let go = (v.is_nan() && node.nan_true) || node.test.holds(v);
            at = if go { node.yes } else { node.no };
        }
        Err(Error::node(&self.at, "the tree nodes form a cycle"))
    }

    /// One output row from one input row.
    fn row(&self, x: &[f64], init: f64) -> Result<Vec<f64>> {
        let mut y = vec![init; self.targets];
        for &root in &self.roots {
            let (w, t) = self.leaves[self.leaf(x, root)?];
            y[t] = match self.aggregate {
                Aggregate::Sum => y[t] + w,
                Aggregate::Average => y[t] + w / self.roots.len() as f64,
                Aggregate::Min => y[t].min(w),
                Aggregate::Max => y[t].max(w),
            };
        }
        self.post_transform(&mut y);
        Ok(y)
    }

    fn post_transform(&self, y: &mut [f64]) {
        match self.post {
            Post::None => {}
            Post::Logistic => y.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
            Post::Softmax | Post::SoftmaxZero => {
                let zero = self.post == Post::SoftmaxZero;
                let m = y.iter().filter(|v| !(zero && **v == 0.0)).cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for v in y.iter_mut() {
                    if !(zero && *v == 0.0) {
                        *v = (*v - m).exp();
                        sum += *v;
                    }
                }
                y.iter_mut().filter(|v| !(zero && **v == 0.0)).for_each(|v| *v /= sum);
            }
        }
    }
}

impl Kernel for TreeEnsemble {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float, DataType::Double, DataType::Float16], 0, at)?;
        let (rows, width) = match x.shape() {
            &[n, f] => (n, f),
            &[f] => (1, f),
            s => return Err(Error::input(at, 0, "a tensor of shape [N, F]", format!("{s:?}"))),
        };
        let data = to_f64_vec(&x)?;
        // MIN and MAX start from the largest finite values of the output type, as ONNX's reference.
        let big = match x.dtype() {
            DataType::Double => f64::MAX,
            DataType::Float16 => 65504.0,
            _ => f32::MAX as f64,
        };
        let init = match self.aggregate {
            Aggregate::Min => big,
            Aggregate::Max => -big,
            _ => 0.0,
        };
        let mut y = Vec::with_capacity(rows * self.targets);
        for r in 0..rows {
            y.extend(self.row(&data[r * width..(r + 1) * width], init)?);
        }
        Ok(vec![float_output(x.dtype(), vec![rows, self.targets], y)?])
    }
}

#[cfg(test)]
mod tests;
