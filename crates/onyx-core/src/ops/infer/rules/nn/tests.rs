//! Tests of the nn inference rules.

use super::super::testutil::*;

#[test]
fn conv_shapes() {
    check_all(vec![
        case("Conv", 11, vec![], &["float[1,3,224,224]", "float[64,3,7,7]"], &["float[1,64,218,218]"]),
        case(
            "Conv",
            11,
            vec![ints("strides", &[2, 2]), ints("pads", &[3, 3, 3, 3])],
            &["float[n,3,224,224]", "float[64,3,7,7]", "float[64]"],
            &["float[n,64,112,112]"],
        ),
        case(
            "Conv",
            11,
            vec![ints("pads", &[1, 1, 1, 1])],
            &["float[n,16,h,w]", "float[32,16,3,3]"],
            &["float[n,32,h,w]"],
        ),
        case(
            "Conv",
            11,
            vec![ints("strides", &[2, 2])],
            &["float[n,16,h,w]", "float[32,16,3,3]"],
            &["float[n,32,?,?]"],
        ),
        case(
            "Conv",
            11,
            vec![int("group", 4), ints("dilations", &[2]), ints("strides", &[3])],
            &["float[2,12,29]", "float[8,3,5]"],
            &["float[2,8,7]"],
        ),
        case(
            "Conv",
            11,
            vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2])],
            &["float[1,3,13]", "float[5,3,4]"],
            &["float[1,5,7]"],
        ),
        case("Conv", 11, vec![string("auto_pad", "SAME_LOWER")], &["float[1,3,s]", "float[5,3,4]"], &["float[1,5,s]"]),
        case(
            "Conv",
            1,
            vec![string("auto_pad", "VALID"), ints("pads", &[9, 9])],
            &["float[1,3,13]", "float[5,3,4]"],
            &["float[1,5,10]"],
        ),
        case("Conv", 22, vec![ints("kernel_shape", &[3, 3])], &["float[...]", "float[...]"], &["float[...]"]),
        case("Conv", 22, vec![], &["float[...]", "float[6,2,3,3]"], &["float[?,6,?,?]"]),
        case("Conv", 22, vec![ints("kernel_shape", &[3, 3])], &["float16[1,3,9,11]", "?"], &["float16[1,?,7,9]"]),
    ]);
}

