//! Det and LpNormalization: small linear-algebra ops, computed in f64 and written in the
//! input's float type.
//!
//! Det: the determinant of every trailing `[M, M]` matrix, by LU decomposition with partial
//! pivoting. LpNormalization: `x / ‖x‖_p` along one axis for p = 1 or 2 (a zero norm gives 0).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Det", build_det);
    r.add("LpNormalization", build_lp);
}

/// Reads a float input as f64, or an error naming input `i`.
fn floats(x: &TensorView<'_>, at: &Location) -> Result<Vec<f64>> {
    if compute_type(x.dtype()).is_none() {
        return Err(Error::input(at, 0, "a float tensor", x.dtype().name()));
    }
    Ok(float_slice::<f64>(x)?.into_owned())
}

/// A Det node.
struct Det {
    at: Location,
}

fn build_det(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Det { at: ctx.node.location() }))
}

/// The determinant of the row-major `m x m` matrix `a` (consumed as scratch).
fn determinant(mut a: Vec<f64>, m: usize) -> f64 {
    let mut det = 1.0;
    for c in 0..m {
        let pivot = (c..m).max_by(|&i, &j| a[i * m + c].abs().total_cmp(&a[j * m + c].abs())).unwrap_or(c);
        if a[pivot * m + c] == 0.0 {
            return 0.0;
        }
        if pivot != c {
            for k in 0..m {
                a.swap(pivot * m + k, c * m + k);
            }
            det = -det;
        }
        let p = a[c * m + c];
        det *= p;
        for r in c + 1..m {
            let f = a[r * m + c] / p;
            for k in c..m {
                a[r * m + k] -= f * a[c * m + k];
            }
        }
    }
    det
}

impl Kernel for Det {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let s = x.shape();
        if s.len() < 2 || s[s.len() - 1] != s[s.len() - 2] {
            return Err(Error::input(at, 0, "square matrices [..., M, M]", format!("{s:?}")));
        }
        let m = s[s.len() - 1];
        let data = floats(&x, at)?;
        let dets: Vec<f64> = if m == 0 {
            vec![1.0; s[..s.len() - 2].iter().product()]
        } else {
            data.chunks(m * m).map(|c| determinant(c.to_vec(), m)).collect()
        };
        Ok(vec![float_output(x.dtype(), s[..s.len() - 2].to_vec(), dets)?])
    }
}

/// An LpNormalization node.
struct LpNorm {
    axis: i64,
    p: i64,
    at: Location,
}

fn build_lp(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let p = ctx.node.int_or("p", 2)?;
    if p != 1 && p != 2 {
        return Err(Error::attribute(&at, "p", "1 or 2", p.to_string()));
    }
    Ok(Box::new(LpNorm { axis: ctx.node.int_or("axis", -1)?, p, at }))
}

