//! Binary kernels with broadcasting: arithmetic, Pow, comparisons, logical and bitwise ops.

use std::borrow::Cow;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::num::{Int, Num, Real};
use super::unary::INT_TYPES;
use super::{bool_out, dispatch_int, dtype_error, narrow, same_dtype_error, to_f64_vec, widen, FLOAT_TYPES};
use crate::ops::broadcast::{broadcast_shapes, map2};
use crate::ops::util;
use crate::Registry;

/// Registers the binary kernels.
pub(super) fn register(r: &mut Registry) {
    for op in [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "PRelu",
        "Pow",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitShift",
    ] {
        r.add(op, build_binary);
    }
}

/// Arithmetic on two numbers of one type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    /// `fmod`: C's remainder (sign of the dividend) when true, Python's (sign of the divisor)
    /// when false.
    Mod {
        fmod: bool,
    },
    /// `x < 0 ? slope * x : x` with the slope broadcast to x.
    PRelu,
    /// The larger, NaN if either is NaN.
    Max,
    /// The smaller, NaN if either is NaN.
    Min,
}

/// A comparison giving a bool.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compare {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

/// A bitwise op on integers or a logical op on bools.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bits {
    And,
    Or,
    Xor,
}

/// Every binary op of this module.
#[derive(Clone, Copy, Debug, PartialEq)]
enum BinaryOp {
    Arith(Arith),
    Pow,
    Compare(Compare),
    Logical(Bits),
    Bitwise(Bits),
    Shift { left: bool },
}

impl BinaryOp {
    fn from_node(node: &onyx_core::ir::Node) -> Result<Self> {
        use BinaryOp::*;
        Ok(match node.op_type.as_str() {
            "Add" => Arith(self::Arith::Add),
            "Sub" => Arith(self::Arith::Sub),
            "Mul" => Arith(self::Arith::Mul),
            "Div" => Arith(self::Arith::Div),
            "Mod" => match node.int_or("fmod", 0)? {
                0 => Arith(self::Arith::Mod { fmod: false }),
                1 => Arith(self::Arith::Mod { fmod: true }),
                other => return Err(Error::attribute(&node.location(), "fmod", "0 or 1", other.to_string())),
            },
            "PRelu" => Arith(self::Arith::PRelu),
            "Pow" => Pow,
            "Equal" => Compare(self::Compare::Equal),
            "Less" => Compare(self::Compare::Less),
            "Greater" => Compare(self::Compare::Greater),
            "LessOrEqual" => Compare(self::Compare::LessOrEqual),
            "GreaterOrEqual" => Compare(self::Compare::GreaterOrEqual),
            "And" => Logical(Bits::And),
            "Or" => Logical(Bits::Or),
            "Xor" => Logical(Bits::Xor),
            "BitwiseAnd" => Bitwise(Bits::And),
            "BitwiseOr" => Bitwise(Bits::Or),
            "BitwiseXor" => Bitwise(Bits::Xor),
            "BitShift" => match node.get_string("direction")?.as_deref() {
                Some("LEFT") => Shift { left: true },
                Some("RIGHT") => Shift { left: false },
                other => {
                    let found = other.map_or("no attribute".to_string(), |s| format!("\"{s}\""));
                    return Err(Error::attribute(&node.location(), "direction", "\"LEFT\" or \"RIGHT\"", found));
                }
            },
            other => return Err(Error::node(&node.location(), format!("{other} is not a binary op"))),
        })
    }
}

/// The larger of two values; NaN when either is NaN (as ONNX Runtime's Max).
#[inline]
pub(super) fn max_nan<T: Num>(x: T, y: T) -> T {
    if y > x || y.is_nan() {
        y
    } else {
        x
    }
}

/// The smaller of two values; NaN when either is NaN (as ONNX Runtime's Min).
#[inline]
pub(super) fn min_nan<T: Num>(x: T, y: T) -> T {
    if y < x || y.is_nan() {
        y
    } else {
        x
    }
}

/// Shape and elements of a broadcast result.
type Broadcast<T> = (Vec<usize>, Vec<T>);

