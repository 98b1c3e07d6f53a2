//! The contrib kernels against compositions of the CPU EP's own default-domain kernels (Conv,
//! Add, activations, Transpose, MatMul, Mul, Gelu, LayerNormalization) on random data of odd
//! shapes, plus the errors they give.

use onyx_core::ep::{NodeContext, SubgraphRunner, ValueRef};
use onyx_core::ir::{AttrValue, Graph, OpsetImports};
use onyx_core::{DataType, Error, Result, Tensor, Value};

use super::DOMAIN;
use crate::ops::matmul::test_support::{assert_close, ints, node, string, to_f64, Rng};
use crate::Registry;

fn no_subgraphs(_: &Graph) -> Result<std::sync::Arc<dyn SubgraphRunner>> {
    Err(Error::InvalidArgument("no subgraphs".into()))
}

/// Runs one node of `domain`/`op` through the full CPU registry at opset `since`.
fn run_op(
    domain: &str,
    op: &str,
    since: i64,
    attrs: Vec<(&str, AttrValue)>,
    inputs: &[Option<&Tensor>],
    outputs: usize,
) -> Result<Vec<Value>> {
    let names: Vec<String> =
        (0..inputs.len()).map(|i| if inputs[i].is_some() { format!("x{i}") } else { String::new() }).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut n = node(op, &name_refs, outputs, attrs);
    n.domain = domain.into();
    let opsets: OpsetImports = [(String::new(), since), (DOMAIN.to_string(), 1)].into();
    let ctx = NodeContext {
        node: &n,
        since_version: if domain.is_empty() { since } else { 1 },
        opsets: &opsets,
        input_types: vec![],
        constant_inputs: vec![],
        subgraphs: &no_subgraphs,
    };
    let registry = Registry::with_all_ops();
    let build = registry.get(domain, op).ok_or_else(|| Error::Unsupported(format!("{op} not registered")))?;
    let kernel = build(&ctx)?;
    let values: Vec<Option<Value>> = inputs.iter().map(|t| t.map(|t| Value::Tensor(t.clone()))).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    kernel.run(&refs, &vec![true; outputs])
}

/// Runs a default-domain op with one output.
fn onnx(op: &str, since: i64, attrs: Vec<(&str, AttrValue)>, inputs: &[Option<&Tensor>]) -> Tensor {
    let out = run_op("", op, since, attrs, inputs, 1).unwrap_or_else(|e| panic!("{op}: {e}"));
    out.into_iter().next().unwrap().into_tensor().unwrap()
}

fn random(rng: &mut Rng, shape: &[usize], scale: f64) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = rng.vec_f64(n).iter().map(|&x| (x * scale) as f32).collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

fn scalar(v: f32) -> Tensor {
    Tensor::scalar(v)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    to_f64(&Value::Tensor(t.clone()))
}

fn to_f16(t: &Tensor) -> Tensor {
    let v: Vec<half::f16> = t.as_slice::<f32>().unwrap().iter().map(|&x| half::f16::from_f32(x)).collect();
    Tensor::from_vec(t.shape().to_vec(), v).unwrap()
}

fn f16_values(v: &Value) -> Vec<f64> {
    v.as_tensor().unwrap().as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect()
}

/// (activation name, params, how to apply it with default-domain ops).
fn activations() -> Vec<(&'static str, Vec<f32>)> {
    vec![
        ("", vec![]),
        ("Relu", vec![]),
        ("Tanh", vec![]),
        ("Sigmoid", vec![]),
        ("LeakyRelu", vec![0.13]),
        ("Clip", vec![-0.3, 0.4]),
        ("HardSigmoid", vec![0.3, 0.45]),
    ]
}

/// The activation applied through its default-domain kernel.
fn activate(name: &str, params: &[f32], y: &Tensor) -> Tensor {
    match name {
        "" => y.clone(),
        "LeakyRelu" => onnx(name, 16, vec![("alpha", AttrValue::Float(params[0]))], &[Some(y)]),
        "HardSigmoid" => onnx(
            name,
            6,
            vec![("alpha", AttrValue::Float(params[0])), ("beta", AttrValue::Float(params[1]))],
            &[Some(y)],
        ),
        "Clip" => onnx(name, 13, vec![], &[Some(y), Some(&scalar(params[0])), Some(&scalar(params[1]))]),
        _ => onnx(name, 13, vec![], &[Some(y)]),
    }
}

