//! Tests of the slicing inference rules.

use super::super::testutil::*;
use super::slice_range;
use crate::ops::infer::Inferred;

#[test]
fn concat_shapes_and_values() {
    check_all(vec![
        case("Concat", 13, vec![int("axis", 1)], &["float[b,3,s]", "float[b,5,s]"], &["float[b,8,s]"]),
        case("Concat", 13, vec![int("axis", -1)], &["float[b,s,64]", "float[?,s,k]"], &["float[b,s,?]"]),
        case("Concat", 13, vec![int("axis", 0)], &["float[0,7]", "float[n,7]"], &["float[n,7]"]),
        case("Concat", 13, vec![int("axis", 0)], &["float[2,?]", "float[...]", "float[3,7]"], &["float[?,7]"]),
        case("Concat", 13, vec![int("axis", 0)], &["float[...]", "?"], &["float[...]"]),
    ]);
    let out = run(
        &node("Concat", 4, 1, vec![int("axis", 0)]),
        13,
        &[Some(syms(&["batch"])), Some(syms(&["seq"])), Some(i64s(&[12])), Some(i64s(&[64]))],
    )
    .unwrap();
    assert_eq!(sym_of(&out[0]).unwrap(), vec!["batch", "seq", "12", "64"]);
    assert!(out[0].constant.is_none());
    let out =
        run(&node("Concat", 2, 1, vec![int("axis", 0)]), 13, &[Some(i64s(&[2, 3])), Some(ty("int64[2]"))]).unwrap();
    assert_eq!(sym_of(&out[0]).unwrap(), vec!["2", "3", "?", "?"]);
    check_errors(vec![
        (
            case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "float[2,3,1]"], &[""]),
            vec!["Concat node 'n'", "input 1", "rank 2", "rank 3"],
        ),
        (
            case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "float[2,4]"], &[""]),
            vec!["input 1", "size 3 on axis 1", "[2,4]"],
        ),
        (case("Concat", 13, vec![int("axis", 2)], &["float[2,3]", "float[2,3]"], &[""]), vec!["'axis'", "2"]),
        (case("Concat", 13, vec![], &["float[2,3]"], &[""]), vec!["'axis'", "nothing"]),
        (case("Concat", 13, vec![int("axis", 0)], &["float[2,3]", "int32[2,3]"], &[""]), vec!["int32"]),
    ]);
}

#[test]
fn split_shapes() {
    let split_in = |data: &str, sizes: Inferred, want: &[&'static str]| {
        case_with("Split", 13, vec![int("axis", 1)], vec![Some(ty(data)), Some(sizes)], want)
    };
    check_all(vec![
        case("Split", 11, vec![int("axis", 1)], &["float[b,9]"], &["float[b,3]", "float[b,3]", "float[b,3]"]),
        case("Split", 11, vec![ints("split", &[2, 7])], &["float[9,s]"], &["float[2,s]", "float[7,s]"]),
        split_in("float[b,10,s]", i64s(&[3, 7]), &["float[b,3,s]", "float[b,7,s]"]),
        split_in("float[b,10]", ty("int64[2]"), &["float[b,?]", "float[b,?]"]),
        case("Split", 18, vec![int("num_outputs", 3)], &["float[7]"], &["float[3]", "float[3]", "float[1]"]),
        case("Split", 18, vec![int("num_outputs", 2), int("axis", -1)], &["float[b,s]"], &["float[b,?]", "float[b,?]"]),
        case("Split", 13, vec![], &["float[s,4]"], &["float[s,4]"]),
        case("Split", 13, vec![], &["float[...]"], &["float[...]", "float[...]"]),
    ]);
    let out = run(&node("Split", 2, 2, vec![]), 13, &[Some(syms(&["b", "s", "768"])), Some(i64s(&[2, 1]))]).unwrap();
    assert_eq!(
        (sym_of(&out[0]).unwrap(), sym_of(&out[1]).unwrap()),
        (vec!["b".into(), "s".into()], vec!["768".into()])
    );
    check_errors(vec![
        (case("Split", 11, vec![], &["float[7]"], &["", ""]), vec!["Split node 'n'", "divisible into 2", "size 7"]),
        (
            case("Split", 11, vec![ints("split", &[3, 3])], &["float[7]"], &["", ""]),
            vec!["'split'", "[3, 3]", "size 7"],
        ),
        (split_in("float[2,7]", i64s(&[7]), &["", ""]), vec!["input 1", "2 sizes"]),
        (case("Split", 18, vec![int("num_outputs", 3)], &["float[7]"], &["", ""]), vec!["'num_outputs'", "2"]),
    ]);
}