/// `a op b` with broadcasting for f32 and f64 (`Mod` computes C's fmod).
pub(super) fn arith_real<T: Real>(op: Arith, a: &[T], sa: &[usize], b: &[T], sb: &[usize]) -> Result<Broadcast<T>> {
    match op {
        Arith::Add => map2(a, sa, b, sb, |&x, &y| x + y),
        Arith::Sub => map2(a, sa, b, sb, |&x, &y| x - y),
        Arith::Mul => map2(a, sa, b, sb, |&x, &y| x * y),
        Arith::Div => map2(a, sa, b, sb, |&x, &y| x / y),
        Arith::Mod { .. } => map2(a, sa, b, sb, |&x, &y| x.fmod(y)),
        Arith::PRelu => map2(a, sa, b, sb, |&x, &y| if x < T::ZERO { y * x } else { x }),
        Arith::Max => map2(a, sa, b, sb, |&x, &y| max_nan(x, y)),
        Arith::Min => map2(a, sa, b, sb, |&x, &y| min_nan(x, y)),
    }
}

/// `a op b` with broadcasting for integers: wrapping arithmetic, division truncating toward
/// zero, and an error when a divisor is 0.
pub(super) fn arith_int<T: Int>(op: Arith, a: &[T], sa: &[usize], b: &[T], sb: &[usize]) -> Result<Broadcast<T>> {
    if matches!(op, Arith::Div | Arith::Mod { .. }) && !a.is_empty() && b.contains(&T::ZERO) {
        return Err(Error::InvalidArgument("integer division by zero (the divisor holds a 0)".into()));
    }
    match op {
        Arith::Add => map2(a, sa, b, sb, |&x, &y| x.add(y)),
        Arith::Sub => map2(a, sa, b, sb, |&x, &y| x.sub(y)),
        Arith::Mul => map2(a, sa, b, sb, |&x, &y| x.mul(y)),
        Arith::Div => map2(a, sa, b, sb, |&x, &y| x.div_trunc(y)),
        Arith::Mod { fmod: true } => map2(a, sa, b, sb, |&x, &y| x.rem_trunc(y)),
        Arith::Mod { fmod: false } => map2(a, sa, b, sb, |&x, &y| x.rem_floor(y)),
        Arith::PRelu => map2(a, sa, b, sb, |&x, &y| if x < T::ZERO { y.mul(x) } else { x }),
        Arith::Max => map2(a, sa, b, sb, |&x, &y| x.max_of(y)),
        Arith::Min => map2(a, sa, b, sb, |&x, &y| x.min_of(y)),
    }
}