#[test]
fn conv_errors() {
    check_errors(vec![
        (
            case("Conv", 11, vec![], &["float[1,3,9,9]", "float[8,4,3,3]"], &[""]),
            vec!["Conv node 'n'", "input 1", "3 channels", "[8,4,3,3]"],
        ),
        (
            case("Conv", 11, vec![int("group", 2)], &["float[1,4,9,9]", "float[7,2,3,3]"], &[""]),
            vec!["divisible by group 2", "7"],
        ),
        (case("Conv", 11, vec![], &["float[1,3,9]", "float[8,3,3,3]"], &[""]), vec!["input 1", "rank 3"]),
        (case("Conv", 11, vec![], &["float[1,3]", "float[8,3]"], &[""]), vec!["input 0", "rank ≥ 3"]),
        (case("Conv", 11, vec![], &["float[1,3,2]", "float[8,3,5]"], &[""]), vec!["input 0", "extent 5", "size 2"]),
        (case("Conv", 11, vec![], &["float[1,3,9]", "float[8,3,3]", "float[7]"], &[""]), vec!["input 2", "[8]", "[7]"]),
        (
            case("Conv", 11, vec![ints("kernel_shape", &[5])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
            vec!["kernel size 5", "3"],
        ),
        (
            case("Conv", 11, vec![ints("strides", &[0])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
            vec!["'strides'", "[0]"],
        ),
        (
            case("Conv", 11, vec![ints("pads", &[1, 1, 1])], &["float[1,3,9]", "float[8,3,3]"], &[""]),
            vec!["'pads'", "2 non-negative"],
        ),
        (
            case("Conv", 11, vec![string("auto_pad", "BOGUS")], &["float[1,3,9]", "float[8,3,3]"], &[""]),
            vec!["'auto_pad'", "BOGUS"],
        ),
    ]);
}

#[test]
fn conv_transpose_shapes() {
    check_all(vec![
        case("ConvTranspose", 11, vec![], &["float[1,3,5,7]", "float[3,2,3,3]"], &["float[1,2,7,9]"]),
        case(
            "ConvTranspose",
            11,
            vec![ints("strides", &[3, 2]), ints("output_padding", &[1, 1]), ints("pads", &[1, 2, 1, 2])],
            &["float[1,1,3,3]", "float[1,2,3,3]"],
            &["float[1,2,8,4]"],
        ),
        case("ConvTranspose", 11, vec![int("group", 3)], &["float[n,6,s]", "float[6,5,1]"], &["float[n,15,s]"]),
        case(
            "ConvTranspose",
            11,
            vec![ints("output_shape", &[10, 8])],
            &["float[1,3,5,7]", "float[3,2,3,3]"],
            &["float[1,2,10,8]"],
        ),
        case(
            "ConvTranspose",
            11,
            vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2])],
            &["float[1,3,5]", "float[3,4,3]"],
            &["float[1,4,10]"],
        ),
    ]);
    check_errors(vec![
        (
            case("ConvTranspose", 11, vec![], &["float[1,3,5]", "float[4,2,3]"], &[""]),
            vec!["input 1", "3 input channels"],
        ),
        (
            case("ConvTranspose", 11, vec![ints("pads", &[5, 5])], &["float[1,3,2]", "float[3,2,3]"], &[""]),
            vec!["input 0", "padding"],
        ),
    ]);
}

#[test]
fn pool_shapes() {
    check_all(vec![
        case(
            "MaxPool",
            12,
            vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2])],
            &["float[1,64,112,112]"],
            &["float[1,64,55,55]", "int64[1,64,55,55]"],
        ),
        case(
            "MaxPool",
            12,
            vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
            &["float[n,64,112,112]"],
            &["float[n,64,56,56]", "int64[n,64,56,56]"],
        ),
        // Ceil mode keeps a partial window, but not one that starts in the end padding.
        case(
            "MaxPool",
            12,
            vec![ints("kernel_shape", &[5]), ints("strides", &[3])],
            &["float[1,1,3]"],
            &["float[1,1,1]", "int64[1,1,1]"],
        ),
        case(
            "MaxPool",
            12,
            vec![ints("kernel_shape", &[2]), ints("strides", &[2]), int("ceil_mode", 1)],
            &["float[1,1,5]"],
            &["float[1,1,3]", "int64[1,1,3]"],
        ),
        case(
            "AveragePool",
            19,
            vec![ints("kernel_shape", &[2]), ints("strides", &[2]), ints("pads", &[0, 1]), int("ceil_mode", 1)],
            &["float[1,1,4]"],
            &["float[1,1,2]"],
        ),
        case(
            "AveragePool",
            11,
            vec![ints("kernel_shape", &[3]), ints("pads", &[1, 1])],
            &["float[b,c,s]"],
            &["float[b,c,s]"],
        ),
        case(
            "LpPool",
            18,
            vec![ints("kernel_shape", &[2, 2]), ints("dilations", &[2, 1])],
            &["float[2,3,9,9]"],
            &["float[2,3,7,8]"],
        ),
        case(
            "MaxPool",
            12,
            vec![ints("kernel_shape", &[2, 2])],
            &["float[...]"],
            &["float[?,?,?,?]", "int64[?,?,?,?]"],
        ),
        case("GlobalAveragePool", 1, vec![], &["float[n,512,7,9]"], &["float[n,512,1,1]"]),
        case("GlobalMaxPool", 1, vec![], &["float16[2,3,s]"], &["float16[2,3,1]"]),
        case("GlobalMaxPool", 1, vec![], &["float[...]"], &["float[...]"]),
    ]);
    check_errors(vec![
        (case("MaxPool", 12, vec![], &["float[1,3,9,9]"], &[""]), vec!["'kernel_shape'"]),
        (
            case("MaxPool", 12, vec![ints("kernel_shape", &[3])], &["float[1,3,9,9]"], &[""]),
            vec!["'kernel_shape'", "2 values", "[3]"],
        ),
        (case("GlobalAveragePool", 1, vec![], &["float[3]"], &[""]), vec!["input 0", "rank ≥ 2"]),
        (
            case("MaxPool", 12, vec![ints("kernel_shape", &[5])], &["float[1,3,1]"], &[""]),
            vec!["input 0", "extent 5", "size 1"],
        ),
    ]);
}