fn activation_attrs(name: &str, params: &[f32]) -> Vec<(&'static str, AttrValue)> {
    if name.is_empty() {
        return vec![];
    }
    let mut a = vec![("activation", string(name))];
    if !params.is_empty() {
        a.push(("activation_params", AttrValue::Floats(params.to_vec())));
    }
    a
}

#[test]
fn fused_conv_matches_conv_add_activation() {
    let mut rng = Rng::new(71);
    // (X shape, W shape, Conv attributes)
    let cases: Vec<(Vec<usize>, Vec<usize>, Vec<(&str, AttrValue)>)> = vec![
        (vec![2, 3, 7, 5], vec![4, 3, 3, 2], vec![("pads", ints(&[1, 0, 1, 1])), ("strides", ints(&[2, 1]))]),
        (
            vec![1, 6, 9, 8],
            vec![6, 1, 3, 3],
            vec![("group", AttrValue::Int(6)), ("dilations", ints(&[2, 1])), ("pads", ints(&[2, 1, 2, 1]))],
        ),
        (vec![2, 4, 11], vec![5, 4, 3], vec![("auto_pad", string("SAME_UPPER"))]),
        (vec![1, 2, 5, 4, 3], vec![3, 2, 2, 3, 1], vec![]),
    ];
    for (xs, ws, conv_attrs) in cases {
        let x = random(&mut rng, &xs, 1.0);
        let w = random(&mut rng, &ws, 0.5);
        let b = random(&mut rng, &[ws[0]], 0.5);
        let plain = onnx("Conv", 11, conv_attrs.clone(), &[Some(&x), Some(&w), Some(&b)]);
        let z = random(&mut rng, plain.shape(), 1.0);
        for (name, params) in activations() {
            for (with_b, with_z) in [(true, true), (true, false), (false, true), (false, false)] {
                let mut conv_in = vec![Some(&x), Some(&w)];
                if with_b {
                    conv_in.push(Some(&b));
                }
                let mut want = onnx("Conv", 11, conv_attrs.clone(), &conv_in);
                if with_z {
                    want = onnx("Add", 14, vec![], &[Some(&want), Some(&z)]);
                }
                let want = activate(name, &params, &want);
                let mut attrs = conv_attrs.clone();
                attrs.extend(activation_attrs(name, &params));
                let inputs =
                    [Some(&x), Some(&w), if with_b { Some(&b) } else { None }, if with_z { Some(&z) } else { None }];
                let got = run_op(DOMAIN, "FusedConv", 1, attrs, &inputs, 1).unwrap();
                let what = format!("FusedConv {xs:?} {ws:?} {name} b={with_b} z={with_z}");
                assert_eq!(got[0].as_tensor().unwrap().shape(), want.shape(), "{what}");
                assert_close(&to_f64(&got[0]), &f64s(&want), 1e-5, &what);
            }
        }
    }
}

#[test]
fn fused_conv_in_half_precision() {
    let mut rng = Rng::new(72);
    let (x, w, b) =
        (random(&mut rng, &[1, 3, 6, 5], 1.0), random(&mut rng, &[4, 3, 3, 3], 0.5), random(&mut rng, &[4], 0.5));
    let z = random(&mut rng, &[1, 4, 4, 3], 1.0);
    let want = onnx(
        "Relu",
        14,
        vec![],
        &[Some(&onnx(
            "Add",
            14,
            vec![],
            &[Some(&onnx("Conv", 11, vec![], &[Some(&x), Some(&w), Some(&b)])), Some(&z)],
        ))],
    );
    let halves = [to_f16(&x), to_f16(&w), to_f16(&b), to_f16(&z)];
    let inputs: Vec<Option<&Tensor>> = halves.iter().map(Some).collect();
    let got = run_op(DOMAIN, "FusedConv", 1, activation_attrs("Relu", &[]), &inputs, 1).unwrap();
    assert_eq!(got[0].as_tensor().unwrap().dtype(), DataType::Float16);
    assert_close(&f16_values(&got[0]), &f64s(&want), 1e-2, "FusedConv f16");
}

