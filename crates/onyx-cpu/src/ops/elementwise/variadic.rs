//! Variadic Sum, Mean, Max and Min (1 to n inputs, broadcast together) and Where.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::binary::{arith_int, arith_real, max_nan, min_nan, Arith};
use super::num::{Int, Num, Real};
use super::unary::INT_TYPES;
use super::{dispatch_int, dtype_error, narrow, same_dtype_error, sized_out, sized_slice, widen, FLOAT_TYPES};
use crate::ops::broadcast::{broadcast_shapes, map3, map3_any, update2};
use crate::ops::util;
use crate::Registry;

/// Registers Sum, Mean, Max, Min and Where.
pub(super) fn register(r: &mut Registry) {
    for op in ["Sum", "Mean", "Max", "Min"] {
        r.add(op, build_variadic);
    }
    r.add("Where", build_where);
}

/// How the inputs of a variadic op combine.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fold {
    Sum,
    Mean,
    Max,
    Min,
}

impl Fold {
    /// The pairwise op the fold is made of.
    fn pairwise(self) -> Arith {
        match self {
            Fold::Sum | Fold::Mean => Arith::Add,
            Fold::Max => Arith::Max,
            Fold::Min => Arith::Min,
        }
    }
}

/// One operand: elements and shape.
type Operand<'a, T> = (&'a [T], &'a [usize]);