#[test]
fn matmul_and_gemm_shapes() {
    check_all(vec![
        case("MatMul", 13, vec![], &["float[b,s,768]", "float[768,3072]"], &["float[b,s,3072]"]),
        case("MatMul", 13, vec![], &["float[b,12,s,64]", "float[b,12,64,s]"], &["float[b,12,s,s]"]),
        case("MatMul", 13, vec![], &["float[7]", "float[7]"], &["float[]"]),
        case("MatMul", 13, vec![], &["float[7]", "float[3,7,5]"], &["float[3,5]"]),
        case("MatMul", 13, vec![], &["float[2,1,3,7]", "float[7,5]"], &["float[2,1,3,5]"]),
        case("MatMul", 13, vec![], &["float[2,1,3,7]", "float[5,7,9]"], &["float[2,5,3,9]"]),
        case("MatMul", 13, vec![], &["float[m,k]", "float[?,n]"], &["float[m,n]"]),
        case("MatMul", 13, vec![], &["float[...]", "float[3,4]"], &["float[...]"]),
        case("MatMulInteger", 10, vec![], &["uint8[s,5]", "int8[5,3]"], &["int32[s,3]"]),
        case("Gemm", 13, vec![], &["float[n,9]", "float[9,5]", "float[5]"], &["float[n,5]"]),
        case("Gemm", 13, vec![int("transA", 1), int("transB", 1)], &["float[9,3]", "float[5,9]"], &["float[3,5]"]),
        case("Gemm", 13, vec![], &["float[m,9]", "float[9,5]", "float[7,1]"], &["float[7,5]"]),
    ]);
    check_errors(vec![
        (
            case("MatMul", 13, vec![], &["float[2,3]", "float[4,5]"], &[""]),
            vec!["MatMul node 'n'", "input 1", "inner dimension 3", "4"],
        ),
        (case("MatMul", 13, vec![], &["float[2,5,3]", "float[4,3,5]"], &[""]), vec!["batch dimensions", "[2]"]),
        (case("MatMul", 13, vec![], &["float[]", "float[3]"], &[""]), vec!["input 0", "rank ≥ 1"]),
        (case("MatMul", 13, vec![], &["float[3]", "double[3]"], &[""]), vec!["double"]),
        (
            case("Gemm", 13, vec![int("transB", 1)], &["float[2,3]", "float[3,4]"], &[""]),
            vec!["Gemm", "inner dimension 3", "4"],
        ),
        (case("Gemm", 13, vec![], &["float[2,3,1]", "float[3,4]"], &[""]), vec!["input 0", "rank 2"]),
        (case("Gemm", 13, vec![], &["float[2,3]", "float[3,4]", "float[3]"], &[""]), vec!["input 2", "[2,4]"]),
    ]);
}

#[test]
fn normalization_shapes() {
    check_all(vec![
        case(
            "BatchNormalization",
            15,
            vec![],
            &["float[n,16,h,w]", "float[16]", "float[16]", "float[16]", "float[16]"],
            &["float[n,16,h,w]"],
        ),
        case(
            "BatchNormalization",
            15,
            vec![int("training_mode", 1)],
            &["float16[n,16,5]", "float16[16]", "float16[16]", "float[16]", "float[16]"],
            &["float16[n,16,5]", "float[16]", "float[16]"],
        ),
        case(
            "BatchNormalization",
            9,
            vec![],
            &["float[n,c,5]", "", "", "", ""],
            &["float[n,c,5]", "float[c]", "float[c]", "float[c]", "float[c]"],
        ),
        case("InstanceNormalization", 6, vec![], &["float[n,3,s]", "float[3]", "float[3]"], &["float[n,3,s]"]),
        case(
            "GroupNormalization",
            21,
            vec![int("num_groups", 2)],
            &["float[n,4,s]", "float[4]", "float[4]"],
            &["float[n,4,s]"],
        ),
        case(
            "LayerNormalization",
            17,
            vec![],
            &["float16[b,s,768]", "float16[768]"],
            &["float16[b,s,768]", "float[b,s,1]", "float[b,s,1]"],
        ),
        case(
            "LayerNormalization",
            17,
            vec![int("axis", 1), int("stash_type", 11)],
            &["float[2,3,5]"],
            &["float[2,3,5]", "double[2,1,1]", "double[2,1,1]"],
        ),
        case("Softmax", 13, vec![], &["float[b,12,s,s]"], &["float[b,12,s,s]"]),
        case("LogSoftmax", 11, vec![int("axis", -2)], &["float[3,7]"], &["float[3,7]"]),
        case("Hardmax", 13, vec![int("axis", 0)], &["float[...]"], &["float[...]"]),
        case("Dropout", 13, vec![], &["float[b,s,768]", "", ""], &["float[b,s,768]", "bool[b,s,768]"]),
        case("Dropout", 7, vec![], &["float16[3]"], &["float16[3]", "float16[3]"]),
    ]);
    check_errors(vec![
        (
            case("BatchNormalization", 15, vec![], &["float[1,16,5]", "float[15]", "", "", ""], &[""]),
            vec!["input 1", "[16]", "[15]"],
        ),
        (case("LayerNormalization", 17, vec![int("axis", 3)], &["float[2,3,5]"], &[""]), vec!["'axis'", "3"]),
        (case("Softmax", 13, vec![int("axis", 2)], &["float[2,3]"], &[""]), vec!["'axis'", "[-2, 1]"]),
    ]);
}

