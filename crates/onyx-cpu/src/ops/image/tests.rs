use onyx_core::ir::AttrValue;
use onyx_core::Tensor;

use super::*;
use crate::ops::elementwise::testing::{assert_close, floats, ints, random_f32, tensor, unravel};
use crate::ops::matmul::test_support::{build, node, run};

fn run1(f: crate::BuildFn, op: &str, attrs: Vec<(&str, AttrValue)>, inputs: Vec<Option<Tensor>>) -> Result<Tensor> {
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let k = build(f, &node(op, &names, 1, attrs), 18)?;
    run(k.as_ref(), &inputs, 1)?.remove(0).into_tensor()
}

#[test]
fn center_crop_pad_centres_the_kept_part() {
    let x = tensor(&[7], (1..=7).collect::<Vec<i64>>());
    let y =
        run1(build_center_crop_pad, "CenterCropPad", vec![], vec![Some(x), Some(tensor(&[1], vec![4i64]))]).unwrap();
    assert_eq!(ints(&y), vec![2, 3, 4, 5]);
    let x = tensor(&[3], vec![1i64, 2, 3]);
    let y =
        run1(build_center_crop_pad, "CenterCropPad", vec![], vec![Some(x), Some(tensor(&[1], vec![6i64]))]).unwrap();
    assert_eq!(ints(&y), vec![0, 1, 2, 3, 0, 0]);
    // Crop one axis and pad another of a 3-D tensor, through negative axes.
    let mut rng = fastrand::Rng::with_seed(4);
    let data = random_f32(&mut rng, 2 * 9 * 3, -1.0, 1.0);
    let x = tensor(&[2, 9, 3], data.clone());
    let attrs = vec![("axes", AttrValue::Ints(vec![-2, -1]))];
    let y =
        run1(build_center_crop_pad, "CenterCropPad", attrs, vec![Some(x), Some(tensor(&[2], vec![4i64, 6]))]).unwrap();
    assert_eq!(y.shape(), &[2, 4, 6]);
    let got = floats(&y);
    for (flat, &g) in got.iter().enumerate() {
        let i = unravel(flat, &[2, 4, 6]);
        // Rows 2..6 of 9 (crop of 5: 2 before), columns 1..4 of 6 (pad of 3: 1 before).
        let want = if (1..4).contains(&i[2]) { data[(i[0] * 9 + i[1] + 2) * 3 + i[2] - 1] as f64 } else { 0.0 };
        assert_eq!(g, want, "{i:?}");
    }
    let e = run1(
        build_center_crop_pad,
        "CenterCropPad",
        vec![],
        vec![Some(tensor(&[2, 2], vec![1f32; 4])), Some(tensor(&[1], vec![1i64]))],
    )
    .unwrap_err();
    assert!(e.to_string().contains("input 1"), "{e}");
}

/// im2col of `[c, image...]`: `[c * ∏block, L]` (zeros where a block reads padding).
fn im2col(
    img: &[f64],
    c: usize,
    image: &[usize],
    block: &[usize],
    st: &[usize],
    dil: &[usize],
    pads: &[usize],
) -> (Vec<f64>, usize) {
    let n = image.len();
    let blocks: Vec<usize> =
        (0..n).map(|d| (image[d] + pads[d] + pads[n + d] - dil[d] * (block[d] - 1) - 1) / st[d] + 1).collect();
    let (l, kprod): (usize, usize) = (blocks.iter().product(), block.iter().product());
    let mut cols = vec![0.0; c * kprod * l];
    for ch in 0..c {
        for k in 0..kprod {
            let ki = unravel(k, block);
            for col in 0..l {
                let bi = unravel(col, &blocks);
                let p: Vec<isize> =
                    (0..n).map(|d| (bi[d] * st[d] + ki[d] * dil[d]) as isize - pads[d] as isize).collect();
                if p.iter().zip(image).all(|(&p, &s)| p >= 0 && (p as usize) < s) {
                    let off = p.iter().zip(image).fold(0, |acc, (&p, &s)| acc * s + p as usize);
                    cols[(ch * kprod + k) * l + col] = img[ch * image.iter().product::<usize>() + off];
                }
            }
        }
    }
    (cols, l)
}

