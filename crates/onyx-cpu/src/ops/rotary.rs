//! RotaryEmbedding, ONNX's (opset 23) and ONNX Runtime's `com.microsoft` form, on the
//! contract of `onyx_core::ops::contrib::rotary` (layouts, cache rows, partial and interleaved
//! rotation). Computed in f32 (f64 for double).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::rotary::RotaryOp;
use onyx_core::{DataType, Error, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice, Real};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", build_rotary);
    r.add_in(onyx_core::ir::MS_DOMAIN, "RotaryEmbedding", build_rotary);
}

struct Rotary(RotaryOp);

fn build_rotary(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Rotary(RotaryOp::from_node(ctx.node)?)))
}

/// Rotates `y` (the input's elements) in place.
pub(crate) fn rotate<T: Real>(
    op: &RotaryOp,
    y: &mut [T],
    shape: &[usize],
    cos: &TensorView<'_>,
    sin: &TensorView<'_>,
    pos: Option<&TensorView<'_>>,
) -> Result<()> {
    let d = op.dims(shape, cos.shape())?;
    let rows = op.cache_rows(&d, cos.shape(), sin.shape(), pos.map(|p| p.shape()))?;
    let ids = pos.map(util::to_i64).transpose()?.unwrap_or_default();
    let (cos, sin) = (float_slice::<T>(cos)?, float_slice::<T>(sin)?);
    let half = d.rot / 2;
    for b in 0..d.batch {
        for s in 0..d.seq {
            let row = op.position(rows, &d, &ids, b, s)? * half;
            let (c, sn) = (&cos[row..row + half], &sin[row..row + half]);
            for h in 0..d.heads {
                let v = &mut y[d.offset(b, h, s)..][..d.head];
                for i in 0..half {
                    let (p, q) = d.pair(i, op.interleaved);
                    let (x1, x2) = (v[p], v[q]);
                    v[p] = c[i] * x1 - sn[i] * x2;
                    v[q] = sn[i] * x1 + c[i] * x2;
                }
            }
        }
    }
    Ok(())
}

impl Rotary {
    fn compute<T: Real>(
        &self,
        x: &TensorView<'_>,
        cos: &TensorView<'_>,
        sin: &TensorView<'_>,
        pos: Option<&TensorView<'_>>,
    ) -> Result<Value> {
        let mut y = float_slice::<T>(x)?.into_owned();
        rotate(&self.0, &mut y, x.shape(), cos, sin, pos)?;
        float_output(x.dtype(), x.shape().to_vec(), y)
    }
}