/// `perm` that swaps the last two of `rank` axes.
fn swap_last(rank: usize) -> AttrValue {
    let mut p: Vec<i64> = (0..rank as i64).collect();
    p.swap(rank - 2, rank - 1);
    AttrValue::Ints(p)
}

#[test]
fn fused_matmul_matches_transpose_matmul_mul() {
    let mut rng = Rng::new(73);
    // (A shape, B shape, transA, transB, alpha)
    let cases: [(&[usize], &[usize], i64, i64, f32); 8] = [
        (&[3, 5], &[5, 7], 0, 0, 1.0),
        (&[5, 3], &[5, 7], 1, 0, 0.5),
        (&[3, 5], &[7, 5], 0, 1, -1.25),
        (&[5, 3], &[7, 5], 1, 1, 2.0),
        (&[2, 1, 5, 3], &[4, 7, 5], 1, 1, 0.125),
        (&[2, 3, 5], &[5, 7], 0, 0, 3.0),
        (&[5], &[7, 5], 0, 1, 1.0),
        (&[5, 3], &[5], 1, 1, 1.0),
    ];
    for (a_shape, b_shape, ta, tb, alpha) in cases {
        let a = random(&mut rng, a_shape, 1.0);
        let b = random(&mut rng, b_shape, 1.0);
        let op = |t: &Tensor, trans: i64| {
            if trans == 1 && t.shape().len() >= 2 {
                onnx("Transpose", 13, vec![("perm", swap_last(t.shape().len()))], &[Some(t)])
            } else {
                t.clone()
            }
        };
        let product = onnx("MatMul", 13, vec![], &[Some(&op(&a, ta)), Some(&op(&b, tb))]);
        let want = onnx("Mul", 14, vec![], &[Some(&product), Some(&scalar(alpha))]);
        let attrs =
            vec![("transA", AttrValue::Int(ta)), ("transB", AttrValue::Int(tb)), ("alpha", AttrValue::Float(alpha))];
        let got = run_op(DOMAIN, "FusedMatMul", 1, attrs, &[Some(&a), Some(&b)], 1).unwrap();
        let what = format!("FusedMatMul {a_shape:?} {b_shape:?} {ta} {tb} {alpha}");
        assert_eq!(got[0].as_tensor().unwrap().shape(), want.shape(), "{what}");
        assert_close(&to_f64(&got[0]), &f64s(&want), 1e-5, &what);
    }
}

#[test]
fn fused_gemm_matches_gemm_and_activation() {
    let mut rng = Rng::new(75);
    let mut all = activations();
    all.extend([("Gelu", vec![]), ("GeluTanh", vec![])]);
    // (A, B, C, transB)
    let cases: [(&[usize], &[usize], Option<&[usize]>, i64); 3] =
        [(&[7, 13], &[13, 9], Some(&[9]), 0), (&[1, 31], &[5, 31], None, 1), (&[12, 3], &[3, 17], Some(&[12, 17]), 0)];
    for (a_shape, b_shape, c_shape, trans_b) in cases {
        let (a, b) = (random(&mut rng, a_shape, 2.0), random(&mut rng, b_shape, 1.0));
        let c = c_shape.map(|s| random(&mut rng, s, 1.0));
        let gemm_attrs = vec![("transB", AttrValue::Int(trans_b)), ("alpha", AttrValue::Float(0.75))];
        let inputs = [Some(&a), Some(&b), c.as_ref()];
        let plain = onnx("Gemm", 13, gemm_attrs.clone(), &inputs);
        for (name, params) in &all {
            let want = match *name {
                "Gelu" => onnx("Gelu", 20, vec![], &[Some(&plain)]),
                "GeluTanh" => onnx("Gelu", 20, vec![("approximate", string("tanh"))], &[Some(&plain)]),
                _ => activate(name, params, &plain),
            };
            let mut attrs = gemm_attrs.clone();
            attrs.extend(activation_attrs(name, params));
            let got = run_op(onyx_core::ir::ONYX_DOMAIN, "FusedGemm", 1, attrs, &inputs, 1).unwrap();
            let what = format!("FusedGemm {a_shape:?} {b_shape:?} {name}");
            assert_eq!(got[0].as_tensor().unwrap().shape(), want.shape(), "{what}");
            assert_close(&to_f64(&got[0]), &f64s(&want), 1e-5, &what);
        }
    }
    let bad = vec![("activation", string("Swish"))];
    let e = run_op(onyx_core::ir::ONYX_DOMAIN, "FusedGemm", 1, bad, &[Some(&scalar(1.0))], 1).unwrap_err().to_string();
    assert!(e.contains("Swish") && e.contains("activation"), "{e}");
}

