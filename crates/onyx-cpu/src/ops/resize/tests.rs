use onyx_core::{DataType, Tensor};

use crate::ops::layout::testkit::*;

/// An attribute of a generated case.
pub(super) enum A {
    S(&'static str, &'static str),
    F(&'static str, f32),
    I(&'static str, i64),
    Is(&'static str, &'static [i64]),
}

/// A Resize case with its expected output from ONNX's reference implementation.
pub(super) struct Case {
    name: &'static str,
    opset: i64,
    shape: &'static [usize],
    attrs: &'static [A],
    scales: Option<&'static [f32]>,
    sizes: Option<&'static [i64]>,
    roi: Option<&'static [f32]>,
    input: &'static [f32],
    out_shape: &'static [usize],
    expected: &'static [f32],
}

#[allow(clippy::approx_constant, clippy::excessive_precision)]
mod cases {
    use super::{Case, A};
    include!("cases.rs");
}

fn attrs(list: &[A]) -> Vec<Attr> {
    list.iter()
        .map(|a| match *a {
            A::S(n, v) => string(n, v),
            A::F(n, v) => float(n, v),
            A::I(n, v) => int(n, v),
            A::Is(n, v) => ints(n, v),
        })
        .collect()
}

/// The inputs `(X, roi, scales, sizes)` of Resize-11 and later.
fn inputs(x: Tensor, roi: Option<&[f32]>, scales: Option<&[f32]>, sizes: Option<&[i64]>) -> Vec<Option<Tensor>> {
    let f = |v: &[f32]| t(&[v.len()], v.to_vec());
    vec![Some(x), roi.map(f), scales.map(f), sizes.map(i64s)]
}

#[test]
fn matches_onnx_reference_cases() {
    for c in cases::CASES {
        let x = t(c.shape, c.input.to_vec());
        let y = run1("Resize", c.opset, attrs(c.attrs), &inputs(x, c.roi, c.scales, c.sizes))
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(y.shape(), c.out_shape, "{}", c.name);
        let got = y.as_slice::<f32>().unwrap();
        for (i, (g, w)) in got.iter().zip(c.expected).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{}: element {i}: got {g}, want {w}", c.name);
        }
    }
}

#[test]
fn uint8_rounds_and_saturates_like_the_reference() {
    let x = t(&[3, 4], vec![197u8, 84, 117, 137, 245, 217, 125, 167, 51, 205, 141, 136]);
    let y = run1("Resize", 19, vec![string("mode", "linear")], &inputs(x, None, Some(&[1.5, 1.5]), None)).unwrap();
    assert_eq!(y.shape(), &[4, 6]);
    let want = [
        197u8, 140, 90, 112, 127, 137, 221, 186, 146, 126, 136, 152, 213, 214, 200, 142, 145, 162, 83, 145, 196, 150,
        140, 141,
    ];
    assert_eq!(y.as_slice::<u8>().unwrap(), &want);
    // Cubic overshoot past 255 saturates.
    let x = t(&[1, 4], vec![0u8, 0, 255, 255]);
    let y = run1("Resize", 19, vec![string("mode", "cubic")], &inputs(x, None, None, Some(&[1, 9]))).unwrap();
    assert!(y.as_slice::<u8>().unwrap().contains(&255));
}

#[test]
fn opset_10_and_upsample_use_asymmetric_coordinates() {
    // ONNX backend tests resize_downsample_nearest / resize_upsample_linear (opset 10).
    let x = t(&[1, 1, 2, 4], (1..=8).map(|v| v as f32).collect());
    let y = run1("Resize", 10, vec![], &[Some(x), Some(t(&[4], vec![1.0f32, 1.0, 0.6, 0.6]))]).unwrap();
    assert_eq!(f32s(&y), (vec![1, 1, 1, 2], vec![1.0, 3.0]));
    let x = t(&[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]);
    let y = run1(
        "Resize",
        10,
        vec![string("mode", "linear")],
        &[Some(x.clone()), Some(t(&[4], vec![1.0f32, 1.0, 2.0, 2.0]))],
    )
    .unwrap();
    let want = vec![1.0, 1.5, 2.0, 2.0, 2.0, 2.5, 3.0, 3.0, 3.0, 3.5, 4.0, 4.0, 3.0, 3.5, 4.0, 4.0];
    assert_eq!(f32s(&y), (vec![1, 1, 4, 4], want.clone()));
    let y = run1(
        "Upsample",
        9,
        vec![string("mode", "linear")],
        &[Some(x.clone()), Some(t(&[4], vec![1.0f32, 1.0, 2.0, 2.0]))],
    )
    .unwrap();
    assert_eq!(f32s(&y).1, want);
    // Upsample-7 nearest with the scales attribute: np.repeat along each axis.
    let y = run1("Upsample", 7, vec![floats("scales", &[1.0, 1.0, 2.0, 3.0])], &[Some(x)]).unwrap();
    let want = vec![
        1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 4.0,
        4.0, 4.0,
    ];
    assert_eq!(f32s(&y), (vec![1, 1, 4, 6], want));
}

#[test]
fn nearest_moves_any_type() {
    // tf_half_pixel_for_nn (opset 11): x = (j + 0.5) / scale -> indices [0, 1, 2, 2] for 3 -> 4.
    let x = strs(&[1, 3], &["a", "b", "c"]);
    let y = run1(
        "Resize",
        11,
        vec![string("coordinate_transformation_mode", "tf_half_pixel_for_nn")],
        &[Some(x), Some(t(&[0], Vec::<f32>::new())), Some(t(&[2], vec![1.0f32, 1.5]))],
    )
    .unwrap();
    assert_eq!(y.view().unwrap().strings().unwrap(), &["a", "b", "c", "c"]);
    let b = Tensor::from_bools(vec![2], vec![true, false]).unwrap();
    let y = run1("Resize", 13, vec![], &inputs(b, None, None, Some(&[4]))).unwrap();
    assert_eq!((y.dtype(), y.view().unwrap().bytes().unwrap()), (DataType::Bool, &[1u8, 1, 0, 0][..]));
    let x = t(&[4], vec![1i64, 2, 3, 4]);
    let y = run1(
        "Resize",
        11,
        vec![string("coordinate_transformation_mode", "tf_half_pixel_for_nn")],
        &[Some(x), Some(t(&[0], Vec::<f32>::new())), Some(t(&[1], vec![0.5f32]))],
    )
    .unwrap();
    assert_eq!(i64v(&y).1, vec![2, 4]);
}

/// Direct bilinear reference (align_corners) on the last two axes of an NCHW tensor.
fn bilinear_align_corners(x: &[f32], [n, c, h, w]: [usize; 4], oh: usize, ow: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for plane in 0..n * c {
        let p = &x[plane * h * w..(plane + 1) * h * w];
        for i in 0..oh {
            let y = if oh > 1 { i as f64 * (h - 1) as f64 / (oh - 1) as f64 } else { 0.0 };
            let (y0, fy) = (y.floor() as usize, y - y.floor());
            let y1 = (y0 + 1).min(h - 1);
            for j in 0..ow {
                let xx = if ow > 1 { j as f64 * (w - 1) as f64 / (ow - 1) as f64 } else { 0.0 };
                let (x0, fx) = (xx.floor() as usize, xx - xx.floor());
                let x1 = (x0 + 1).min(w - 1);
                let v = |a: usize, b: usize| f64::from(p[a * w + b]);
                let top = v(y0, x0) * (1.0 - fx) + v(y0, x1) * fx;
                let bottom = v(y1, x0) * (1.0 - fx) + v(y1, x1) * fx;
                out.push((top * (1.0 - fy) + bottom * fy) as f32);
            }
        }
    }
    out
}

#[test]
fn large_bilinear_matches_direct_formula() {
    let shape = [2usize, 3, 37, 53];
    let data = rand_f32(shape.iter().product(), 9);
    let y = run1(
        "Resize",
        13,
        vec![string("mode", "linear"), string("coordinate_transformation_mode", "align_corners")],
        &inputs(t(&shape, data.clone()), None, None, Some(&[2, 3, 71, 29])),
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3, 71, 29]);
    assert_close(y.as_slice::<f32>().unwrap(), &bilinear_align_corners(&data, shape, 71, 29), 1e-5);
    let half = Tensor::from_vec(shape.to_vec(), data.iter().map(|&v| half::f16::from_f32(v)).collect()).unwrap();
    let y = run1(
        "Resize",
        13,
        vec![string("mode", "linear"), string("coordinate_transformation_mode", "align_corners")],
        &inputs(half, None, None, Some(&[2, 3, 71, 29])),
    )
    .unwrap();
    let got: Vec<f32> = y.as_slice::<half::f16>().unwrap().iter().map(|v| v.to_f32()).collect();
    assert_close(&got, &bilinear_align_corners(&data, shape, 71, 29), 1e-2);
}