#[test]
fn slice_range_matches_numpy() {
    // (n, start, end, step, first, count) from Python: len(range(n)[start:end:step])
    let cases = [
        (10, 2, 7, 1, 2, 5),
        (10, -3, 100, 1, 7, 3),
        (10, 0, -1, 2, 0, 5),
        (10, 9, -100, -1, 9, 10),
        (10, -1, -11, -3, 9, 4),
        (10, 0, 10, i64::MIN, 0, 0),
        (10, 9, -11, i64::MIN, 9, 1),
        (0, -1, -5, -1, 0, 0),
        (10, 5, 2, 1, 5, 0),
        (7, 100, 0, -2, 6, 3),
        (0, 0, 5, 1, 0, 0),
        (5, i64::MIN, i64::MAX, 1, 0, 5),
    ];
    for (n, s, e, step, first, count) in cases {
        assert_eq!(slice_range(n, s, e, step), (first, count), "n={n} {s}:{e}:{step}");
    }
}

#[test]
fn slice_shapes_and_values() {
    let sl = |data: &str,
              starts: Inferred,
              ends: Inferred,
              axes: Option<Inferred>,
              steps: Option<Inferred>,
              want: &'static str| {
        case_with("Slice", 13, vec![], vec![Some(ty(data)), Some(starts), Some(ends), axes, steps], &[want])
    };
    check_all(vec![
        sl("float[10,b,7]", i64s(&[2, 1]), i64s(&[-1, 100]), None, None, "float[7,?,7]"),
        sl("float[b,s,768]", i64s(&[0]), i64s(&[i64::MAX]), Some(i64s(&[1])), None, "float[b,s,768]"),
        sl("float[b,s,768]", i64s(&[0]), syms(&["s"]), Some(i64s(&[1])), None, "float[b,s,768]"),
        sl("float[b,s,768]", i64s(&[0]), syms(&["b"]), Some(i64s(&[1])), None, "float[b,b,768]"),
        sl("int64[1,512]", i64s(&[0]), syms(&["seq"]), Some(i64s(&[1])), None, "int64[1,seq]"),
        sl("int64[1,512]", i64s(&[1]), syms(&["seq"]), Some(i64s(&[1])), None, "int64[1,?]"),
        sl("float[b,s,9]", i64s(&[-1]), i64s(&[i64::MIN]), Some(i64s(&[-1])), Some(i64s(&[-2])), "float[b,s,5]"),
        sl("float[b,s,9]", i64s(&[-1]), i64s(&[-i64::MAX]), Some(i64s(&[1])), Some(i64s(&[-1])), "float[b,s,9]"),
        sl("float[b,s,9]", ty("int64[1]"), i64s(&[3]), Some(i64s(&[2])), None, "float[b,s,?]"),
        sl("float[b,s,9]", i64s(&[0]), i64s(&[3]), Some(ty("int64[1]")), None, "float[?,?,?]"),
        sl("float[b,s,9]", i64s(&[0]), i64s(&[3]), None, Some(ty("int64[1]")), "float[?,s,9]"),
        sl("float[...]", i64s(&[0]), i64s(&[3]), None, None, "float[...]"),
        case(
            "Slice",
            1,
            vec![ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])],
            &["float[4,9]"],
            &["float[4,2]"],
        ),
    ]);
    let out =
        run(&node("Slice", 3, 1, vec![]), 13, &[Some(syms(&["b", "s", "768"])), Some(i64s(&[0])), Some(i64s(&[2]))])
            .unwrap();
    assert_eq!(sym_of(&out[0]).unwrap(), vec!["b", "s"]);
    let out = run(
        &node("Slice", 5, 1, vec![]),
        13,
        &[Some(syms(&["b", "s", "7"])), Some(i64s(&[-1])), Some(i64s(&[-9])), Some(i64s(&[0])), Some(i64s(&[-1]))],
    )
    .unwrap();
    assert_eq!(sym_of(&out[0]).unwrap(), vec!["7", "s", "b"]);
    check_errors(vec![
        (
            sl("float[3,4]", i64s(&[0, 0]), i64s(&[1]), None, None, ""),
            vec!["Slice node 'n'", "input 2", "as many ends as starts"],
        ),
        (sl("float[3,4]", i64s(&[0]), i64s(&[1]), Some(i64s(&[2])), None, ""), vec!["input 3", "[-2, 1]"]),
        (sl("float[3,4]", i64s(&[0, 0]), i64s(&[1, 1]), Some(i64s(&[1, -1])), None, ""), vec!["without repeats"]),
        (sl("float[3,4]", i64s(&[0]), i64s(&[1]), None, Some(i64s(&[0])), ""), vec!["input 4", "non-zero"]),
    ]);
}

