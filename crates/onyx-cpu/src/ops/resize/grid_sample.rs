//! GridSample (opsets 16, 20, 22: any number of spatial dims; nearest, linear and cubic;
//! zeros, border and reflection padding) and AffineGrid (opset 20), the grid it usually
//! samples. f16 and bf16 are computed in f32.

#[cfg(test)]
mod cases;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::elementwise::num::Real;
use crate::ops::elementwise::{narrow, widen, FLOAT_TYPES};
use crate::ops::layout::elems;
use crate::ops::util;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

struct GridSample {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
    at: Location,
}

pub(super) fn build_grid_sample(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let default_mode = if ctx.since_version >= 20 { "linear" } else { "bilinear" };
    let mode = match node.string_or("mode", default_mode)?.as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => return Err(Error::attribute(&at, "mode", "nearest, linear or cubic", other)),
    };
    let padding = match node.string_or("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(Error::attribute(&at, "padding_mode", "zeros, border or reflection", other)),
    };
    Ok(Box::new(GridSample { mode, padding, align_corners: node.int_or("align_corners", 0)? != 0, at }))
}

/// Reflects `x` off the borders `lo` and `hi` until it lies between them.
fn reflect<T: Real>(x: T, lo: T, hi: T) -> T {
    let range = hi - lo;
    if range <= T::ZERO {
        return lo;
    }
    let fold = |d: T| -> (bool, T) {
        let n = (d / range).floor();
        (n.fmod(T::from_f32(2.0)) == T::ZERO, d - n * range)
    };
    if x < lo {
        let (even, r) = fold(lo - x);
        if even {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let (even, r) = fold(x - hi);
        if even {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

/// Keys' cubic convolution weights (alpha = -0.75) of the taps at -1, 0, 1, 2 from `t`.
fn cubic_weights<T: Real>(t: T) -> [T; 4] {
    let a = T::from_f32(-0.75);
    let f = |v: f32| T::from_f32(v);
    let far = |x: T| ((a * (x + f(1.0)) - f(5.0) * a) * (x + f(1.0)) + f(8.0) * a) * (x + f(1.0)) - f(4.0) * a;
    let near = |x: T| ((a + f(2.0)) * x - (a + f(3.0))) * x * x + f(1.0);
    let u = f(1.0) - t;
    [
        far(t),
        near(t),
        near(u),
        ((a * (f(2.0) - t) - f(5.0) * a) * (f(2.0) - t) + f(8.0) * a) * (f(2.0) - t) - f(4.0) * a,
    ]
}

impl GridSample {
    /// The taps (input index or `None` for a zero pad, and weight) of one coordinate along a
    /// dim of `len` elements.
    fn taps<T: Real>(&self, g: T, len: usize, taps: &mut Vec<(Option<usize>, T)>) {
        taps.clear();
        let n = len as f64;
        let (lo, hi) = if self.align_corners { (0.0, n - 1.0) } else { (-0.5, n - 0.5) };
        let (lo, hi) = (T::from_f64(lo), T::from_f64(hi));
        let one = T::ONE;
        let two = T::from_f32(2.0);
        let len_t = T::from_f64(n);
        let mut x = if self.align_corners { (g + one) / two * (len_t - one) } else { ((g + one) * len_t - one) / two };
        if self.mode == Mode::Nearest {
            x = x.round_even();
        }
        if x < lo || x > hi {
            match self.padding {
                Padding::Border => {
                    x = if x < T::ZERO {
                        T::ZERO
                    } else if x > len_t - one {
                        len_t - one
                    } else {
                        x
                    }
                }
                Padding::Reflection => x = reflect(x, lo, hi),
                Padding::Zeros => {}
            }
        }
        let index = |i: f64| -> Option<usize> {
            match self.padding {
                Padding::Zeros => (i >= 0.0 && i < n).then_some(i as usize),
                Padding::Border => Some(i.clamp(0.0, n - 1.0) as usize),
                Padding::Reflection => {
                    let r = reflect(T::from_f64(i), lo, hi).to_f64().trunc();
                    Some(r.clamp(0.0, n - 1.0) as usize)
                }
            }
        };
        match self.mode {
            Mode::Nearest => taps.push((index(x.to_f64()), one)),
            Mode::Linear => {
                let x0 = x.floor();
                let t = x - x0;
                let x0 = x0.to_f64();
                taps.push((index(x0), one - t));
                taps.push((index(x0 + 1.0), t));
            }
            Mode::Cubic => {
                let x0 = x.floor();
                let w = cubic_weights(x - x0);
                let x0 = x0.to_f64();
                for (j, w) in w.into_iter().enumerate() {
                    taps.push((index(x0 + j as f64 - 1.0), w));
                }
            }
        }
    }

    fn sample<T: Real>(&self, x: &[T], xs: &[usize], grid: &[T], out_spatial: &[usize]) -> Vec<T> {
        let (n, c, dims) = (xs[0], xs[1], &xs[2..]);
        let r = dims.len();
        let points: usize = out_spatial.iter().product();
        let plane: usize = dims.iter().product();
        let strides = util::strides(dims);
        let mut out = vec![T::ZERO; n * c * points];
        let mut taps: Vec<Vec<(Option<usize>, T)>> = vec![vec![]; r];
        let mut combo = vec![0usize; r];
        for b in 0..n {
            for p in 0..points {
                let g = &grid[(b * points + p) * r..(b * points + p + 1) * r];
                for (d, t) in taps.iter_mut().enumerate() {
                    self.taps(g[r - 1 - d], dims[d], t);
                }
                // Every combination of one tap per dim: its offset and weight, or a zero pad.
                let mut terms: Vec<(usize, T)> = vec![];
                combo.fill(0);
                'combos: loop {
                    let mut off = Some(0usize);
                    let mut w = T::ONE;
                    for d in 0..r {
                        let (i, tw) = taps[d][combo[d]];
                        w = w * tw;
                        off = off.zip(i).map(|(o, i)| o + i * strides[d]);
                    }
                    if let Some(o) = off {
                        terms.push((o, w));
                    }
                    for d in (0..r).rev() {
                        combo[d] += 1;
                        if combo[d] < taps[d].len() {
                            continue 'combos;
                        }
                        combo[d] = 0;
                    }
                    break;
                }
                for ch in 0..c {
                    let src = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
                    out[(b * c + ch) * points + p] = terms.iter().fold(T::ZERO, |a, &(o, w)| a + w * src[o]);
                }
            }
        }
        out
    }
}

impl Kernel for GridSample {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let g = util::input(inputs, 1, &self.at)?;
        util::expect_dtype(&x, FLOAT_TYPES, 0, &self.at)?;
        util::expect_dtype(&g, FLOAT_TYPES, 1, &self.at)?;
        let xs = x.shape();
        if xs.len() < 3 {
            return Err(Error::input(&self.at, 0, "a tensor [N, C, spatial...] of rank 3 or more", format!("{xs:?}")));
        }
        let r = xs.len() - 2;
        let gs = g.shape();
        if gs.len() != xs.len() || gs[0] != xs[0] || gs[gs.len() - 1] != r {
            return Err(Error::input(
                &self.at,
                1,
                format!("a grid of shape [{}, out spatial..., {r}]", xs[0]),
                format!("{gs:?}"),
            ));
        }
        let out_spatial = &gs[1..gs.len() - 1];
        let mut shape = vec![xs[0], xs[1]];
        shape.extend_from_slice(out_spatial);
        elems::count(&shape, &self.at)?;
        if x.dtype() == DataType::Double {
            let grid = crate::ops::elementwise::to_f64_vec(&g)?;
            let out = self.sample(x.as_slice::<f64>()?, xs, &grid, out_spatial);
            return Ok(vec![util::out(shape, out)?]);
        }
        let grid = widen(&g)?;
        let out = self.sample(&widen(&x)?, xs, &grid, out_spatial);
        Ok(vec![narrow(x.dtype(), shape, out)?])
    }
}

/// AffineGrid: the sampling grid of the affine maps `theta` ([N, 2, 3] or [N, 3, 4]) over an
/// output of size `size` ([N, C, H, W] or [N, C, D, H, W]).
struct AffineGrid {
    align_corners: bool,
    at: Location,
}

pub(super) fn build_affine_grid(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(AffineGrid { align_corners: ctx.node.int_or("align_corners", 0)? != 0, at: ctx.node.location() }))
}

/// The normalized coordinates of the `n` positions of one axis.
fn base_coords(n: usize, align_corners: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let i = i as f64;
            if align_corners {
                if n == 1 {
                    -1.0
                } else {
                    -1.0 + 2.0 * i / (n as f64 - 1.0)
                }
            } else {
                (2.0 * i + 1.0) / n as f64 - 1.0
            }
        })
        .collect()
}