#[test]
fn identity_resize_returns_the_input() {
    let x = t(&[2, 3], rand_f32(6, 4));
    let y =
        run1("Resize", 19, vec![string("mode", "cubic")], &inputs(x.clone(), None, Some(&[1.0, 1.0]), None)).unwrap();
    assert_eq!(f32s(&y), f32s(&x));
}

#[test]
fn invalid_resizes_are_errors() {
    let x = || t(&[2, 3], vec![1f32; 6]);
    let err = |v: i64, a: Vec<Attr>, i: Vec<Option<Tensor>>| run1("Resize", v, a, &i).unwrap_err().to_string();
    let e = err(19, vec![], inputs(x(), None, Some(&[1.0, 2.0]), Some(&[2, 6])));
    assert!(e.contains("not both"), "{e}");
    let e = err(19, vec![], inputs(x(), None, None, None));
    assert!(e.contains("scales or sizes"), "{e}");
    let e = err(19, vec![], inputs(x(), None, Some(&[2.0]), None));
    assert!(e.contains("input 2") && e.contains("2 positive scales"), "{e}");
    let e = err(19, vec![], inputs(x(), None, Some(&[2.0, -1.0]), None));
    assert!(e.contains("positive"), "{e}");
    let e = err(19, vec![], inputs(x(), None, None, Some(&[2, -6])));
    assert!(e.contains("input 3") && e.contains("non-negative"), "{e}");
    let e = err(19, vec![], vec![Some(x()), None, None, Some(t(&[2], vec![2i32, 6]))]);
    assert!(e.contains("input 3") && e.contains("int32"), "{e}");
    let e = err(
        19,
        vec![string("coordinate_transformation_mode", "tf_crop_and_resize")],
        inputs(x(), None, None, Some(&[2, 6])),
    );
    assert!(e.contains("roi"), "{e}");
    let e = err(
        19,
        vec![string("coordinate_transformation_mode", "tf_crop_and_resize")],
        inputs(x(), Some(&[0.0, 1.0]), None, Some(&[2, 6])),
    );
    assert!(e.contains("4 roi values"), "{e}");
    let e = err(19, vec![ints("axes", &[1, -1])], inputs(x(), None, None, Some(&[2, 6])));
    assert!(e.contains("'axes'"), "{e}");
    let e = err(19, vec![string("mode", "area")], inputs(x(), None, None, Some(&[2, 6])));
    assert!(e.contains("'mode'"), "{e}");
    let e = err(10, vec![string("mode", "cubic")], vec![Some(x()), Some(t(&[2], vec![1f32, 2.0]))]);
    assert!(e.contains("'mode'") && e.contains("nearest or linear"), "{e}");
    let e = err(19, vec![string("coordinate_transformation_mode", "diagonal")], inputs(x(), None, None, Some(&[2, 6])));
    assert!(e.contains("'coordinate_transformation_mode'"), "{e}");
    let e = err(19, vec![string("nearest_mode", "up")], inputs(x(), None, None, Some(&[2, 6])));
    assert!(e.contains("'nearest_mode'"), "{e}");
    let e = err(13, vec![string("keep_aspect_ratio_policy", "not_larger")], inputs(x(), None, None, Some(&[2, 6])));
    assert!(e.contains("'keep_aspect_ratio_policy'"), "{e}");
    let e = err(19, vec![string("mode", "linear")], inputs(strs(&[2], &["a", "b"]), None, None, Some(&[4])));
    assert!(e.contains("numeric"), "{e}");
    let e = err(19, vec![], inputs(t(&[0, 2], Vec::<f32>::new()), None, None, Some(&[3, 2])));
    assert!(e.contains("empty axis"), "{e}");
    let wide = t(&[1, 2_000_000], vec![1f32; 2_000_000]);
    let e = err(19, vec![string("mode", "linear"), int("antialias", 1)], inputs(wide, None, Some(&[1.0, 6e-7]), None));
    assert!(e.contains("too wide"), "{e}");
    let e = run1("Upsample", 7, vec![], &[Some(x())]).unwrap_err().to_string();
    assert!(e.contains("'scales'"), "{e}");
}