#[test]
fn pad_shapes() {
    let pd = |data: &str, pads: Inferred, axes: Option<Inferred>, want: &'static str| {
        case_with("Pad", 18, vec![], vec![Some(ty(data)), Some(pads), None, axes], &[want])
    };
    check_all(vec![
        pd("float[1,3,5,7]", i64s(&[0, 0, 1, 2, 0, 0, 1, 2]), None, "float[1,3,7,11]"),
        pd("float[b,3,s]", i64s(&[0, 0, 0, 0, 1, 0]), None, "float[b,4,s]"),
        pd("float[b,3,s]", i64s(&[2, -1]), Some(i64s(&[-1])), "float[b,3,?]"),
        pd("float[b,3,5]", i64s(&[2, -1]), Some(i64s(&[-1])), "float[b,3,6]"),
        pd("float[b,3,5]", ty("int64[6]"), None, "float[?,?,?]"),
        case("Pad", 2, vec![ints("pads", &[1, 0, 1, 0])], &["float[3,s]"], &["float[5,s]"]),
    ]);
    check_errors(vec![
        (pd("float[3,4]", i64s(&[1, 1, 1]), None, ""), vec!["Pad node 'n'", "input 1", "4 pads"]),
        (pd("float[3,4]", i64s(&[-2, 0, -2, 0]), None, ""), vec!["axis 0 (size 3)", "-4"]),
    ]);
}

#[test]
fn resize_shapes() {
    let rs = |data: &str, scales: Option<Inferred>, sizes: Option<Inferred>, attrs, want: &'static str| {
        case_with("Resize", 19, attrs, vec![Some(ty(data)), None, scales, sizes], &[want])
    };
    check_all(vec![
        rs("float[1,3,5,7]", Some(f32s(&[1.0, 1.0, 2.0, 1.5])), None, vec![], "float[1,3,10,10]"),
        rs("float[n,3,h,w]", Some(f32s(&[1.0, 1.0, 2.0, 2.0])), None, vec![], "float[n,3,?,?]"),
        rs("float[n,3,h,w]", Some(f32s(&[])), Some(i64s(&[1, 3, 64, 32])), vec![], "float[1,3,64,32]"),
        rs("float[n,3,h,w]", None, Some(i64s(&[64, 32])), vec![ints("axes", &[2, 3])], "float[n,3,64,32]"),
        rs(
            "float[1,3,20,10]",
            None,
            Some(i64s(&[8, 8])),
            vec![ints("axes", &[2, 3]), string("keep_aspect_ratio_policy", "not_larger")],
            "float[1,3,8,4]",
        ),
        rs(
            "float[1,3,20,10]",
            None,
            Some(i64s(&[8, 8])),
            vec![ints("axes", &[2, 3]), string("keep_aspect_ratio_policy", "not_smaller")],
            "float[1,3,16,8]",
        ),
        rs("float[n,3,h,w]", None, Some(ty("int64[4]")), vec![], "float[?,?,?,?]"),
        rs("float[...]", None, Some(ty("int64[4]")), vec![], "float[?,?,?,?]"),
        case_with(
            "Resize",
            10,
            vec![],
            vec![Some(ty("float[2,3,4]")), Some(f32s(&[1.0, 0.5, 2.5]))],
            &["float[2,1,10]"],
        ),
        case_with(
            "Resize",
            13,
            vec![string("coordinate_transformation_mode", "tf_crop_and_resize")],
            vec![Some(ty("float[1,10]")), Some(f32s(&[0.0, 0.0, 1.0, 0.5])), Some(f32s(&[1.0, 2.0]))],
            &["float[1,10]"],
        ),
    ]);
    check_errors(vec![
        (
            rs("float[1,3,5,7]", Some(f32s(&[2.0, 2.0])), None, vec![], ""),
            vec!["Resize node 'n'", "input 2", "4 scales"],
        ),
        (rs("float[1,3,5,7]", Some(f32s(&[2.0; 4])), Some(i64s(&[1, 3, 5, 7])), vec![], ""), vec!["input 3", "both"]),
    ]);
}