/// Runs an arithmetic op on two views of the same numeric type.
pub(super) fn run_arith(op: Arith, a: &TensorView<'_>, b: &TensorView<'_>, at: &Location) -> Result<Value> {
    let (sa, sb) = (a.shape(), b.shape());
    let dtype = a.dtype();
    if b.dtype() != dtype {
        return Err(same_dtype_error(at, 1, dtype, b.dtype()));
    }
    if op == (Arith::Mod { fmod: false }) && dtype.is_float() {
        return Err(Error::attribute(at, "fmod", "1 for floating-point inputs", "0"));
    }
    if op == Arith::PRelu && broadcast_shapes(sa, sb).as_deref() != Some(sa) {
        return Err(Error::input(
            at,
            1,
            format!("a slope broadcastable to the input's shape {sa:?}"),
            format!("shape {sb:?}"),
        ));
    }
    match dtype {
        DataType::Float => {
            let (s, v) = arith_real(op, a.as_slice::<f32>()?, sa, b.as_slice::<f32>()?, sb)?;
            util::out(s, v)
        }
        DataType::Double => {
            let (s, v) = arith_real(op, a.as_slice::<f64>()?, sa, b.as_slice::<f64>()?, sb)?;
            util::out(s, v)
        }
        DataType::Float16 | DataType::BFloat16 => {
            let (s, v) = arith_real(op, &widen(a)?, sa, &widen(b)?, sb)?;
            narrow(dtype, s, v)
        }
        other => dispatch_int!(other, T => {
            let (s, v) = arith_int(op, a.as_slice::<T>()?, sa, b.as_slice::<T>()?, sb)?;
            util::out(s, v)
        }, _ => Err(dtype_error(at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
    }
}

/// The exponent as `T` (borrowed when it already is).
fn exponent_as<'a, T: Real>(y: &TensorView<'a>) -> Result<Cow<'a, [T]>> {
    if y.dtype() == T::DTYPE {
        return Ok(Cow::Borrowed(y.as_slice::<T>()?));
    }
    Ok(Cow::Owned(to_f64_vec(y)?.into_iter().map(T::from_f64).collect()))
}

/// x^y for float bases (any numeric exponent); squares exactly for the common exponent 2.
fn pow_real<T: Real>(x: &[T], sx: &[usize], y: &[T], sy: &[usize]) -> Result<Broadcast<T>> {
    if y == [T::from_f32(2.0)] {
        return map2(x, sx, y, sy, |&b, _| b * b);
    }
    map2(x, sx, y, sy, |&b, &e| b.powf(e))
}

/// Pow: float bases in their type (f16/bf16 in f32); integer bases through f64 and truncated
/// back as ONNX Runtime does.
fn run_pow(x: &TensorView<'_>, y: &TensorView<'_>, at: &Location) -> Result<Value> {
    let (sx, sy) = (x.shape(), y.shape());
    let exponent_error = |e: Error| match e {
        Error::DType { found, .. } => dtype_error(at, 1, &[FLOAT_TYPES, INT_TYPES].concat(), found),
        other => other,
    };
    match x.dtype() {
        DataType::Float => {
            let (s, v) = pow_real(x.as_slice::<f32>()?, sx, &exponent_as::<f32>(y).map_err(exponent_error)?, sy)?;
            util::out(s, v)
        }
        DataType::Double => {
            let (s, v) = pow_real(x.as_slice::<f64>()?, sx, &exponent_as::<f64>(y).map_err(exponent_error)?, sy)?;
            util::out(s, v)
        }
        DataType::Float16 | DataType::BFloat16 => {
            let (s, v) = pow_real(&widen(x)?, sx, &exponent_as::<f32>(y).map_err(exponent_error)?, sy)?;
            narrow(x.dtype(), s, v)
        }
        other => dispatch_int!(other, T => {
            let e = to_f64_vec(y).map_err(exponent_error)?;
            let (s, v) = map2(x.as_slice::<T>()?, sx, &e, sy, |&b, &e| T::from_f64(b.to_f64().powf(e)))?;
            util::out(s, v)
        }, _ => Err(dtype_error(at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
    }
}

/// A comparison of broadcast elements of any ordered type.
fn compare<T: PartialOrd + Sync>(op: Compare, a: &[T], sa: &[usize], b: &[T], sb: &[usize]) -> Result<Broadcast<u8>> {
    match op {
        Compare::Equal => map2(a, sa, b, sb, |x, y| u8::from(x == y)),
        Compare::Less => map2(a, sa, b, sb, |x, y| u8::from(x < y)),
        Compare::Greater => map2(a, sa, b, sb, |x, y| u8::from(x > y)),
        Compare::LessOrEqual => map2(a, sa, b, sb, |x, y| u8::from(x <= y)),
        Compare::GreaterOrEqual => map2(a, sa, b, sb, |x, y| u8::from(x >= y)),
    }
}

fn run_compare(op: Compare, a: &TensorView<'_>, b: &TensorView<'_>, at: &Location) -> Result<Value> {
    let (sa, sb) = (a.shape(), b.shape());
    if b.dtype() != a.dtype() {
        return Err(same_dtype_error(at, 1, a.dtype(), b.dtype()));
    }
    let (s, v) = match a.dtype() {
        DataType::Bool => {
            let norm =
                |v: &TensorView<'_>| -> Result<Vec<u8>> { Ok(v.bytes()?.iter().map(|&x| u8::from(x != 0)).collect()) };
            compare(op, &norm(a)?, sa, &norm(b)?, sb)?
        }
        DataType::String if op == Compare::Equal => compare(op, a.strings()?, sa, b.strings()?, sb)?,
        other => crate::dispatch_numeric!(other, T => compare(op, a.as_slice::<T>()?, sa, b.as_slice::<T>()?, sb)?,
            _ => return Err(dtype_error(at, 0, &[FLOAT_TYPES, INT_TYPES, &[DataType::Bool]].concat(), other))),
    };
    bool_out(s, v)
}

fn run_logical(op: Bits, a: &TensorView<'_>, b: &TensorView<'_>, at: &Location) -> Result<Value> {
    for (i, v) in [a, b].into_iter().enumerate() {
        if v.dtype() != DataType::Bool {
            return Err(dtype_error(at, i, &[DataType::Bool], v.dtype()));
        }
    }
    let (ba, bb) = (a.bytes()?, b.bytes()?);
    let (sa, sb) = (a.shape(), b.shape());
    let (s, v) = match op {
        Bits::And => map2(ba, sa, bb, sb, |&x, &y| u8::from(x != 0 && y != 0))?,
        Bits::Or => map2(ba, sa, bb, sb, |&x, &y| u8::from(x != 0 || y != 0))?,
        Bits::Xor => map2(ba, sa, bb, sb, |&x, &y| u8::from((x != 0) != (y != 0)))?,
    };
    bool_out(s, v)
}

/// Bitwise and/or/xor and shifts of integers.
fn bits_int<T: Int>(op: BinaryOp, a: &[T], sa: &[usize], b: &[T], sb: &[usize]) -> Result<Broadcast<T>> {
    match op {
        BinaryOp::Bitwise(Bits::And) => map2(a, sa, b, sb, |&x, &y| x.and(y)),
        BinaryOp::Bitwise(Bits::Or) => map2(a, sa, b, sb, |&x, &y| x.or(y)),
        BinaryOp::Shift { left: true } => map2(a, sa, b, sb, |&x, &y| x.shl(y)),
        BinaryOp::Shift { left: false } => map2(a, sa, b, sb, |&x, &y| x.shr(y)),
        _ => map2(a, sa, b, sb, |&x, &y| x.xor(y)),
    }
}

fn run_bits(op: BinaryOp, a: &TensorView<'_>, b: &TensorView<'_>, at: &Location) -> Result<Value> {
    if b.dtype() != a.dtype() {
        return Err(same_dtype_error(at, 1, a.dtype(), b.dtype()));
    }
    let allowed: &[DataType] = if matches!(op, BinaryOp::Shift { .. }) { &INT_TYPES[4..] } else { INT_TYPES };
    if !allowed.contains(&a.dtype()) {
        return Err(dtype_error(at, 0, allowed, a.dtype()));
    }
    dispatch_int!(a.dtype(), T => {
        let (s, v) = bits_int(op, a.as_slice::<T>()?, a.shape(), b.as_slice::<T>()?, b.shape())?;
        util::out(s, v)
    }, _ => Err(dtype_error(at, 0, allowed, a.dtype())))
}

/// A binary op with numpy broadcasting.
struct Binary {
    op: BinaryOp,
    at: Location,
}

fn build_binary(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Binary { op: BinaryOp::from_node(ctx.node)?, at: ctx.node.location() }))
}

impl Kernel for Binary {
    fn in_place_inputs(&self) -> &[usize] {
        match self.op {
            BinaryOp::Arith(_) => &[0, 1],
            _ => &[],
        }
    }

    fn run_donated(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        mut donated: Vec<(usize, Value)>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let Some((i, x)) = onyx_core::ep::take_largest(&mut donated) else { return self.run(inputs, wanted) };
        let inputs = &onyx_core::ep::with_inputs(inputs, &donated);
        let x = match (self.op, util::input(inputs, 1 - i.min(1), &self.at)) {
            (BinaryOp::Arith(op), Ok(other)) if i < 2 => match super::in_place::arith(op, i, x, &other) {
                Ok(y) => return Ok(vec![y.map_err(|e| e.at(&self.at))?]),
                Err(x) => x,
            },
            _ => x,
        };
        self.run(&onyx_core::ep::with_input(inputs, i, &x), wanted)
    }

    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (a, b) = (util::input(inputs, 0, at)?, util::input(inputs, 1, at)?);
        let y = match self.op {
            BinaryOp::Arith(op) => run_arith(op, &a, &b, at),
            BinaryOp::Pow => run_pow(&a, &b, at),
            BinaryOp::Compare(op) => run_compare(op, &a, &b, at),
            BinaryOp::Logical(op) => run_logical(op, &a, &b, at),
            op => run_bits(op, &a, &b, at),
        };
        Ok(vec![y.map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use onyx_core::{DataType, Tensor};

    /// Shape pairs covering same-shape, scalar, bias, column, outer-product and parallel cases.
    const SHAPES: &[(&[usize], &[usize])] = &[
        (&[3, 5], &[3, 5]),
        (&[], &[4, 3]),
        (&[2, 3, 7], &[7]),
        (&[5, 1], &[1, 6]),
        (&[3, 1, 5], &[4, 1]),
        (&[70_001], &[]),
        (&[3, 257, 97], &[257, 1]),
    ];

    type Reference = fn(f64, f64) -> f64;
    /// (op, attributes, reference, range of a, range of b).
    type Case = (&'static str, Vec<onyx_core::ir::Attribute>, Reference, (f32, f32), (f32, f32));

    fn float_cases() -> Vec<Case> {
        vec![
            ("Add", vec![], |x, y| x + y, (-9.0, 9.0), (-9.0, 9.0)),
            ("Sub", vec![], |x, y| x - y, (-9.0, 9.0), (-9.0, 9.0)),
            ("Mul", vec![], |x, y| x * y, (-9.0, 9.0), (-9.0, 9.0)),
            ("Div", vec![], |x, y| x / y, (-9.0, 9.0), (0.5, 9.0)),
            ("Mod", vec![attr_i("fmod", 1)], |x, y| x - (x / y).trunc() * y, (-9.0, 9.0), (0.5, 3.0)),
            ("PRelu", vec![], |x, y| if x < 0.0 { x * y } else { x }, (-9.0, 9.0), (-1.0, 1.0)),
            ("Pow", vec![], f64::powf, (0.1, 4.0), (-3.0, 3.0)),
        ]
    }

    fn cast_to(dtype: DataType, shape: &[usize], v: &[f32]) -> Tensor {
        match dtype {
            DataType::Double => tensor(shape, v.iter().map(|&x| x as f64).collect()),
            DataType::Float16 => tensor(shape, v.iter().map(|&x| half::f16::from_f32(x)).collect()),
            _ => tensor(shape, v.to_vec()),
        }
    }

    #[test]
    fn float_arithmetic_matches_naive_broadcasting() {
        let mut rng = fastrand::Rng::with_seed(11);
        for (op, attrs, reference, ra, rb) in float_cases() {
            for &(sa, sb) in SHAPES {
                // PRelu broadcasts the slope to the input only.
                let (sa, sb) = if op == "PRelu" && sa.len() < sb.len() { (sb, sa) } else { (sa, sb) };
                if op == "PRelu" && crate::ops::broadcast::broadcast_shapes(sa, sb).as_deref() != Some(sa) {
                    continue;
                }
                let a = random_f32(&mut rng, sa.iter().product(), ra.0, ra.1);
                let b = random_f32(&mut rng, sb.iter().product(), rb.0, rb.1);
                for (dtype, rtol) in [(DataType::Float, 2e-6), (DataType::Double, 1e-14), (DataType::Float16, 2e-3)] {
                    let (ta, tb) = (cast_to(dtype, sa, &a), cast_to(dtype, sb, &b));
                    let y = run(op, 22, attrs.clone(), &[&ta, &tb]).unwrap();
                    assert_eq!(y.dtype(), dtype);
                    let shape = crate::ops::broadcast::broadcast_shapes(sa, sb).unwrap();
                    assert_eq!(y.shape(), &shape[..], "{op} {sa:?} {sb:?}");
                    let (fa, fb) = (floats(&ta), floats(&tb));
                    let want = naive_broadcast(&[(&fa, sa), (&fb, sb)], &shape, |v| reference(v[0], v[1]));
                    let atol = if dtype == DataType::Float16 { 1e-2 } else { 1e-6 };
                    assert_close(&floats(&y), &want, rtol, atol, &format!("{op} {dtype} {sa:?} {sb:?}"));
                }
            }
        }
    }

    #[test]
    fn integer_arithmetic_wraps_and_truncates() {
        let a = tensor(&[7], vec![-7i32, 7, -7, 7, i32::MIN, i32::MAX, 0]);
        let b = tensor(&[7], vec![3i32, -3, -3, 3, -1, 2, 5]);
        let cases: &[(&str, i64, &[i64])] = &[
            ("Add", 0, &[-4, 4, -10, 10, i32::MAX as i64, i32::MIN as i64 + 1, 5]),
            ("Sub", 0, &[-10, 10, -4, 4, i32::MIN as i64 + 1, i32::MAX as i64 - 2, -5]),
            ("Mul", 0, &[-21, -21, 21, 21, i32::MIN as i64, -2, 0]),
            ("Div", 0, &[-2, -2, 2, 2, i32::MIN as i64, 1_073_741_823, 0]),
            ("Mod", 0, &[2, -2, -1, 1, 0, 1, 0]),
            ("Mod", 1, &[-1, 1, -1, 1, 0, 1, 0]),
        ];
        for &(op, fmod, want) in cases {
            let y = run(op, 14, vec![attr_i("fmod", fmod)], &[&a, &b]).unwrap();
            assert_eq!((y.dtype(), ints(&y)), (DataType::Int32, want.to_vec()), "{op} fmod={fmod}");
        }
        let u = tensor(&[3], vec![250u8, 3, 9]);
        let v = tensor(&[1], vec![10u8]);
        assert_eq!(ints(&run("Add", 14, vec![], &[&u, &v]).unwrap()), vec![4, 13, 19]);
        assert_eq!(ints(&run("Sub", 14, vec![], &[&u, &v]).unwrap()), vec![240, 249, 255]);
        assert_eq!(ints(&run("Mod", 13, vec![], &[&u, &v]).unwrap()), vec![0, 3, 9]);
        let s = tensor(&[2, 2], vec![-4i64, 5, -6, 7]);
        let slope = tensor(&[2, 1], vec![3i64, -2]);
        assert_eq!(ints(&run("PRelu", 16, vec![], &[&s, &slope]).unwrap()), vec![-12, 5, 12, 7]);
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let a = tensor(&[3], vec![1i64, 2, 3]);
        let b = tensor(&[3], vec![1i64, 0, 3]);
        for op in ["Div", "Mod"] {
            let err = run(op, 14, vec![], &[&a, &b]).unwrap_err().to_string();
            assert!(err.contains(&format!("{op} node 'n'")) && err.contains("division by zero"), "{err}");
        }
        // Floats divide by zero the IEEE way.
        let (fa, fb) = (tensor(&[2], vec![1f32, -1.0]), tensor(&[2], vec![0f32, 0.0]));
        assert_eq!(floats(&run("Div", 14, vec![], &[&fa, &fb]).unwrap()), vec![f64::INFINITY, f64::NEG_INFINITY]);
        assert!(floats(&run("Mod", 13, vec![attr_i("fmod", 1)], &[&fa, &fb]).unwrap())[0].is_nan());
    }

    #[test]
    fn pow_follows_onnx_runtime() {
        // Values produced by ONNX Runtime 1.x.
        let b = tensor(&[7], vec![2i64, -3, 2, 0, 1, -1, 3]);
        let e = tensor(&[7], vec![10i64, 3, -1, -1, -5, -3, 40]);
        assert_eq!(ints(&run("Pow", 15, vec![], &[&b, &e]).unwrap()), vec![1024, -27, 0, i64::MIN, 1, -1, i64::MIN]);
        let b = tensor(&[3], vec![2i32, -3, 4]);
        let e = tensor(&[3], vec![0.5f32, 2.5, -0.5]);
        let y = run("Pow", 15, vec![], &[&b, &e]).unwrap();
        assert_eq!((y.dtype(), ints(&y)), (DataType::Int32, vec![1, i32::MIN as i64, 0]));
        let b = tensor(&[3], vec![-2f32, 2.0, -8.0]);
        let e = tensor(&[3], vec![3f32, 0.5, 1.0 / 3.0]);
        assert_close(
            &floats(&run("Pow", 15, vec![], &[&b, &e]).unwrap()),
            &[-8.0, 2f64.sqrt(), f64::NAN],
            1e-7,
            0.0,
            "Pow f32",
        );
        let b = tensor(&[2, 1], vec![-2f32, 2.5]);
        let e = tensor(&[2], vec![3i64, 2]);
        let y = run("Pow", 15, vec![], &[&b, &e]).unwrap();
        assert_eq!((y.shape(), floats(&y)), (&[2, 2][..], vec![-8.0, 4.0, 15.625, 6.25]));
        let sq = run("Pow", 15, vec![], &[&b, &Tensor::scalar(2f32)]).unwrap();
        assert_eq!(floats(&sq), vec![4.0, 6.25]);
        let h = tensor(&[2], vec![half::bf16::from_f32(3.0), half::bf16::from_f32(-0.5)]);
        let y = run("Pow", 15, vec![], &[&h, &tensor(&[1], vec![3u8])]).unwrap();
        assert_eq!((y.dtype(), floats(&y)), (DataType::BFloat16, vec![27.0, -0.125]));
    }

    #[test]
    fn comparisons_give_bools() {
        let a = tensor(&[2, 3], vec![1.0f32, f32::NAN, 3.0, -0.0, 5.0, 2.0]);
        let b = tensor(&[3], vec![1.0f32, f32::NAN, 2.5]);
        let cases: &[(&str, [bool; 6])] = &[
            ("Equal", [true, false, false, false, false, false]),
            ("Less", [false, false, false, true, false, true]),
            ("Greater", [false, false, true, false, false, false]),
            ("LessOrEqual", [true, false, false, true, false, true]),
            ("GreaterOrEqual", [true, false, true, false, false, false]),
        ];
        for (op, want) in cases {
            let y = run(op, 16, vec![], &[&a, &b]).unwrap();
            assert_eq!((y.dtype(), y.shape()), (DataType::Bool, &[2, 3][..]), "{op}");
            assert_eq!(bool_values(&y), want.to_vec(), "{op}");
        }
        let i = tensor(&[4], vec![u64::MAX, 0, 5, 7]);
        let j = tensor(&[], vec![5u64]);
        assert_eq!(bool_values(&run("Greater", 13, vec![], &[&i, &j]).unwrap()), [true, false, false, true]);
        let h = tensor(&[2], vec![half::f16::from_f32(0.0), half::f16::from_f32(1.5)]);
        let k = tensor(&[2], vec![half::f16::from_f32(-0.0), half::f16::from_f32(1.25)]);
        assert_eq!(bool_values(&run("Equal", 13, vec![], &[&h, &k]).unwrap()), [true, false]);
        let s = Tensor::from_strings(vec![3], vec!["a".into(), "bc".into(), "".into()]).unwrap();
        let t = Tensor::from_strings(vec![1], vec!["bc".into()]).unwrap();
        assert_eq!(bool_values(&run("Equal", 19, vec![], &[&s, &t]).unwrap()), [false, true, false]);
        assert!(run("Less", 19, vec![], &[&s, &t]).is_err());
        let p = bools(&[2, 2], &[true, false, true, false]);
        let q = bools(&[2, 1], &[true, false]);
        assert_eq!(bool_values(&run("Equal", 13, vec![], &[&p, &q]).unwrap()), [true, false, false, true]);
    }

    #[test]
    fn logical_and_bitwise_ops() {
        let p = bools(&[4], &[true, true, false, false]);
        let q = bools(&[4], &[true, false, true, false]);
        assert_eq!(bool_values(&run("And", 7, vec![], &[&p, &q]).unwrap()), [true, false, false, false]);
        assert_eq!(bool_values(&run("Or", 7, vec![], &[&p, &q]).unwrap()), [true, true, true, false]);
        assert_eq!(bool_values(&run("Xor", 7, vec![], &[&p, &q]).unwrap()), [false, true, true, false]);
        let one = bools(&[], &[true]);
        assert_eq!(bool_values(&run("And", 7, vec![], &[&p, &one]).unwrap()), [true, true, false, false]);
        let a = tensor(&[3], vec![0b1100i16, -1, 0x00ff]);
        let b = tensor(&[3], vec![0b1010i16, 0x0f0f, 0x0ff0]);
        assert_eq!(ints(&run("BitwiseAnd", 18, vec![], &[&a, &b]).unwrap()), vec![0b1000, 0x0f0f, 0x00f0]);
        assert_eq!(ints(&run("BitwiseOr", 18, vec![], &[&a, &b]).unwrap()), vec![0b1110, -1, 0x0fff]);
        assert_eq!(ints(&run("BitwiseXor", 18, vec![], &[&a, &b]).unwrap()), vec![0b0110, -1 ^ 0x0f0f, 0x0f0f]);
        // Values from ONNX Runtime: shifts past the width give 0.
        let x = tensor(&[3], vec![1u8, 255, 7]);
        let s = tensor(&[3], vec![3u8, 8, 9]);
        assert_eq!(ints(&run("BitShift", 11, vec![attr_s("direction", "LEFT")], &[&x, &s]).unwrap()), vec![8, 0, 0]);
        let x = tensor(&[3], vec![128u8, 255, 7]);
        assert_eq!(ints(&run("BitShift", 11, vec![attr_s("direction", "RIGHT")], &[&x, &s]).unwrap()), vec![16, 0, 0]);
        let w = tensor(&[2, 1], vec![1u64 << 40, 3]);
        let by = tensor(&[2], vec![2u64, 63]);
        let y = run("BitShift", 11, vec![attr_s("direction", "LEFT")], &[&w, &by]).unwrap();
        let got: Vec<u64> = y.as_slice::<u64>().unwrap().to_vec();
        assert_eq!(got, vec![1 << 42, 0, 12, 1 << 63]);
    }

    #[test]
    fn invalid_inputs_are_errors_naming_the_node() {
        let a = tensor(&[2, 3], vec![1f32; 6]);
        let b = tensor(&[4], vec![1f32; 4]);
        let err = run("Add", 14, vec![], &[&a, &b]).unwrap_err().to_string();
        assert!(err.contains("Add node 'n'") && err.contains("[2, 3]") && err.contains("[4]"), "{err}");
        let i = tensor(&[3], vec![1i32; 3]);
        let err = run("Mul", 14, vec![], &[&a, &i]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("int32") && err.contains("float"), "{err}");
        let s = Tensor::from_strings(vec![1], vec!["x".into()]).unwrap();
        assert!(run("Add", 14, vec![], &[&s, &s]).unwrap_err().to_string().contains("input 0"));
        let err = run("Mod", 13, vec![], &[&a, &a]).unwrap_err().to_string();
        assert!(err.contains("fmod"), "{err}");
        assert!(build("Mod", 13, vec![attr_i("fmod", 2)]).is_err());
        let err = build("BitShift", 11, vec![]).err().unwrap().to_string();
        assert!(err.contains("direction"), "{err}");
        let f = tensor(&[2], vec![1f32, 2.0]);
        assert!(run("BitShift", 11, vec![attr_s("direction", "LEFT")], &[&f, &f]).is_err());
        let signed = tensor(&[2], vec![1i32, 2]);
        assert!(run("BitShift", 11, vec![attr_s("direction", "LEFT")], &[&signed, &signed]).is_err());
        assert!(run("And", 7, vec![], &[&f, &f]).unwrap_err().to_string().contains("bool"));
        let slope = tensor(&[2, 3], vec![0.1f32; 6]);
        let x = tensor(&[3], vec![1f32; 3]);
        let err = run("PRelu", 16, vec![], &[&x, &slope]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("slope"), "{err}");
        assert!(run_opt("Add", 14, vec![], &[Some(&a), None]).unwrap_err().to_string().contains("input 1"));
    }
}
