//! Binary arithmetic written over one of its inputs, when the run hands that input over (its
//! last use) and nothing else holds its buffer: `Add(x, bias)` then allocates nothing.

use onyx_core::host_pool;
use onyx_core::{DataType, Result, TensorView, Value};

use super::binary::{max_nan, min_nan, Arith};
use super::num::Real;
use crate::ops::broadcast::{broadcast_shapes, update2};
use crate::ops::util;

/// `a op b` written over input `donated` (0 for `a`, 1 for `b`), whose value is `x`; `other` is
/// the other input. Applies to f32 and f64 when both inputs have one type and the output has
/// the donated input's shape; `Err(x)` (unchanged) otherwise, for the ordinary run.
pub(super) fn arith(
    op: Arith,
    donated: usize,
    x: Value,
    other: &TensorView<'_>,
) -> std::result::Result<Result<Value>, Value> {
    let Ok(t) = x.as_tensor() else { return Err(x) };
    let fits = t.dtype() == other.dtype()
        && broadcast_shapes(t.shape(), other.shape()).as_deref() == Some(t.shape())
        && !matches!(op, Arith::Mod { .. })
        && (donated == 0 || op != Arith::PRelu);
    if !fits {
        return Err(x);
    }
    match t.dtype() {
        DataType::Float => go::<f32>(op, donated, x, other),
        DataType::Double => go::<f64>(op, donated, x, other),
        _ => Err(x),
    }
}

fn go<T: Real>(
    op: Arith,
    donated: usize,
    x: Value,
    other: &TensorView<'_>,
) -> std::result::Result<Result<Value>, Value> {
    let Ok(b) = other.as_slice::<T>() else { return Err(x) };
    let (shape, mut acc) = host_pool::reclaim::<T>(x)?;
    let done = update(op, donated == 0, &mut acc, &shape, b, other.shape());
    Ok(done.and_then(|()| util::out(shape, acc)))
}

/// `acc = acc op b` (or `b op acc` when `acc` is the right operand), `b` broadcast to `acc`.
fn update<T: Real>(
    op: Arith,
    acc_is_left: bool,
    acc: &mut [T],
    shape: &[usize],
    b: &[T],
    b_shape: &[usize],
) -> Result<()> {
    macro_rules! with {
        ($f:expr) => {{
            let f = $f;
            if acc_is_left {
                update2(acc, shape, b, b_shape, |x: &mut T, &y: &T| *x = f(*x, y))
            } else {
                update2(acc, shape, b, b_shape, |y: &mut T, &x: &T| *y = f(x, *y))
            }
        }};
    }
    match op {
        Arith::Add => with!(|x: T, y: T| x + y),
        Arith::Sub => with!(|x: T, y: T| x - y),
        Arith::Mul => with!(|x: T, y: T| x * y),
        Arith::Div => with!(|x: T, y: T| x / y),
        Arith::PRelu => with!(|x: T, y: T| if x < T::ZERO { y * x } else { x }),
        Arith::Max => with!(|x: T, y: T| max_nan(x, y)),
        Arith::Min => with!(|x: T, y: T| min_nan(x, y)),
        Arith::Mod { .. } => unreachable!("Mod is never computed in place (checked by `arith`)"),
    }
}