/// Output shapes onnxruntime computed for Resize with random scales: (input, scales, output).
#[test]
fn resize_matches_onnxruntime() {
    let cases: &[(&[usize], &[f32], &[usize])] = &[
        (&[1, 2, 11, 10], &[1.0, 1.0, 1.94, 0.84], &[1, 2, 21, 8]),
        (&[1, 2, 9, 10], &[1.0, 1.0, 1.74, 1.59], &[1, 2, 15, 15]),
        (&[1, 1, 13, 10], &[1.0, 1.0, 2.67, 2.84], &[1, 1, 34, 28]),
        (&[1, 2, 10, 5], &[1.0, 1.0, 2.57, 0.67], &[1, 2, 25, 3]),
        (&[1, 1, 8, 9], &[1.0, 1.0, 1.15, 2.11], &[1, 1, 9, 18]),
        (&[1, 2, 3, 5], &[1.0, 1.0, 2.11, 2.42], &[1, 2, 6, 12]),
        (&[1, 1, 13, 12], &[1.0, 1.0, 2.08, 0.69], &[1, 1, 27, 8]),
        (&[1, 1, 9, 5], &[1.0, 1.0, 2.32, 0.55], &[1, 1, 20, 2]),
        (&[1, 2, 4, 12], &[1.0, 1.0, 2.55, 0.74], &[1, 2, 10, 8]),
        (&[1, 2, 10, 8], &[1.0, 1.0, 1.22, 0.83], &[1, 2, 12, 6]),
    ];
    for &(x, scales, want) in cases {
        let shape = |v: &[usize]| format!("float{v:?}").replace(' ', "");
        let out = run(&node("Resize", 3, 1, vec![]), 19, &[Some(ty(&shape(x))), None, Some(f32s(scales))]).unwrap();
        assert_eq!(show(&out[0]), shape(want), "{x:?} {scales:?}");
    }
}

/// Python's `range(n)[start:end:step]` for random arguments: (n, start, end, step, first, len).
#[test]
#[allow(clippy::type_complexity)]
fn slice_range_matches_python() {
    const NONE: Option<i64> = None;
    let cases: &[(usize, i64, i64, i64, Option<i64>, usize)] = &[
        (5, -13, 2147483647, 1, Some(0), 5),
        (5, 2, 2147483647, -4, NONE, 0),
        (0, -3, -2147483648, -2, NONE, 0),
        (4, 1, 15, 1, Some(1), 3),
        (12, -8, 13, 1, Some(4), 8),
        (4, -7, -14, 3, NONE, 0),
        (12, -11, 2147483647, -4, NONE, 0),
        (4, -3, -2147483648, -2, Some(1), 1),
        (9, 0, 2147483647, 1, Some(0), 9),
        (4, -14, -2147483648, 2, NONE, 0),
        (6, 13, 2147483647, 1, NONE, 0),
        (10, -13, 2147483647, 1, Some(0), 10),
    ];
    for &(n, s, e, step, first, len) in cases {
        let (f, count) = slice_range(n, s, e, step);
        assert_eq!(count, len, "range({n})[{s}:{e}:{step}]");
        if let Some(first) = first {
            assert_eq!(f, first, "range({n})[{s}:{e}:{step}]");
        }
    }
}