#[test]
fn gelu_family_matches_add_and_onnx_gelu() {
    let mut rng = Rng::new(74);
    for shape in [&[3, 7][..], &[2, 5, 13], &[17]] {
        let x = random(&mut rng, shape, 3.0);
        let bias = random(&mut rng, &[*shape.last().unwrap()], 1.0);
        let with_bias = onnx("Add", 14, vec![], &[Some(&x), Some(&bias)]);
        let exact = |t: &Tensor| onnx("Gelu", 20, vec![], &[Some(t)]);
        let tanh = |t: &Tensor| onnx("Gelu", 20, vec![("approximate", string("tanh"))], &[Some(t)]);
        let cases: [(&str, Vec<Option<&Tensor>>, Tensor); 4] = [
            ("Gelu", vec![Some(&x)], exact(&x)),
            ("BiasGelu", vec![Some(&x), Some(&bias)], exact(&with_bias)),
            ("FastGelu", vec![Some(&x)], tanh(&x)),
            ("FastGelu", vec![Some(&x), Some(&bias)], tanh(&with_bias)),
        ];
        for (op, inputs, want) in cases {
            let got = run_op(DOMAIN, op, 1, vec![], &inputs, 1).unwrap();
            let what = format!("{op} {shape:?} with {} inputs", inputs.len());
            assert_close(&to_f64(&got[0]), &f64s(&want), 1e-5, &what);
        }
        let got = run_op(DOMAIN, "BiasGelu", 1, vec![], &[Some(&to_f16(&x)), Some(&to_f16(&bias))], 1).unwrap();
        assert_close(&f16_values(&got[0]), &f64s(&exact(&with_bias)), 5e-3, "BiasGelu f16");
    }
}

#[test]
fn skip_layer_norm_matches_add_and_layer_norm() {
    let mut rng = Rng::new(75);
    let x_shape = [2, 5, 7];
    for skip_shape in [&[2, 5, 7][..], &[5, 7], &[1, 5, 7]] {
        for (with_beta, with_bias) in [(true, true), (false, true), (true, false), (false, false)] {
            let x = random(&mut rng, &x_shape, 2.0);
            let skip = random(&mut rng, skip_shape, 1.0);
            let gamma = random(&mut rng, &[7], 1.5);
            let beta = random(&mut rng, &[7], 1.0);
            let bias = random(&mut rng, &[7], 1.0);
            let mut sum = onnx("Add", 14, vec![], &[Some(&x), Some(&skip)]);
            if with_bias {
                sum = onnx("Add", 14, vec![], &[Some(&sum), Some(&bias)]);
            }
            let eps = 1e-3;
            let ln_in = [Some(&sum), Some(&gamma), if with_beta { Some(&beta) } else { None }];
            let want =
                run_op("", "LayerNormalization", 17, vec![("epsilon", AttrValue::Float(eps))], &ln_in, 3).unwrap();
            let inputs = [Some(&x), Some(&skip), Some(&gamma), with_beta.then_some(&beta), with_bias.then_some(&bias)];
            let got = run_op(DOMAIN, "SkipLayerNormalization", 1, vec![("epsilon", AttrValue::Float(eps))], &inputs, 4)
                .unwrap();
            let what = format!("SkipLayerNormalization skip {skip_shape:?} beta={with_beta} bias={with_bias}");
            assert_eq!(got.len(), 4, "{what}");
            for i in 0..3 {
                let (g, w) = (got[i].as_tensor().unwrap(), want[i].as_tensor().unwrap());
                assert_eq!(g.shape(), w.shape(), "{what}: output {i}");
                assert_close(&to_f64(&got[i]), &to_f64(&want[i]), 1e-5, &format!("{what}: output {i}"));
            }
            assert_close(&to_f64(&got[3]), &f64s(&sum), 1e-6, &format!("{what}: sum"));
        }
    }
}