/// Output shapes onnxruntime computed for random pools:
/// (op, input, kernel, strides, dilations, pads, ceil_mode, output).
#[test]
#[allow(clippy::type_complexity)]
fn pools_match_onnxruntime() {
    let cases: &[(&str, &[usize], &[i64], &[i64], &[i64], &[i64], i64, &[usize])] = &[
        ("AveragePool", &[1, 2, 9], &[1], &[1], &[3], &[0, 0], 0, &[1, 2, 9]),
        ("MaxPool", &[1, 2, 4], &[4], &[4], &[1], &[1, 0], 1, &[1, 2, 2]),
        ("MaxPool", &[1, 2, 6], &[5], &[1], &[3], &[4, 3], 0, &[1, 2, 1]),
        ("MaxPool", &[1, 2, 11], &[2], &[3], &[2], &[0, 0], 1, &[1, 2, 4]),
        ("MaxPool", &[1, 2, 12], &[5], &[2], &[2], &[0, 4], 0, &[1, 2, 4]),
        ("MaxPool", &[1, 2, 10], &[5], &[4], &[2], &[3, 4], 1, &[1, 2, 3]),
        ("AveragePool", &[1, 2, 6, 15], &[2, 2], &[1, 3], &[3, 2], &[1, 1, 1, 0], 0, &[1, 2, 5, 5]),
        ("AveragePool", &[1, 2, 15], &[3], &[2], &[2], &[1, 0], 0, &[1, 2, 6]),
        ("AveragePool", &[1, 2, 14, 8], &[5, 4], &[4, 1], &[1, 2], &[3, 0, 0, 2], 1, &[1, 2, 4, 4]),
        ("AveragePool", &[1, 2, 17, 13], &[3, 1], &[4, 3], &[1, 3], &[0, 0, 0, 0], 1, &[1, 2, 5, 5]),
        ("MaxPool", &[1, 2, 9], &[4], &[4], &[1], &[1, 3], 1, &[1, 2, 3]),
        ("AveragePool", &[1, 2, 16], &[4], &[3], &[3], &[3, 2], 1, &[1, 2, 5]),
        ("MaxPool", &[1, 2, 4], &[2], &[2], &[1], &[0, 0], 1, &[1, 2, 2]),
        ("MaxPool", &[1, 2, 7, 3], &[2, 4], &[3, 3], &[1, 3], &[0, 3, 1, 3], 1, &[1, 2, 3, 1]),
    ];
    for &(op, x, k, s, d, p, ceil, want) in cases {
        let attrs = vec![
            ints("kernel_shape", k),
            ints("strides", s),
            ints("dilations", d),
            ints("pads", p),
            int("ceil_mode", ceil),
        ];
        let input = format!("float{x:?}").replace(' ', "");
        let out = run(&node(op, 1, 1, attrs), 19, &[Some(ty(&input))]).unwrap();
        assert_eq!(
            show(&out[0]),
            format!("float{want:?}").replace(' ', ""),
            "{op} {x:?} k{k:?} s{s:?} d{d:?} p{p:?} ceil {ceil}"
        );
    }
}