impl Kernel for Rotary {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.0.at;
        let (ci, si, pi) = self.0.input_indices();
        let x = util::input(inputs, 0, at)?;
        let cos = util::input(inputs, ci, at)?;
        let sin = util::input(inputs, si, at)?;
        let pos = util::opt_input(inputs, pi, at)?;
        for (i, t) in [(ci, &cos), (si, &sin)] {
            if t.dtype() != x.dtype() {
                return Err(Error::input(at, i, x.dtype().name(), t.dtype().name()));
            }
        }
        if let Some(p) = pos.as_ref().filter(|p| !matches!(p.dtype(), DataType::Int64 | DataType::Int32)) {
            return Err(Error::input(at, pi, "int64 position ids", p.dtype().name()));
        }
        let r = match compute_type(x.dtype()) {
            Some(DataType::Double) => self.compute::<f64>(&x, &cos, &sin, pos.as_ref()),
            Some(_) => self.compute::<f32>(&x, &cos, &sin, pos.as_ref()),
            None => Err(Error::input(at, 0, "a float tensor", x.dtype().name())),
        };
        Ok(vec![r.map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
    use crate::ops::matmul::test_support::{build, node, run};
    use onyx_core::ir::AttrValue;

    /// Rotation straight from the definition, on `[b, s, h, d]` data (f64): pairs are taken by
    /// index lists, the angle from `theta[b][s][i]`.
    fn naive(
        x: &[f64],
        [b, s, h, d]: [usize; 4],
        rot: usize,
        interleaved: bool,
        theta: &dyn Fn(usize, usize, usize) -> f64,
    ) -> Vec<f64> {
        let mut y = x.to_vec();
        let half = rot / 2;
        for bi in 0..b {
            for si in 0..s {
                for hi in 0..h {
                    let base = ((bi * s + si) * h + hi) * d;
                    let firsts: Vec<usize> =
                        if interleaved { (0..rot).step_by(2).collect() } else { (0..half).collect() };
                    let seconds: Vec<usize> =
                        if interleaved { (1..rot).step_by(2).collect() } else { (half..rot).collect() };
                    for i in 0..half {
                        let a = theta(bi, si, i);
                        let (x1, x2) = (x[base + firsts[i]], x[base + seconds[i]]);
                        y[base + firsts[i]] = x1 * a.cos() - x2 * a.sin();
                        y[base + seconds[i]] = x1 * a.sin() + x2 * a.cos();
                    }
                }
            }
        }
        y
    }

    #[test]
    fn rotary_embedding_matches_a_naive_rotation() {
        let mut rng = fastrand::Rng::with_seed(3);
        let (b, s, h, d) = (2, 5, 3, 10);
        for interleaved in [false, true] {
            for rot in [0usize, 6] {
                for (three_d, with_pos) in [(false, true), (true, true), (false, false), (true, false)] {
                    let r = if rot == 0 { d } else { rot };
                    let x = random_f32(&mut rng, b * s * h * d, -2.0, 2.0);
                    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                    let max_pos = 11;
                    let pos: Vec<i64> = (0..b * s).map(|_| rng.i64(0..max_pos as i64)).collect();
                    let freqs: Vec<f64> = (0..r / 2).map(|i| 1.0 / 10f64.powf(i as f64 / 3.0)).collect();
                    let angle = |p: f64, i: usize| p * freqs[i];
                    let token_pos = |bi: usize, si: usize| {
                        if with_pos {
                            pos[bi * s + si] as f64
                        } else {
                            (bi * 7 + si) as f64 * 0.37
                        }
                    };
                    let want = naive(&xf, [b, s, h, d], r, interleaved, &|bi, si, i| angle(token_pos(bi, si), i));
                    let (cache_shape, rows): (Vec<usize>, Vec<f64>) = if with_pos {
                        (vec![max_pos, r / 2], (0..max_pos).map(|p| p as f64).collect())
                    } else {
                        (vec![b, s, r / 2], (0..b * s).map(|t| token_pos(t / s, t % s)).collect())
                    };
                    let cos: Vec<f32> = rows
                        .iter()
                        .flat_map(|&p| (0..r / 2).map(move |i| (p, i)))
                        .map(|(p, i)| angle(p, i).cos() as f32)
                        .collect();
                    let sin: Vec<f32> = rows
                        .iter()
                        .flat_map(|&p| (0..r / 2).map(move |i| (p, i)))
                        .map(|(p, i)| angle(p, i).sin() as f32)
                        .collect();
                    // The kernel's layout: [b, s, h*d] (3-D) or [b, h, s, d].
                    let (shape, data): (Vec<usize>, Vec<f32>) = if three_d {
                        (vec![b, s, h * d], x.clone())
                    } else {
                        let mut t = vec![0f32; x.len()];
                        for bi in 0..b {
                            for si in 0..s {
                                for hi in 0..h {
                                    let src = ((bi * s + si) * h + hi) * d;
                                    let dst = ((bi * h + hi) * s + si) * d;
                                    t[dst..dst + d].copy_from_slice(&x[src..src + d]);
                                }
                            }
                        }
                        (vec![b, h, s, d], t)
                    };
                    let mut attrs = vec![
                        ("interleaved", AttrValue::Int(interleaved as i64)),
                        ("rotary_embedding_dim", AttrValue::Int(rot as i64)),
                    ];
                    if three_d {
                        attrs.push(("num_heads", AttrValue::Int(h as i64)));
                    }
                    let k = build(build_rotary, &node("RotaryEmbedding", &["x", "c", "s", "p"], 1, attrs), 23).unwrap();
                    let inputs = vec![
                        Some(tensor(&shape, data)),
                        Some(tensor(&cache_shape, cos)),
                        Some(tensor(&cache_shape, sin)),
                        with_pos.then(|| tensor(&[b, s], pos.clone())),
                    ];
                    let y = floats(run(k.as_ref(), &inputs, 1).unwrap()[0].as_tensor().unwrap());
                    let got: Vec<f64> = if three_d {
                        y
                    } else {
                        let mut t = vec![0.0; y.len()];
                        for bi in 0..b {
                            for si in 0..s {
                                for hi in 0..h {
                                    let src = ((bi * h + hi) * s + si) * d;
                                    let dst = ((bi * s + si) * h + hi) * d;
                                    t[dst..dst + d].copy_from_slice(&y[src..src + d]);
                                }
                            }
                        }
                        t
                    };
                    assert_close(
                        &got,
                        &want,
                        1e-5,
                        1e-5,
                        &format!("interleaved={interleaved} rot={rot} 3d={three_d} pos={with_pos}"),
                    );
                }
            }
        }
    }

    #[test]
    fn invalid_rotary_inputs_are_errors() {
        let k = build(
            build_rotary,
            &node("RotaryEmbedding", &["x", "c", "s", "p"], 1, vec![("rotary_embedding_dim", AttrValue::Int(5))]),
            23,
        )
        .unwrap();
        let x = tensor(&[1, 1, 2, 6], vec![0.5f32; 12]);
        let c = tensor(&[4, 3], vec![1f32; 12]);
        let p = tensor(&[1, 2], vec![0i64, 4]);
        let e = run(k.as_ref(), &[Some(x.clone()), Some(c.clone()), Some(c.clone()), Some(p.clone())], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be even"), "{e}");
        let k = build(build_rotary, &node("RotaryEmbedding", &["x", "c", "s", "p"], 1, vec![]), 23).unwrap();
        let e =
            run(k.as_ref(), &[Some(x.clone()), Some(c.clone()), Some(c.clone()), Some(p)], 1).unwrap_err().to_string();
        assert!(e.contains("input 3") && e.contains("0..4"), "{e}");
        let e = run(k.as_ref(), &[Some(x.clone()), Some(c.clone()), Some(c.clone()), None], 1).unwrap_err().to_string();
        assert!(e.contains("[1, 2, 3]"), "{e}");
        let e = run(k.as_ref(), &[Some(tensor(&[1, 2, 12], vec![0.5f32; 24])), Some(c.clone()), Some(c), None], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_heads"), "{e}");
        assert!(build(build_rotary, &node("RotaryEmbedding", &["x"], 1, vec![("interleaved", AttrValue::Int(2))]), 23)
            .is_err());
    }
}
