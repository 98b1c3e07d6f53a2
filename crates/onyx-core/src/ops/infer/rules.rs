//! Per-operator inference rules, grouped by family in the submodules. Each rule reads what is
//! known of a node's inputs through [`ctx::Ctx`] and returns one [`Inferred`] per output.

mod contrib;
mod control;
mod ctx;
mod dims;
mod elementwise;
mod gather;
mod generate;
mod llm;
mod nn;
mod reduce;
mod shape;
mod slicing;

#[cfg(test)]
mod testutil;

use super::{Inferred, SymInt};
use crate::ir::Node;
use crate::types::{Dim, TensorType, ValueType};
use crate::{Result, Tensor};
use ctx::{Ctx, Rule};

pub use control::{constant_condition, merge_branch_lists};

/// What is known about a constant tensor.
pub fn from_constant(t: &Tensor) -> Inferred {
    let sym_value = match t.shape().len() {
        0 | 1 if ctx::tracks_values(t.dtype()) && t.len() <= ctx::MAX_SYM_LEN => {
            ctx::tensor_ints(t).map(|v| v.into_iter().map(SymInt::Known).collect())
        }
        _ => None,
    };
    Inferred { ty: ValueType::Tensor(TensorType::fixed(t.dtype(), t.shape())), constant: Some(t.clone()), sym_value }
}

/// Combines an inferred type with a type declared in the model, preferring known facts.
pub fn merge(inferred: &ValueType, declared: &ValueType) -> ValueType {
    match (inferred, declared) {
        (ValueType::Unknown, d) => d.clone(),
        (ValueType::Tensor(a), ValueType::Tensor(b)) if a.dtype == b.dtype => {
            ValueType::Tensor(TensorType { dtype: a.dtype, shape: merge_shapes(&a.shape, &b.shape) })
        }
        (i, _) => i.clone(),
    }
}

/// Merges an inferred shape with a declared one: a known rank wins, and declared dimensions
/// fill only what inference left unknown (a declared size never replaces an inferred symbol:
/// exporters sometimes record trace-time sizes of dynamic dimensions).
fn merge_shapes(inferred: &Option<Vec<Dim>>, declared: &Option<Vec<Dim>>) -> Option<Vec<Dim>> {
    match (inferred, declared) {
        (None, d) => d.clone(),
        (Some(i), Some(d)) if i.len() == d.len() => {
            Some(i.iter().zip(d).map(|(a, b)| if *a == Dim::Unknown { b.clone() } else { a.clone() }).collect())
        }
        (i, _) => i.clone(),
    }
}

/// The rule for an op of the default domain, if Onyx has one.
fn rule_for(op: &str) -> Option<Rule> {
    elementwise::rule(op)
        .or_else(|| nn::rule(op))
        .or_else(|| reduce::rule(op))
        .or_else(|| shape::rule(op))
        .or_else(|| slicing::rule(op))
        .or_else(|| gather::rule(op))
        .or_else(|| generate::rule(op))
        .or_else(|| control::rule(op))
        // ONNX Runtime registers it in the default domain.
        .or_else(|| (op == "SimplifiedLayerNormalization").then_some(llm::rms_norm as Rule))
}