#[test]
fn col2im_is_the_adjoint_of_im2col() {
    let mut rng = fastrand::Rng::with_seed(12);
    // (image, block, strides, dilations, pads).
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a [usize]);
    let cases: &[Case] = &[
        (&[5, 7], &[2, 3], &[1, 1], &[1, 1], &[0, 0, 0, 0]),
        (&[6, 5], &[3, 2], &[2, 1], &[1, 2], &[1, 0, 2, 1]),
        (&[4, 3, 5], &[2, 2, 3], &[1, 2, 1], &[1, 1, 2], &[0, 1, 1, 1, 0, 0]),
    ];
    for &(image, block, st, dil, pads) in cases {
        let c = 2;
        let img_len: usize = image.iter().product();
        let img: Vec<f64> = random_f32(&mut rng, c * img_len, -1.0, 1.0).into_iter().map(f64::from).collect();
        let (cols_of_img, l) = im2col(&img, c, image, block, st, dil, pads);
        let cols: Vec<f64> = random_f32(&mut rng, cols_of_img.len(), -1.0, 1.0).into_iter().map(f64::from).collect();
        let kprod: usize = block.iter().product();
        let attrs = vec![
            ("strides", AttrValue::Ints(st.iter().map(|&v| v as i64).collect())),
            ("dilations", AttrValue::Ints(dil.iter().map(|&v| v as i64).collect())),
            ("pads", AttrValue::Ints(pads.iter().map(|&v| v as i64).collect())),
        ];
        let inputs = vec![
            Some(tensor(&[1, c * kprod, l], cols.clone())),
            Some(tensor(&[image.len()], image.iter().map(|&v| v as i64).collect())),
            Some(tensor(&[block.len()], block.iter().map(|&v| v as i64).collect())),
        ];
        let y = run1(build_col2im, "Col2Im", attrs, inputs).unwrap();
        assert_eq!(y.shape(), &[&[1, c][..], image].concat()[..]);
        // <col2im(cols), img> == <cols, im2col(img)>.
        let lhs: f64 = floats(&y).iter().zip(&img).map(|(a, b)| a * b).sum();
        let rhs: f64 = cols.iter().zip(&cols_of_img).map(|(a, b)| a * b).sum();
        assert_close(&[lhs], &[rhs], 1e-10, 1e-12, &format!("{image:?} {block:?}"));
    }
    // Overlap counts: ones through 2x2 blocks with stride 1 over a 3x3 image.
    let inputs = vec![
        Some(tensor(&[1, 4, 4], vec![1f32; 16])),
        Some(tensor(&[2], vec![3i64, 3])),
        Some(tensor(&[2], vec![2i64, 2])),
    ];
    let y = run1(build_col2im, "Col2Im", vec![], inputs).unwrap();
    assert_eq!(floats(&y), vec![1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0]);
    let inputs = vec![
        Some(tensor(&[1, 4, 5], vec![1f32; 20])),
        Some(tensor(&[2], vec![3i64, 3])),
        Some(tensor(&[2], vec![2i64, 2])),
    ];
    assert!(run1(build_col2im, "Col2Im", vec![], inputs).unwrap_err().to_string().contains("L = 4"));
}

#[test]
fn max_unpool_puts_values_back_where_max_pool_found_them() {
    let mut rng = fastrand::Rng::with_seed(21);
    let (h, w) = (4usize, 6usize);
    let x = random_f32(&mut rng, 2 * h * w, -1.0, 1.0);
    // Max pooling 2x2, stride 2, with flat indices.
    let (oh, ow) = (h / 2, w / 2);
    let (mut vals, mut idx) = (vec![], vec![]);
    for c in 0..2 {
        for i in 0..oh {
            for j in 0..ow {
                let cands = [(2 * i, 2 * j), (2 * i, 2 * j + 1), (2 * i + 1, 2 * j), (2 * i + 1, 2 * j + 1)];
                let best =
                    cands.iter().map(|&(r, q)| c * h * w + r * w + q).max_by(|&a, &b| x[a].total_cmp(&x[b])).unwrap();
                vals.push(x[best]);
                idx.push(best as i64);
            }
        }
    }
    let attrs = || vec![("kernel_shape", AttrValue::Ints(vec![2, 2])), ("strides", AttrValue::Ints(vec![2, 2]))];
    let pooled = || vec![Some(tensor(&[1, 2, oh, ow], vals.clone())), Some(tensor(&[1, 2, oh, ow], idx.clone()))];
    let y = run1(build_max_unpool, "MaxUnpool", attrs(), pooled()).unwrap();
    assert_eq!(y.shape(), &[1, 2, h, w]);
    let mut want = vec![0.0; 2 * h * w];
    idx.iter().zip(&vals).for_each(|(&i, &v)| want[i as usize] = v as f64);
    assert_eq!(floats(&y), want);
    // A larger output_shape keeps the unpooled tensor at its start.
    let mut inputs = pooled();
    inputs.push(Some(tensor(&[4], vec![1i64, 2, 5, 7])));
    let y = run1(build_max_unpool, "MaxUnpool", attrs(), inputs).unwrap();
    assert_eq!(y.shape(), &[1, 2, 5, 7]);
    let got = floats(&y);
    for (flat, &g) in got.iter().enumerate() {
        let i = unravel(flat, &[1, 2, 5, 7]);
        let v = if i[2] < h && i[3] < w { want[(i[1] * h + i[2]) * w + i[3]] } else { 0.0 };
        assert_eq!(g, v, "{i:?}");
    }
    let bad = vec![Some(tensor(&[1, 1, 1, 1], vec![1f32])), Some(tensor(&[1, 1, 1, 1], vec![4i64]))];
    assert!(run1(build_max_unpool, "MaxUnpool", attrs(), bad).unwrap_err().to_string().contains("0..4"));
    assert!(build(build_max_unpool, &node("MaxUnpool", &["x", "i"], 1, vec![]), 11).is_err());
}