/// Output shapes onnxruntime computed for random transposed convolutions:
/// (input, weights, strides, dilations, pads, output_padding, group, output).
#[test]
#[allow(clippy::type_complexity)]
fn conv_transpose_matches_onnxruntime() {
    let cases: &[(&[usize], &[usize], &[i64], &[i64], &[i64], &[i64], i64, &[usize])] = &[
        (&[1, 2, 2, 5], &[2, 2, 1, 2], &[2, 1], &[1, 2], &[0, 0, 0, 0], &[0, 0], 1, &[1, 2, 3, 7]),
        (&[1, 2, 5], &[2, 1, 4], &[1], &[2], &[2, 2], &[0], 2, &[1, 2, 7]),
        (&[1, 1, 9, 9], &[1, 2, 4, 3], &[1, 1], &[1, 2], &[2, 1, 2, 1], &[0, 0], 1, &[1, 2, 8, 11]),
        (&[1, 2, 6], &[2, 1, 1], &[3], &[2], &[0, 0], &[0], 2, &[1, 2, 16]),
        (&[1, 2, 5, 5], &[2, 1, 4, 2], &[1, 3], &[2, 2], &[0, 0, 0, 0], &[0, 1], 1, &[1, 1, 11, 16]),
        (&[1, 2, 7, 7], &[2, 2, 1, 2], &[1, 1], &[2, 1], &[0, 0, 0, 0], &[0, 0], 1, &[1, 2, 7, 8]),
        (&[1, 2, 8, 5], &[2, 1, 4, 2], &[2, 3], &[2, 1], &[3, 1, 3, 1], &[1, 2], 2, &[1, 2, 16, 14]),
        (&[1, 1, 2], &[1, 1, 2], &[3], &[2], &[0, 0], &[2], 1, &[1, 1, 8]),
        (&[1, 2, 2, 2], &[2, 1, 1, 2], &[2, 1], &[1, 1], &[0, 0, 0, 0], &[1, 0], 2, &[1, 2, 4, 3]),
        (&[1, 4, 2, 7], &[4, 1, 4, 4], &[3, 1], &[1, 1], &[3, 1, 3, 1], &[2, 0], 2, &[1, 2, 3, 8]),
        (&[1, 1, 3], &[1, 2, 1], &[2], &[2], &[0, 0], &[0], 1, &[1, 2, 5]),
        (&[1, 2, 3], &[2, 1, 4], &[3], &[1], &[0, 0], &[1], 1, &[1, 1, 11]),
    ];
    for &(x, w, s, d, p, op, g, want) in cases {
        let attrs = vec![
            ints("strides", s),
            ints("dilations", d),
            ints("pads", p),
            ints("output_padding", op),
            int("group", g),
        ];
        let shape = |v: &[usize]| format!("float{v:?}").replace(' ', "");
        let out = run(&node("ConvTranspose", 2, 1, attrs), 11, &[Some(ty(&shape(x))), Some(ty(&shape(w)))]).unwrap();
        assert_eq!(show(&out[0]), shape(want), "{x:?} {w:?} s{s:?} d{d:?} p{p:?} op{op:?} g{g}");
    }
}

#[test]
fn packed_attention_takes_the_head_size_from_the_packed_rows() {
    let onyx = |attrs: Vec<crate::ir::Attribute>| {
        let mut n = node("PackedAttention", 2, 1, attrs);
        n.domain = crate::ir::ONYX_DOMAIN.into();
        n
    };
    let heads = onyx(vec![int("q_num_heads", 4), int("kv_num_heads", 2)]);
    // (4 + 2 * 2) heads of 8 side by side; Y holds the 4 query heads.
    let out = run(&heads, 1, &[Some(ty("float[b,7,64]")), Some(ty("float[7,7]"))]).unwrap();
    assert_eq!(show(&out[0]), "float[b,7,32]");
    let out = run(&heads, 1, &[Some(ty("float16[2,3,16]")), None]).unwrap();
    assert_eq!(show(&out[0]), "float16[2,3,8]");
    let e = run(&heads, 1, &[Some(ty("float[3,64]")), None]).unwrap_err().to_string();
    assert!(e.contains("3-D"), "{e}");
    let e = run(&onyx(vec![int("q_num_heads", 4)]), 1, &[Some(ty("float[1,3,64]")), None]).unwrap_err().to_string();
    assert!(e.contains("kv_num_heads"), "{e}");
}

#[test]
fn gemm_skip_layer_norm_takes_the_skip_shape() {
    let mut n = node("GemmSkipLayerNormalization", 6, 2, vec![int("transB", 1)]);
    n.domain = crate::ir::ONYX_DOMAIN.into();
    // A [6, 8] times B^T ([5, 8] read transposed): 6 rows of 5, in the skip's [2, 3, 5].
    let inputs = ["float[6,8]", "float[5,8]", "float[5]", "float[2,3,5]", "float[5]", "float[5]"].map(|t| Some(ty(t)));
    let out = run(&n, 1, &inputs).unwrap();
    assert_eq!((show(&out[0]), show(&out[1])), ("float[2,3,5]".into(), "float[2,3,5]".into()));
    let mut wrong = inputs.clone();
    wrong[3] = Some(ty("float[3,3,5]"));
    let e = run(&n, 1, &wrong).unwrap_err().to_string();
    assert!(e.contains("6 x 5 elements"), "{e}");
    wrong[3] = Some(ty("float[2,3,5]"));
    wrong[2] = Some(ty("float[6,5]"));
    let e = run(&n, 1, &wrong).unwrap_err().to_string();
    assert!(e.contains("vector [5]"), "the bias is a row vector: {e}");
    wrong[3] = Some(ty("float16[2,3,5]"));
    assert!(run(&n, 1, &wrong).is_err(), "the skip's element type must be A's");
}