/// Infers the outputs of one node from what is known of its inputs. Unknown ops give no outputs
/// (their values stay untyped). Errors only where the node is certainly inconsistent.
pub fn infer_node(node: &Node, since_version: i64, inputs: &[Option<&Inferred>]) -> Result<Vec<Inferred>> {
    let rule = if node.domain.is_empty() || node.domain == "ai.onnx" {
        rule_for(&node.op_type)
    } else if node.domain == crate::ir::MS_DOMAIN {
        contrib::rule(&node.op_type)
    } else if node.domain == crate::ir::ONYX_DOMAIN {
        // Onyx's NCHWc ops have their own rules; its fused ops have the contract of the
        // default-domain op of the same name (FusedGemm: Gemm's, an activation applied).
        let op = if node.op_type == "FusedGemm" { "Gemm" } else { node.op_type.as_str() };
        nn::nchwc::rule(op).or_else(|| nn::onyx_rule(op)).or_else(|| rule_for(op))
    } else {
        None
    };
    let Some(rule) = rule else {
        return Ok(vec![]);
    };
    let cx = Ctx::new(node, since_version, inputs);
    let mut outputs = rule(&cx)?;
    outputs.truncate(node.outputs.len());
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::testutil::{node, sym, ty};
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    /// Every op with a rule.
    const OPS: &[&str] = &[
        "Abs",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "CastLike",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "CumSum",
        "DepthToSpace",
        "Div",
        "Dropout",
        "Elu",
        "Equal",
        "Erf",
        "Expand",
        "EyeLike",
        "Flatten",
        "Gather",
        "GatherElements",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Greater",
        "GroupNormalization",
        "Hardmax",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "If",
        "InstanceNormalization",
        "IsInf",
        "IsNaN",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LogSoftmax",
        "LpPool",
        "MatMul",
        "MatMulInteger",
        "Max",
        "MaxPool",
        "Mean",
        "Min",
        "Mod",
        "Mul",
        "Not",
        "OneHot",
        "Or",
        "Pad",
        "Pow",
        "PRelu",
        "Range",
        "ReduceMax",
        "ReduceMean",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "ScatterElements",
        "ScatterND",
        "Shape",
        "Sigmoid",
        "Size",
        "Slice",
        "Softmax",
        "Softplus",
        "SpaceToDepth",
        "Split",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "Tile",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Where",
        "Xor",
    ];

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<T: Clone>(&mut self, v: &[T]) -> T {
            v[self.below(v.len())].clone()
        }
    }

    const INTS: [i64; 11] = [i64::MIN, -3, -2, -1, 0, 1, 2, 3, 7, 1 << 40, i64::MAX];

    fn random_ints(rng: &mut Rng) -> Vec<i64> {
        (0..rng.below(6)).map(|_| rng.pick(&INTS)).collect()
    }

    fn random_input(rng: &mut Rng) -> Option<Inferred> {
        let dims = ["0", "1", "2", "3", "7", "b", "?", "9223372036854775807"];
        Some(match rng.below(8) {
            0 => return None,
            1 => ty("?"),
            2 => ty(&format!("{}[...]", rng.pick(&["float", "int64", "bool"]))),
            3 => super::testutil::i64s(&random_ints(rng)),
            4 => super::testutil::i64s0(rng.pick(&INTS)),
            5 => {
                let mut t = ty("int64[2]");
                t.sym_value = Some(vec![sym(rng.pick(&["b", "?", "-1", "0", "5"])), sym("s")]);
                t
            }
            6 => from_constant(&Tensor::from_bools(vec![], vec![rng.below(2) == 1]).unwrap()),
            _ => {
                let rank = rng.below(6);
                let shape: Vec<&str> = (0..rank).map(|_| rng.pick(&dims)).collect();
                ty(&format!("{}[{}]", rng.pick(&["float", "int64", "uint8"]), shape.join(",")))
            }
        })
    }

    fn random_attr(rng: &mut Rng) -> Attribute {
        let names = [
            "axis",
            "axes",
            "perm",
            "kernel_shape",
            "strides",
            "pads",
            "dilations",
            "group",
            "keepdims",
            "split",
            "num_outputs",
            "to",
            "starts",
            "ends",
            "blocksize",
            "allowzero",
            "start",
            "end",
            "transA",
            "output_padding",
            "output_shape",
            "ceil_mode",
            "auto_pad",
            "noop_with_empty_axes",
            "batch_dims",
            "dtype",
            "stash_type",
            "value",
            "value_ints",
            "keep_aspect_ratio_policy",
            "then_branch",
        ];
        let value = match rng.below(5) {
            0 | 1 => AttrValue::Int(rng.pick(&INTS)),
            2 | 3 => AttrValue::Ints(random_ints(rng)),
            _ => AttrValue::String(rng.pick(&["SAME_UPPER", "VALID", "not_larger", "x"]).as_bytes().to_vec()),
        };
        Attribute { name: rng.pick(&names).to_string(), value }
    }

    #[test]
    fn random_nodes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for i in 0..60_000 {
            let op = OPS[i % OPS.len()];
            let inputs: Vec<Option<Inferred>> = (0..rng.below(6)).map(|_| random_input(&mut rng)).collect();
            let attrs = (0..rng.below(4)).map(|_| random_attr(&mut rng)).collect();
            let n = node(op, inputs.len(), 1 + rng.below(3), attrs);
            let refs: Vec<Option<&Inferred>> = inputs.iter().map(Option::as_ref).collect();
            for since in [7, 11, 13, 18, 22] {
                if let Err(e) = infer_node(&n, since, &refs) {
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }

    #[test]
    fn every_listed_op_has_a_rule_and_others_do_not() {
        for op in OPS {
            assert!(rule_for(op).is_some(), "{op}");
        }
        let out = infer_node(&node("Frobnicate", 1, 1, vec![]), 1, &[Some(&ty("float[2]"))]).unwrap();
        assert!(out.is_empty());
        let mut contrib = node("Relu", 1, 1, vec![]);
        contrib.domain = "com.microsoft".into();
        assert!(infer_node(&contrib, 1, &[Some(&ty("float[2]"))]).unwrap().is_empty());
    }

    #[test]
    fn merge_prefers_known_facts() {
        let cases = [
            ("float[b,?,3]", "float[b,s,3]", "float[b,s,3]"),
            ("float[...]", "float[b,s]", "float[b,s]"),
            ("float[2,?]", "float[3,?]", "float[2,?]"),
            ("float[b,?]", "float[4,5]", "float[b,5]"),
            ("?", "int64[4]", "int64[4]"),
            ("float[2]", "float[2,1]", "float[2]"),
            ("float[?]", "int64[5]", "float[?]"),
        ];
        for (inferred, declared, want) in cases {
            assert_eq!(merge(&ty(inferred).ty, &ty(declared).ty).to_string(), want, "{inferred} + {declared}");
        }
    }
}
