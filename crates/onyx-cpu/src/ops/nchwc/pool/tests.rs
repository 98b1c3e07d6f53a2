//! The NCHWc pools against the plain pooling kernels (blocked → pool → unblocked) on random
//! data with NaNs, awkward sizes and every window attribute.

use onyx_core::ep::ValueRef;
use onyx_core::ir::AttrValue;
use onyx_core::{Tensor, Value};

use super::*;
use crate::ops::layout::testkit::rand_f32;
use crate::ops::matmul::test_support::{assert_close, build, ints, node};
use crate::ops::nchwc::reorder::{to_blocked, to_nchw};

fn run_kernel(k: &dyn Kernel, x: Tensor) -> Tensor {
    let v = Value::Tensor(x);
    k.run(&[Some(ValueRef::Value(&v))], &[true]).unwrap().remove(0).into_tensor().unwrap()
}

#[test]
fn windowed_pools_match_the_plain_ones() {
    // (op, [n, c, h, w], kernel, strides, dilations, pads, ceil_mode, count_include_pad)
    let cases: &[(&str, [usize; 4], [i64; 2], [i64; 2], [i64; 2], [i64; 4], i64, i64)] = &[
        ("MaxPool", [1, 20, 13, 11], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0, 0),
        ("MaxPool", [2, 7, 9, 8], [2, 3], [1, 2], [2, 1], [0, 1, 1, 0], 1, 0),
        // Column dilation: a window's taps are every third pixel of the row.
        ("MaxPool", [1, 5, 10, 12], [3, 2], [1, 3], [1, 3], [2, 1, 0, 1], 0, 0),
        ("MaxPool", [1, 16, 8, 12], [2, 3], [2, 2], [1, 2], [1, 2, 1, 2], 1, 0),
        ("AveragePool", [1, 17, 10, 7], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 1, 1),
        ("AveragePool", [1, 33, 6, 9], [2, 2], [2, 2], [1, 1], [0, 0, 1, 1], 0, 0),
    ];
    for (i, &(op, shape, k, s, d, p, ceil, cip)) in cases.iter().enumerate() {
        let [n, c, h, w] = shape;
        let mut x = rand_f32(n * c * h * w, i as u64);
        x[3] = f32::NAN;
        let mut attrs = vec![
            ("kernel_shape", ints(&k)),
            ("strides", ints(&s)),
            ("pads", ints(&p)),
            ("ceil_mode", AttrValue::Int(ceil)),
        ];
        if op == "MaxPool" {
            attrs.push(("dilations", ints(&d)));
        } else {
            attrs.push(("count_include_pad", AttrValue::Int(cip)));
        }
        let reduce = if op == "MaxPool" { Reduce::Max } else { Reduce::Average };
        let plain = pool_op(&node(op, &["x"], 1, attrs.clone()), reduce).unwrap();
        let want = run_kernel(&plain, Tensor::from_vec(shape.to_vec(), x.clone()).unwrap());
        let [oh, ow] = [want.shape()[2], want.shape()[3]];
        let want: Vec<f64> = want.as_slice::<f32>().unwrap().iter().map(|&v| f64::from(v)).collect();
        for b in [16, 8, 5] {
            attrs.push(("block", AttrValue::Int(b as i64)));
            let mut blocked_node = node(&format!("Nchwc{op}"), &["x"], 1, attrs.clone());
            attrs.pop();
            blocked_node.domain = ONYX_DOMAIN.into();
            let f: crate::registry::BuildFn = match reduce {
                Reduce::Max => |ctx| windowed(ctx, Reduce::Max),
                _ => |ctx| windowed(ctx, Reduce::Average),
            };
            let k = build(f, &blocked_node, 1).unwrap();
            let xb = to_blocked(&x, [n, c, h * w], b);
            let y = run_kernel(k.as_ref(), Tensor::from_vec(vec![n, c.div_ceil(b), h, w, b], xb).unwrap());
            assert_eq!(y.shape(), [n, c.div_ceil(b), oh, ow, b]);
            let got = to_nchw(y.as_slice::<f32>().unwrap(), [n, c, oh * ow], b);
            assert_close(&got, &want, 1e-6, &format!("{op} case {i} block {b}"));
        }
    }
}

#[test]
fn global_pools_reduce_every_pixel_of_each_lane() {
    let (n, c, h, w, b) = (2, 21, 5, 3, 8);
    let x = rand_f32(n * c * h * w, 3);
    let xb = to_blocked(&x, [n, c, h * w], b);
    for (op, reduce) in [("NchwcGlobalAveragePool", Reduce::Average), ("NchwcGlobalMaxPool", Reduce::Max)] {
        let mut gnode = node(op, &["x"], 1, vec![("block", AttrValue::Int(b as i64))]);
        gnode.domain = ONYX_DOMAIN.into();
        let f: crate::registry::BuildFn = match reduce {
            Reduce::Max => |ctx| global(ctx, Reduce::Max),
            _ => |ctx| global(ctx, Reduce::Average),
        };
        let k = build(f, &gnode, 1).unwrap();
        let y = run_kernel(k.as_ref(), Tensor::from_vec(vec![n, c.div_ceil(b), h, w, b], xb.clone()).unwrap());
        assert_eq!(y.shape(), [n, c.div_ceil(b), 1, 1, b]);
        let got = to_nchw(y.as_slice::<f32>().unwrap(), [n, c, 1], b);
        let want: Vec<f64> = x
            .chunks(h * w)
            .map(|plane| match reduce {
                Reduce::Max => plane.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v))),
                _ => plane.iter().map(|&v| f64::from(v)).sum::<f64>() / (h * w) as f64,
            })
            .collect();
        assert_close(&got, &want, 1e-5, op);
        let wrong = Tensor::from_vec(vec![n, 3, h, w, 4], vec![0.0f32; n * 3 * h * w * 4]).unwrap();
        let v = Value::Tensor(wrong);
        let e = k.run(&[Some(ValueRef::Value(&v))], &[true]).unwrap_err().to_string();
        assert!(e.contains("[N, C/8, H, W, 8]"), "{e}");
    }
}