#[test]
fn invalid_inputs_and_attributes_are_errors() {
    let mut rng = Rng::new(76);
    let x = random(&mut rng, &[1, 2, 5, 5], 1.0);
    let w = random(&mut rng, &[3, 2, 3, 3], 1.0);
    let err = |r: Result<Vec<Value>>| r.err().expect("an error").to_string();

    let e = err(run_op(DOMAIN, "FusedConv", 1, activation_attrs("Swish", &[]), &[Some(&x), Some(&w)], 1));
    assert!(e.contains("activation") && e.contains("Swish"), "{e}");
    let e = err(run_op(DOMAIN, "FusedConv", 1, activation_attrs("LeakyRelu", &[0.1, 0.2]), &[Some(&x), Some(&w)], 1));
    assert!(e.contains("activation_params"), "{e}");
    let z = random(&mut rng, &[1, 3, 3, 4], 1.0);
    let e = err(run_op(DOMAIN, "FusedConv", 1, vec![], &[Some(&x), Some(&w), None, Some(&z)], 1));
    assert!(e.contains("input 3") || e.contains("residual"), "{e}");
    let e = err(run_op(DOMAIN, "FusedConv", 1, vec![], &[Some(&x), Some(&random(&mut rng, &[3, 4, 3, 3], 1.0))], 1));
    assert!(e.contains("FusedConv"), "{e}");

    let (a, b) = (random(&mut rng, &[3, 4], 1.0), random(&mut rng, &[4, 5], 1.0));
    let e = err(run_op(DOMAIN, "FusedMatMul", 1, vec![("transBatchA", AttrValue::Int(1))], &[Some(&a), Some(&b)], 1));
    assert!(e.contains("transBatchA"), "{e}");
    let e = err(run_op(DOMAIN, "FusedMatMul", 1, vec![("transA", AttrValue::Int(1))], &[Some(&a), Some(&b)], 1));
    assert!(e.contains("[4, 3]") || e.contains("cannot multiply"), "{e}");

    let e = err(run_op(DOMAIN, "BiasGelu", 1, vec![], &[Some(&a), Some(&random(&mut rng, &[3], 1.0))], 1));
    assert!(e.contains("BiasGelu") && e.contains("[4]"), "{e}");
    let e = err(run_op(DOMAIN, "BiasGelu", 1, vec![], &[Some(&a)], 1));
    assert!(e.contains("input 1"), "{e}");

    let g = random(&mut rng, &[4], 1.0);
    let e = err(run_op(
        DOMAIN,
        "SkipLayerNormalization",
        1,
        vec![],
        &[Some(&a), Some(&a), Some(&random(&mut rng, &[5], 1.0))],
        1,
    ));
    assert!(e.contains("input 2") && e.contains("[4]"), "{e}");
    for bad_skip in [&[4][..], &[3, 4], &[2, 4], &[1, 3, 4, 1], &[1]] {
        let bad = random(&mut rng, bad_skip, 1.0);
        let ok_shape = bad_skip == [4] || bad_skip == [3, 4];
        let r = run_op(DOMAIN, "SkipLayerNormalization", 1, vec![], &[Some(&a), Some(&bad), Some(&g)], 1);
        assert_eq!(r.is_ok(), ok_shape, "skip {bad_skip:?}: {:?}", r.err());
    }
}