impl Kernel for AffineGrid {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let theta: TensorView<'_> = util::input(inputs, 0, &self.at)?;
        let size = util::input(inputs, 1, &self.at)?;
        util::expect_dtype(&theta, FLOAT_TYPES, 0, &self.at)?;
        let size = elems::int_values(&size, 1, &[DataType::Int64], &self.at)?;
        let dims: Vec<usize> = size
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| Error::input(&self.at, 1, "non-negative sizes", format!("{size:?}")))
            })
            .collect::<Result<_>>()?;
        let r = match dims.len() {
            4 => 2,
            5 => 3,
            _ => return Err(Error::input(&self.at, 1, "a size [N, C, H, W] or [N, C, D, H, W]", format!("{size:?}"))),
        };
        let n = dims[0];
        if theta.shape() != [n, r, r + 1] {
            return Err(Error::input(
                &self.at,
                0,
                format!("theta of shape [{n}, {r}, {}]", r + 1),
                format!("{:?}", theta.shape()),
            ));
        }
        let spatial = &dims[2..];
        let mut shape = vec![n];
        shape.extend_from_slice(spatial);
        shape.push(r);
        let total = elems::count(&shape, &self.at)?;
        let th = crate::ops::elementwise::to_f64_vec(&theta)?;
        // Per axis, in (x, y[, z]) order: the coordinates along W, H[, D].
        let axes: Vec<Vec<f64>> = (0..r).map(|k| base_coords(spatial[r - 1 - k], self.align_corners)).collect();
        let points: usize = spatial.iter().product();
        let mut out = Vec::with_capacity(total);
        for b in 0..n {
            let t = &th[b * r * (r + 1)..(b + 1) * r * (r + 1)];
            for p in 0..points {
                // Position p split into spatial indices, last dim fastest.
                let mut rem = p;
                let mut homog = vec![1.0; r + 1];
                for k in 0..r {
                    let len = spatial[r - 1 - k];
                    homog[k] = axes[k][rem % len];
                    rem /= len;
                }
                for row in 0..r {
                    out.push((0..=r).map(|j| t[row * (r + 1) + j] * homog[j]).sum::<f64>());
                }
            }
        }
        let v = match theta.dtype() {
            DataType::Double => util::out(shape, out)?,
            d => narrow(d, shape, out.into_iter().map(|v| v as f32).collect())?,
        };
        Ok(vec![v])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::layout::testkit::*;

    #[test]
    fn grid_sample_matches_the_reference() {
        // Values from onnx.reference.ReferenceEvaluator: X = ramp [1,2,3,4], grid [1,2,3,2].
        let x = t(&[1, 2, 3, 4], (0..24).map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.0).collect());
        let grid = t(&[1, 2, 3, 2], vec![-1.2, -0.9, -0.35, 0.2, 0.0, 0.0, 0.71, -0.45, 1.3, 1.1, 0.4, 0.93]);
        for (mode, pad, align, want) in super::cases::CASES {
            let attrs = vec![string("mode", mode), string("padding_mode", pad), int("align_corners", *align)];
            let y = run1("GridSample", 20, attrs, &[Some(x.clone()), Some(grid.clone())]).unwrap();
            let (s, d) = f32s(&y);
            assert_eq!(s, vec![1, 2, 2, 3]);
            for (i, (g, w)) in d.iter().zip(want.iter()).enumerate() {
                assert!((g - w).abs() < 1e-4, "{mode} {pad} {align}: element {i}: got {g}, want {w}");
            }
        }
    }

    #[test]
    fn grid_sample_3d_opset16_names_and_errors() {
        let x = t(&[1, 1, 2, 2, 2], (0..8).map(|i| i as f32).collect());
        // The center of the cube with align_corners: the mean of the corners.
        let g = t(&[1, 1, 1, 1, 3], vec![0.0f32, 0.0, 0.0]);
        let y = run1("GridSample", 20, vec![int("align_corners", 1)], &[Some(x.clone()), Some(g.clone())]).unwrap();
        assert_close(&f32s(&y).1, &[3.5], 1e-6);
        let y = run1(
            "GridSample",
            16,
            vec![string("mode", "bilinear")],
            &[Some(t(&[1, 1, 1, 2], vec![1f32, 3.])), Some(t(&[1, 1, 1, 2], vec![0f32, 0.]))],
        )
        .unwrap();
        assert_close(&f32s(&y).1, &[2.0], 1e-6);
        let err =
            run1("GridSample", 20, vec![], &[Some(x.clone()), Some(t(&[1, 1, 1, 1, 2], vec![0f32; 2]))]).unwrap_err();
        assert!(err.to_string().contains("input 1"), "{err}");
        let err = run1("GridSample", 20, vec![string("mode", "area")], &[Some(x), Some(g)]).unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
    }

    #[test]
    fn affine_grid_matches_the_reference() {
        let theta = t(&[2, 2, 3], vec![1.0f32, 0.2, -0.1, -0.3, 0.8, 0.25, 0.5, -0.6, 0.0, 0.9, 1.1, -0.4]);
        for (align, want) in super::cases::AFFINE {
            let y = run1(
                "AffineGrid",
                20,
                vec![int("align_corners", *align)],
                &[Some(theta.clone()), Some(i64s(&[2, 1, 2, 3]))],
            )
            .unwrap();
            let (s, d) = f32s(&y);
            assert_eq!(s, vec![2, 2, 3, 2]);
            assert_close(&d, want, 1e-5);
        }
        let theta3 = t(&[1, 3, 4], vec![1.0f32, 0., 0., 0.1, 0., 1., 0., 0.2, 0., 0., 1., 0.3]);
        let y = run1(
            "AffineGrid",
            20,
            vec![int("align_corners", 1)],
            &[Some(theta3.clone()), Some(i64s(&[1, 1, 2, 1, 2]))],
        )
        .unwrap();
        let (s, d) = f32s(&y);
        assert_eq!(s, vec![1, 2, 1, 2, 3]);
        assert_close(&d, &[-0.9, -0.8, -0.7, 1.1, -0.8, -0.7, -0.9, -0.8, 1.3, 1.1, -0.8, 1.3], 1e-6);
        let err = run1("AffineGrid", 20, vec![], &[Some(theta3), Some(i64s(&[1, 1, 2, 2]))]).unwrap_err();
        assert!(err.to_string().contains("input 0"), "{err}");
    }
}