/// Folds operands pairwise with broadcasting, updating the accumulator in place whenever the
/// next operand does not grow it. `combine(a, b)` is the broadcast pairwise op and `update` the
/// in-place one.
fn fold<T: Num>(
    operands: &[Operand<'_, T>],
    combine: impl Fn(&[T], &[usize], &[T], &[usize]) -> Result<(Vec<usize>, Vec<T>)>,
    update: impl Fn(T, T) -> T + Sync,
) -> Result<(Vec<usize>, Vec<T>)> {
    let Some(&(first, first_shape)) = operands.first() else {
        return Err(Error::InvalidArgument("at least one input is needed".into()));
    };
    let (mut shape, mut acc) = (first_shape.to_vec(), first.to_vec());
    for &(x, x_shape) in &operands[1..] {
        if broadcast_shapes(&shape, x_shape).as_deref() == Some(shape.as_slice()) {
            update2(&mut acc, &shape, x, x_shape, |o, &y| *o = update(*o, y))?;
        } else {
            (shape, acc) = combine(&acc, &shape, x, x_shape)?;
        }
    }
    Ok((shape, acc))
}

fn fold_real<T: Real>(op: Fold, operands: &[Operand<'_, T>]) -> Result<(Vec<usize>, Vec<T>)> {
    let pair = op.pairwise();
    let combine = |a: &[T], sa: &[usize], b: &[T], sb: &[usize]| arith_real(pair, a, sa, b, sb);
    let (shape, mut acc) = match op {
        Fold::Sum | Fold::Mean => fold(operands, combine, |x, y| x + y)?,
        Fold::Max => fold(operands, combine, max_nan)?,
        Fold::Min => fold(operands, combine, min_nan)?,
    };
    if op == Fold::Mean {
        let n = T::from_f64(operands.len() as f64);
        acc.iter_mut().for_each(|v| *v = *v / n);
    }
    Ok((shape, acc))
}

fn fold_int<T: Int>(op: Fold, operands: &[Operand<'_, T>]) -> Result<(Vec<usize>, Vec<T>)> {
    let pair = op.pairwise();
    let combine = |a: &[T], sa: &[usize], b: &[T], sb: &[usize]| arith_int(pair, a, sa, b, sb);
    let (shape, mut acc) = match op {
        Fold::Sum | Fold::Mean => fold(operands, combine, Num::add)?,
        Fold::Max => fold(operands, combine, Num::max_of)?,
        Fold::Min => fold(operands, combine, Num::min_of)?,
    };
    if op == Fold::Mean {
        acc.iter_mut().for_each(|v| *v = v.div_count(operands.len()));
    }
    Ok((shape, acc))
}

/// Sum, Mean, Max or Min of 1..n inputs.
struct Variadic {
    op: Fold,
    at: Location,
}

fn build_variadic(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let op = match ctx.node.op_type.as_str() {
        "Sum" => Fold::Sum,
        "Mean" => Fold::Mean,
        "Max" => Fold::Max,
        _ => Fold::Min,
    };
    Ok(Box::new(Variadic { op, at: ctx.node.location() }))
}

impl Variadic {
    fn compute(&self, views: &[TensorView<'_>]) -> Result<Value> {
        let Some(dtype) = views.first().map(TensorView::dtype) else {
            return Err(Error::input(&self.at, 0, "at least one input", "none"));
        };
        if let Some((i, v)) = views.iter().enumerate().find(|(_, v)| v.dtype() != dtype) {
            return Err(same_dtype_error(&self.at, i, dtype, v.dtype()));
        }
        fn slices<'a, T: onyx_core::Element>(views: &'a [TensorView<'a>]) -> Result<Vec<Operand<'a, T>>> {
            views.iter().map(|v| Ok((v.as_slice::<T>()?, v.shape()))).collect()
        }
        match dtype {
            DataType::Float => fold_real::<f32>(self.op, &slices(views)?).and_then(|(s, v)| util::out(s, v)),
            DataType::Double => fold_real::<f64>(self.op, &slices(views)?).and_then(|(s, v)| util::out(s, v)),
            DataType::Float16 | DataType::BFloat16 => {
                let wide: Vec<Vec<f32>> = views.iter().map(widen).collect::<Result<_>>()?;
                let operands: Vec<Operand<'_, f32>> =
                    wide.iter().zip(views).map(|(w, v)| (w.as_slice(), v.shape())).collect();
                fold_real(self.op, &operands).and_then(|(s, v)| narrow(dtype, s, v))
            }
            other => dispatch_int!(other,
                T => fold_int::<T>(self.op, &slices(views)?).and_then(|(s, v)| util::out(s, v)),
                _ => Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
        }
    }
}

impl Kernel for Variadic {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let views: Vec<TensorView<'_>> =
            (0..inputs.len()).map(|i| util::input(inputs, i, &self.at)).collect::<Result<_>>()?;
        if let ([x], Some(Some(value))) = (views.as_slice(), inputs.first()) {
            // One input: the result is the input itself (shared, not copied, when owned).
            if FLOAT_TYPES.contains(&x.dtype()) || INT_TYPES.contains(&x.dtype()) {
                return Ok(vec![value.to_value()]);
            }
        }
        Ok(vec![self.compute(&views).map_err(|e| e.at(&self.at))?])
    }
}

/// Where(condition, X, Y): X where the condition holds, Y elsewhere, all three broadcast.
struct Where {
    at: Location,
}

fn build_where(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Where { at: ctx.node.location() }))
}

/// Selects between elements of one plain type.
fn select<T: bytemuck::Pod + Send + Sync + Default>(
    dtype: DataType,
    c: (&[u8], &[usize]),
    x: &TensorView<'_>,
    y: &TensorView<'_>,
) -> Result<Value> {
    let (shape, out) =
        map3(
            c,
            (sized_slice::<T>(x)?, x.shape()),
            (sized_slice::<T>(y)?, y.shape()),
            |&c, &a, &b| if c != 0 { a } else { b },
        )?;
    sized_out(dtype, shape, out)
}

impl Where {
    fn compute(&self, c: &TensorView<'_>, x: &TensorView<'_>, y: &TensorView<'_>) -> Result<Value> {
        if c.dtype() != DataType::Bool {
            return Err(dtype_error(&self.at, 0, &[DataType::Bool], c.dtype()));
        }
        let dtype = x.dtype();
        if y.dtype() != dtype {
            return Err(Error::input(
                &self.at,
                2,
                format!("a {dtype} tensor (the type of input 1)"),
                format!("a {} tensor", y.dtype()),
            ));
        }
        let cond = (c.bytes()?, c.shape());
        if dtype == DataType::String {
            let (shape, out) = map3_any(cond, (x.strings()?, x.shape()), (y.strings()?, y.shape()), |&c, a, b| {
                if c != 0 {
                    a.clone()
                } else {
                    b.clone()
                }
            })?;
            return Tensor::from_strings(shape, out).map(Value::Tensor);
        }
        match dtype.bit_width() {
            8 => select::<u8>(dtype, cond, x, y),
            16 => select::<u16>(dtype, cond, x, y),
            32 => select::<u32>(dtype, cond, x, y),
            64 => select::<u64>(dtype, cond, x, y),
            128 => select::<[u64; 2]>(dtype, cond, x, y),
            _ => Err(Error::input(&self.at, 1, "a tensor of whole-byte elements", format!("a {dtype} tensor"))),
        }
    }
}

impl Kernel for Where {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (c, x, y) = (util::input(inputs, 0, at)?, util::input(inputs, 1, at)?, util::input(inputs, 2, at)?);
        Ok(vec![self.compute(&c, &x, &y).map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use onyx_core::{DataType, Tensor};

    #[test]
    fn variadic_ops_match_naive_broadcasting() {
        let mut rng = fastrand::Rng::with_seed(5);
        let shapes: &[&[&[usize]]] = &[
            &[&[3, 4]],
            &[&[3, 4], &[3, 4], &[3, 4]],
            &[&[5, 1], &[1, 7], &[7], &[]],
            &[&[2, 1, 3], &[2, 3], &[4, 1, 1, 1]],
            &[&[40_000, 3], &[3], &[40_000, 1]],
        ];
        type Reference = fn(&[f64]) -> f64;
        let cases: &[(&str, Reference)] = &[
            ("Sum", |v| v.iter().sum()),
            ("Mean", |v| v.iter().sum::<f64>() / v.len() as f64),
            ("Max", |v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            ("Min", |v| v.iter().copied().fold(f64::INFINITY, f64::min)),
        ];
        for &(op, reference) in cases {
            for &operand_shapes in shapes {
                let data: Vec<Vec<f32>> =
                    operand_shapes.iter().map(|s| random_f32(&mut rng, s.iter().product(), -9.0, 9.0)).collect();
                let out_shape = crate::ops::broadcast::broadcast_all(operand_shapes).unwrap();
                for dtype in [DataType::Float, DataType::Double, DataType::BFloat16] {
                    let tensors: Vec<Tensor> = data
                        .iter()
                        .zip(operand_shapes)
                        .map(|(d, s)| match dtype {
                            DataType::Double => tensor(s, d.iter().map(|&x| x as f64).collect()),
                            DataType::BFloat16 => tensor(s, d.iter().map(|&x| half::bf16::from_f32(x)).collect()),
                            _ => tensor(s, d.clone()),
                        })
                        .collect();
                    let refs: Vec<&Tensor> = tensors.iter().collect();
                    let y = run(op, 13, vec![], &refs).unwrap();
                    assert_eq!((y.dtype(), y.shape()), (dtype, &out_shape[..]), "{op}");
                    let wide: Vec<Vec<f64>> = tensors.iter().map(floats).collect();
                    let operands: Vec<(&[f64], &[usize])> =
                        wide.iter().zip(operand_shapes).map(|(w, s)| (w.as_slice(), *s)).collect();
                    let want = naive_broadcast(&operands, &out_shape, reference);
                    let tol = if dtype == DataType::BFloat16 { 1e-2 } else { 1e-6 };
                    assert_close(&floats(&y), &want, tol, tol, &format!("{op} {dtype} {operand_shapes:?}"));
                }
            }
        }
    }

    #[test]
    fn max_and_min_propagate_nan_and_handle_integers() {
        // As ONNX Runtime: Max([1, nan, 3, -0], [nan, 2, 1, 0]) = [nan, nan, 3, 0].
        let a = tensor(&[4], vec![1f32, f32::NAN, 3.0, -0.0]);
        let b = tensor(&[4], vec![f32::NAN, 2.0, 1.0, 0.0]);
        assert_close(
            &floats(&run("Max", 13, vec![], &[&a, &b]).unwrap()),
            &[f64::NAN, f64::NAN, 3.0, 0.0],
            0.0,
            0.0,
            "Max",
        );
        assert_close(
            &floats(&run("Min", 13, vec![], &[&a, &b]).unwrap()),
            &[f64::NAN, f64::NAN, 1.0, 0.0],
            0.0,
            0.0,
            "Min",
        );
        let i = tensor(&[3], vec![-5i8, 100, 7]);
        let j = tensor(&[1], vec![6i8]);
        let k = tensor(&[3], vec![0i8, -128, 127]);
        assert_eq!(ints(&run("Max", 13, vec![], &[&i, &j, &k]).unwrap()), vec![6, 100, 127]);
        assert_eq!(ints(&run("Min", 13, vec![], &[&i, &j, &k]).unwrap()), vec![-5, -128, 6]);
        assert_eq!(ints(&run("Sum", 13, vec![], &[&i, &j, &k]).unwrap()), vec![1, -22, -116]);
        assert_eq!(ints(&run("Mean", 13, vec![], &[&i, &j]).unwrap()), vec![0, 53, 6]);
        let one = run("Sum", 13, vec![], &[&i]).unwrap();
        assert_eq!((one.shape(), ints(&one)), (&[3][..], vec![-5, 100, 7]));
    }

    #[test]
    fn variadic_errors() {
        assert!(run("Sum", 13, vec![], &[]).unwrap_err().to_string().contains("at least one input"));
        let a = tensor(&[2], vec![1f32, 2.0]);
        let b = tensor(&[3], vec![1f32, 2.0, 3.0]);
        let err = run("Max", 13, vec![], &[&a, &a, &b]).unwrap_err().to_string();
        assert!(err.contains("Max node 'n'") && err.contains("[2]") && err.contains("[3]"), "{err}");
        let c = tensor(&[2], vec![1f64, 2.0]);
        let err = run("Mean", 13, vec![], &[&a, &c]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("double"), "{err}");
        let s = bools(&[1], &[true]);
        assert!(run("Sum", 13, vec![], &[&s, &s]).is_err());
    }

    #[test]
    fn where_selects_with_three_way_broadcasting() {
        let c = bools(&[2, 1], &[true, false]);
        let x = tensor(&[3], vec![1i64, 2, 3]);
        let y = tensor(&[2, 3], vec![10i64, 20, 30, 40, 50, 60]);
        let out = run("Where", 16, vec![], &[&c, &x, &y]).unwrap();
        assert_eq!((out.dtype(), out.shape(), ints(&out)), (DataType::Int64, &[2, 3][..], vec![1, 2, 3, 40, 50, 60]));
        // Every element width, strings and bools.
        let c = bools(&[3], &[false, true, false]);
        let h = tensor(&[3], vec![half::f16::from_f32(1.5), half::f16::from_f32(2.5), half::f16::from_f32(3.5)]);
        let z = tensor(&[], vec![half::f16::from_f32(-1.0)]);
        let out = run("Where", 16, vec![], &[&c, &h, &z]).unwrap();
        assert_eq!((out.dtype(), floats(&out)), (DataType::Float16, vec![-1.0, 2.5, -1.0]));
        let b = bools(&[3], &[true, true, false]);
        let nb = bools(&[1], &[false]);
        assert_eq!(bool_values(&run("Where", 16, vec![], &[&c, &b, &nb]).unwrap()), [false, true, false]);
        let s = Tensor::from_strings(vec![3], vec!["a".into(), "b".into(), "c".into()]).unwrap();
        let t = Tensor::from_strings(vec![1], vec!["-".into()]).unwrap();
        let out = run("Where", 16, vec![], &[&c, &s, &t]).unwrap();
        assert_eq!(out.view().unwrap().strings().unwrap(), ["-", "b", "-"]);
        // Large and random: against the naive loop.
        let mut rng = fastrand::Rng::with_seed(3);
        let (sc, sx, sy): (&[usize], &[usize], &[usize]) = (&[300, 1, 229], &[7, 1], &[1, 229]);
        let cond: Vec<bool> = (0..300 * 229).map(|_| rng.bool()).collect();
        let xs = random_f32(&mut rng, 7, -1.0, 1.0);
        let ys = random_f32(&mut rng, 229, -1.0, 1.0);
        let out =
            run("Where", 16, vec![], &[&bools(sc, &cond), &tensor(sx, xs.clone()), &tensor(sy, ys.clone())]).unwrap();
        let cf: Vec<f64> = cond.iter().map(|&c| if c { 1.0 } else { 0.0 }).collect();
        let (xf, yf): (Vec<f64>, Vec<f64>) =
            (xs.iter().map(|&v| v as f64).collect(), ys.iter().map(|&v| v as f64).collect());
        let want =
            naive_broadcast(
                &[(&cf, sc), (&xf, sx), (&yf, sy)],
                &[300, 7, 229],
                |v| if v[0] != 0.0 { v[1] } else { v[2] },
            );
        assert_eq!(floats(&out), want);
    }

    #[test]
    fn where_errors() {
        let x = tensor(&[2], vec![1f32, 2.0]);
        let c = tensor(&[2], vec![1u8, 0]);
        assert!(run("Where", 16, vec![], &[&c, &x, &x]).unwrap_err().to_string().contains("input 0"));
        let c = bools(&[2], &[true, false]);
        let y = tensor(&[2], vec![1f64, 2.0]);
        let err = run("Where", 16, vec![], &[&c, &x, &y]).unwrap_err().to_string();
        assert!(err.contains("input 2") && err.contains("double"), "{err}");
        let z = tensor(&[3], vec![1f32, 2.0, 3.0]);
        let err = run("Where", 16, vec![], &[&c, &x, &z]).unwrap_err().to_string();
        assert!(err.contains("Where node 'n'") && err.contains("[2]") && err.contains("[3]"), "{err}");
    }
}