impl Kernel for LpNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let s = x.shape();
        if s.is_empty() {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, s.len(), at)?;
        let (n, inner) = (s[axis], s[axis + 1..].iter().product::<usize>());
        let mut y = floats(&x, at)?;
        let block = n * inner;
        for chunk in y.chunks_mut(block.max(1)) {
            for i in 0..inner {
                let norm = if self.p == 1 {
                    (0..n).map(|k| chunk[k * inner + i].abs()).sum::<f64>()
                } else {
                    (0..n).map(|k| chunk[k * inner + i].powi(2)).sum::<f64>().sqrt()
                };
                for k in 0..n {
                    let v = &mut chunk[k * inner + i];
                    *v = if norm == 0.0 { 0.0 } else { *v / norm };
                }
            }
        }
        Ok(vec![float_output(x.dtype(), s.to_vec(), y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats as values, random_f32, tensor};
    use crate::ops::matmul::test_support::{build, node, run};
    use onyx_core::ir::AttrValue;
    use onyx_core::Tensor;

    fn apply(f: crate::BuildFn, op: &str, attrs: Vec<(&str, AttrValue)>, x: Tensor) -> Result<Tensor> {
        let k = build(f, &node(op, &["x"], 1, attrs), 22)?;
        run(k.as_ref(), &[Some(x)], 1)?.remove(0).into_tensor()
    }

    /// The determinant by Laplace expansion along the first row.
    fn laplace(a: &[f64], m: usize) -> f64 {
        if m == 1 {
            return a[0];
        }
        (0..m)
            .map(|c| {
                let minor: Vec<f64> =
                    (1..m).flat_map(|r| (0..m).filter(move |&k| k != c).map(move |k| a[r * m + k])).collect();
                let sign = if c % 2 == 0 { 1.0 } else { -1.0 };
                sign * a[c] * laplace(&minor, m - 1)
            })
            .sum()
    }

    #[test]
    fn det_matches_laplace_expansion() {
        let mut rng = fastrand::Rng::with_seed(1);
        for m in [1usize, 2, 3, 5] {
            let x = random_f32(&mut rng, 3 * 2 * m * m, -2.0, 2.0);
            let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let want: Vec<f64> = xf.chunks(m * m).map(|c| laplace(c, m)).collect();
            let y = apply(build_det, "Det", vec![], tensor(&[3, 2, m, m], xf.clone())).unwrap();
            assert_eq!(y.shape(), &[3, 2]);
            assert_close(&values(&y), &want, 1e-10, 1e-12, &format!("det f64 m={m}"));
            let y = apply(build_det, "Det", vec![], tensor(&[6, m, m], x)).unwrap();
            assert_close(&values(&y), &want, 1e-4, 1e-5, &format!("det f32 m={m}"));
        }
        // Singular and permuted matrices.
        let y = apply(build_det, "Det", vec![], tensor(&[2, 2], vec![1f64, 2.0, 2.0, 4.0])).unwrap();
        assert_eq!(values(&y), vec![0.0]);
        let y = apply(build_det, "Det", vec![], tensor(&[3, 3], vec![0f64, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]))
            .unwrap();
        assert_eq!(values(&y), vec![-1.0]);
        assert!(apply(build_det, "Det", vec![], tensor(&[2, 3], vec![1f32; 6]))
            .unwrap_err()
            .to_string()
            .contains("square"));
    }

    #[test]
    fn lp_normalization_divides_by_the_norm() {
        let mut rng = fastrand::Rng::with_seed(6);
        let shape = [3, 4, 5];
        let x = random_f32(&mut rng, 60, -2.0, 2.0);
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for axis in [0i64, 1, -1] {
            for p in [1i64, 2] {
                let a = util::normalize_axis(axis, 3, &Location::default()).unwrap();
                let st = util::strides(&shape);
                let want: Vec<f64> = (0..60)
                    .map(|flat| {
                        let k = (flat / st[a]) % shape[a];
                        let start = flat - k * st[a];
                        let norm: f64 = (0..shape[a])
                            .map(|j| xf[start + j * st[a]].abs().powi(p as i32))
                            .sum::<f64>()
                            .powf(1.0 / p as f64);
                        xf[flat] / norm
                    })
                    .collect();
                let y = apply(
                    build_lp,
                    "LpNormalization",
                    vec![("axis", AttrValue::Int(axis)), ("p", AttrValue::Int(p))],
                    tensor(&shape, x.clone()),
                )
                .unwrap();
                assert_close(&values(&y), &want, 1e-5, 1e-6, &format!("axis={axis} p={p}"));
            }
        }
        let y = apply(build_lp, "LpNormalization", vec![], tensor(&[2, 2], vec![0f32, 0.0, 3.0, 4.0])).unwrap();
        assert_close(&values(&y), &[0.0, 0.0, 0.6, 0.8], 1e-6, 0.0, "zero norm");
        assert!(build(build_lp, &node("LpNormalization", &["x"], 1, vec![("p", AttrValue::Int(3))]), 22).is_err());
    }
}
