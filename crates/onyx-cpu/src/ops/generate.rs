//! Generator kernels: Constant, ConstantOfShape, Range, EyeLike.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{AttrValue, Node};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Constant", build_constant);
    r.add("ConstantOfShape", build_constant_of_shape);
    r.add("Range", build_range);
    r.add("EyeLike", build_eye_like);
}

/// Constant: the tensor decoded from its one value attribute when the node is built.
struct Constant {
    value: Tensor,
}

/// The tensor a Constant node's attributes describe (exactly one of them must be present).
fn constant_value(node: &Node) -> Result<Tensor> {
    let at = node.location();
    let strings = |v: &[Vec<u8>]| v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect::<Vec<_>>();
    let mut found = Vec::new();
    for a in &node.attributes {
        let t = match (a.name.as_str(), &a.value) {
            ("value", AttrValue::Tensor(t)) | ("sparse_value", AttrValue::SparseTensor(t)) => t.clone(),
            ("value_float", AttrValue::Float(f)) => Tensor::scalar(*f),
            ("value_floats", AttrValue::Floats(f)) => Tensor::from_vec(vec![f.len()], f.clone())?,
            ("value_int", AttrValue::Int(i)) => Tensor::scalar(*i),
            ("value_ints", AttrValue::Ints(i)) => Tensor::from_vec(vec![i.len()], i.clone())?,
            ("value_string", AttrValue::String(s)) => Tensor::from_strings(vec![], strings(std::slice::from_ref(s)))?,
            ("value_strings", AttrValue::Strings(s)) => Tensor::from_strings(vec![s.len()], strings(s))?,
            (
                name @ ("value" | "sparse_value" | "value_float" | "value_floats" | "value_int" | "value_ints"
                | "value_string" | "value_strings"),
                v,
            ) => {
                return Err(Error::attribute(
                    &at,
                    name,
                    "the type its name says",
                    format!("an attribute of type {}", v.type_name()),
                ));
            }
            _ => continue,
        };
        found.push((a.name.as_str(), t));
    }
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => Err(Error::attribute(&at, "value", "one of value, sparse_value or value_*", "none of them")),
        _ => {
            let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
            Err(Error::attribute(&at, "value", "exactly one value attribute", names.join(", ")))
        }
    }
}

fn build_constant(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Constant { value: constant_value(ctx.node)? }))
}

impl Kernel for Constant {
    fn run(&self, _inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        Ok(vec![Value::Tensor(self.value.clone())])
    }
}

/// A shape input: 1-D int64 of non-negative dims.
fn dims_input(inputs: &[Option<ValueRef<'_>>], i: usize, at: &Location) -> Result<Vec<usize>> {
    let dims = elems::int_values(&util::input(inputs, i, at)?, i, &[DataType::Int64], at)?;
    dims.iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::input(at, i, "non-negative dims", format!("{dims:?}")))
}

/// `n` copies of the one element of `value`, as a tensor of `shape`.
fn filled(value: &Tensor, shape: Vec<usize>, at: &Location) -> Result<Tensor> {
    let n = elems::count(&shape, at)?;
    let v = value.view()?;
    with_elem!(v.dtype(), at, T => {
        let x = T::read(&v)?.first().cloned().unwrap_or_default();
        let mut out = elems::with_capacity(n, at)?;
        out.resize(n, x);
        T::tensor(v.dtype(), shape, out)
    })
}

/// ConstantOfShape: a tensor of the given shape filled with `value` (float 0 by default).
struct ConstantOfShape {
    value: Tensor,
    at: Location,
}

fn build_constant_of_shape(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let value = match ctx.node.get_tensor("value")? {
        Some(t) if t.len() == 1 => t.clone(),
        Some(t) => {
            return Err(Error::attribute(&at, "value", "a one-element tensor", format!("{}{:?}", t.dtype(), t.shape())))
        }
        None => Tensor::scalar(0f32),
    };
    Ok(Box::new(ConstantOfShape { value, at }))
}

impl Kernel for ConstantOfShape {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let shape = dims_input(inputs, 0, &self.at)?;
        Ok(vec![Value::Tensor(filled(&self.value, shape, &self.at)?)])
    }
}

/// Range: `start, start + delta, ...` up to (excluding) `limit`.
struct Range {
    at: Location,
}

fn build_range(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Range { at: ctx.node.location() }))
}

/// The element count of a range: `max(ceil((limit - start) / delta), 0)`.
fn range_len(start: f64, limit: f64, delta: f64, at: &Location) -> Result<usize> {
    if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
        return Err(Error::node(at, format!("Range({start}, {limit}, {delta}) has no finite length")));
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    if n > usize::MAX as f64 / 16.0 {
        return Err(Error::node(at, format!("Range({start}, {limit}, {delta}) is too long")));
    }
    Ok(n as usize)
}

/// Integer ranges, exact (no float rounding of the count).
fn int_range(start: i64, limit: i64, delta: i64, at: &Location) -> Result<Vec<i64>> {
    if delta == 0 {
        return Err(Error::node(at, "Range delta is 0"));
    }
    let span = i128::from(limit) - i128::from(start);
    let d = i128::from(delta);
    let n = if (span > 0) == (d > 0) && span != 0 { (span + d - d.signum()) / d } else { 0 };
    let n = usize::try_from(n).map_err(|_| Error::node(at, "Range is too long"))?;
    let mut out = elems::with_capacity(n, at)?;
    out.extend((0..n as i64).map(|i| start.wrapping_add(i.wrapping_mul(delta))));
    Ok(out)
}

impl Kernel for Range {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let views = (0..3).map(|i| util::input(inputs, i, &self.at)).collect::<Result<Vec<_>>>()?;
        let dtype = views[0].dtype();
        let mut scalars = [0f64; 3];
        for (i, v) in views.iter().enumerate() {
            util::expect_dtype(
                v,
                &[
                    DataType::Float,
                    DataType::Double,
                    DataType::Float16,
                    DataType::BFloat16,
                    DataType::Int16,
                    DataType::Int32,
                    DataType::Int64,
                ],
                i,
                &self.at,
            )?;
            if v.dtype() != dtype || v.len() != 1 {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("a {dtype} scalar"),
                    format!("{}{:?}", v.dtype(), v.shape()),
                ));
            }
            scalars[i] = elems::numeric_f64(v, i, &self.at)?[0];
        }
        let [start, limit, delta] = scalars;
        let out = match dtype {
            DataType::Float | DataType::Double | DataType::Float16 | DataType::BFloat16 => {
                let n = range_len(start, limit, delta, &self.at)?;
                let mut v = elems::with_capacity(n, &self.at)?;
                v.extend((0..n).map(|i| start + i as f64 * delta));
                match dtype {
                    DataType::Float => util::out(vec![n], v.into_iter().map(|x| x as f32).collect()),
                    DataType::Float16 => util::out(vec![n], v.into_iter().map(half::f16::from_f64).collect()),
                    DataType::BFloat16 => util::out(vec![n], v.into_iter().map(half::bf16::from_f64).collect()),
                    _ => util::out(vec![n], v),
                }
            }
            _ => {
                let ints: Vec<i64> = views.iter().map(|v| util::to_i64(v).map(|x| x[0])).collect::<Result<_>>()?;
                let v = int_range(ints[0], ints[1], ints[2], &self.at)?;
                let n = v.len();
                match dtype {
                    DataType::Int16 => util::out(vec![n], v.into_iter().map(|x| x as i16).collect()),
                    DataType::Int32 => util::out(vec![n], v.into_iter().map(|x| x as i32).collect()),
                    _ => util::out(vec![n], v),
                }
            }
        }?;
        Ok(vec![out])
    }
}

/// EyeLike: ones on diagonal `k` of a matrix shaped like the input, zeros elsewhere.
struct EyeLike {
    dtype: Option<DataType>,
    k: i64,
    at: Location,
}

fn build_eye_like(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let dtype = match ctx.node.get_int("dtype")? {
        None => None,
        Some(code) => Some(
            i32::try_from(code)
                .ok()
                .and_then(DataType::from_onnx)
                .ok_or_else(|| Error::attribute(&at, "dtype", "an ONNX data type code", code.to_string()))?,
        ),
    };
    Ok(Box::new(EyeLike { dtype, k: ctx.node.int_or("k", 0)?, at }))
}

/// A `rows x cols` matrix (`n` elements) of default values with `one` on diagonal `k`.
fn eye<T: Elem>(rows: usize, cols: usize, k: i64, one: T, n: usize, at: &Location) -> Result<Vec<T>> {
    let mut out = elems::alloc::<T>(n, at)?;
    for i in 0..rows {
        let j = i as i64 + k;
        if (0..cols as i64).contains(&j) {
            out[i * cols + j as usize] = one.clone();
        }
    }
    Ok(out)
}

impl Kernel for EyeLike {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let &[rows, cols] = x.shape() else {
            return Err(Error::input(&self.at, 0, "a 2-D tensor", format!("{:?}", x.shape())));
        };
        let dtype = self.dtype.unwrap_or(x.dtype());
        let one = elems::scalar(dtype, 1.0, &self.at)?;
        let n = elems::count(x.shape(), &self.at)?;
        let t = with_elem!(dtype, &self.at, T => {
            let one = T::read(&one.view()?)?.first().cloned().unwrap_or_default();
            let out = eye(rows, cols, self.k, one, n, &self.at)?;
            T::tensor(dtype, x.shape().to_vec(), out)
        })?;
        Ok(vec![Value::Tensor(t)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::layout::testkit::*;

    #[test]
    fn constant_attributes() {
        let t2 = t(&[2], vec![1.5f32, 2.5]);
        let y = run1("Constant", 13, vec![tensor_attr("value", t2)], &[]).unwrap();
        assert_eq!(f32s(&y), (vec![2], vec![1.5, 2.5]));
        let y = run1("Constant", 12, vec![float("value_float", 3.0)], &[]).unwrap();
        assert_eq!(f32s(&y), (vec![], vec![3.0]));
        let y = run1("Constant", 12, vec![floats("value_floats", &[1.0, 2.0, 3.0])], &[]).unwrap();
        assert_eq!(f32s(&y), (vec![3], vec![1.0, 2.0, 3.0]));
        let y = run1("Constant", 12, vec![int("value_int", -4)], &[]).unwrap();
        assert_eq!(i64v(&y), (vec![], vec![-4]));
        let y = run1("Constant", 19, vec![ints("value_ints", &[7, 8])], &[]).unwrap();
        assert_eq!(i64v(&y), (vec![2], vec![7, 8]));
        let y = run1("Constant", 12, vec![string("value_string", "hi")], &[]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["hi"]);
        let y = run1(
            "Constant",
            12,
            vec![attr("value_strings", AttrValue::Strings(vec![b"a".to_vec(), b"bc".to_vec()]))],
            &[],
        )
        .unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["a", "bc"]);
        let sparse = t(&[2, 2], vec![0i64, 5, 0, 0]);
        let y = run1("Constant", 11, vec![attr("sparse_value", AttrValue::SparseTensor(sparse))], &[]).unwrap();
        assert_eq!(i64v(&y), (vec![2, 2], vec![0, 5, 0, 0]));

        let err = run1("Constant", 13, vec![], &[]).unwrap_err().to_string();
        assert!(err.contains("none of them"), "{err}");
        let err =
            run1("Constant", 13, vec![int("value_int", 1), float("value_float", 1.0)], &[]).unwrap_err().to_string();
        assert!(err.contains("value_int, value_float"), "{err}");
        let err = run1("Constant", 13, vec![float("value_int", 1.0)], &[]).unwrap_err().to_string();
        assert!(err.contains("'value_int'") && err.contains("float"), "{err}");
    }

    #[test]
    fn constant_of_shape() {
        let y = run1("ConstantOfShape", 9, vec![], &[Some(i64s(&[2, 3]))]).unwrap();
        assert_eq!(f32s(&y), (vec![2, 3], vec![0.0; 6]));
        let y =
            run1("ConstantOfShape", 20, vec![tensor_attr("value", t(&[1], vec![-7i32]))], &[Some(i64s(&[3]))]).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[-7, -7, -7]);
        let b = Tensor::from_bools(vec![1], vec![true]).unwrap();
        let y = run1("ConstantOfShape", 9, vec![tensor_attr("value", b)], &[Some(i64s(&[]))]).unwrap();
        assert_eq!((y.shape().len(), y.view().unwrap().bytes().unwrap()), (0, &[1u8][..]));
        let err = run1("ConstantOfShape", 9, vec![], &[Some(i64s(&[2, -1]))]).unwrap_err().to_string();
        assert!(err.contains("non-negative"), "{err}");
        let err = run1("ConstantOfShape", 9, vec![], &[Some(t(&[1], vec![2i32]))]).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("int32"), "{err}");
        let err = run1("ConstantOfShape", 9, vec![tensor_attr("value", t(&[2], vec![1f32, 2.0]))], &[Some(i64s(&[1]))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("one-element"), "{err}");
    }

    #[test]
    fn range_like_numpy_arange() {
        let r = |s: Tensor, l: Tensor, d: Tensor| run1("Range", 11, vec![], &[Some(s), Some(l), Some(d)]);
        let y = r(Tensor::scalar(1i32), Tensor::scalar(10i32), Tensor::scalar(3i32)).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[1, 4, 7]);
        let y = r(Tensor::scalar(10i64), Tensor::scalar(4i64), Tensor::scalar(-2i64)).unwrap();
        assert_eq!(i64v(&y).1, vec![10, 8, 6]);
        let y = r(Tensor::scalar(5i16), Tensor::scalar(5i16), Tensor::scalar(1i16)).unwrap();
        assert_eq!(y.shape(), &[0]);
        let y = r(Tensor::scalar(1i64), Tensor::scalar(10i64), Tensor::scalar(-1i64)).unwrap();
        assert_eq!(y.shape(), &[0]);
        // np.arange(0.5, 2.0, 0.4, dtype=np.float32) -> [0.5, 0.9, 1.3, 1.7]
        let y = r(Tensor::scalar(0.5f32), Tensor::scalar(2.0f32), Tensor::scalar(0.4f32)).unwrap();
        assert_close(&f32s(&y).1, &[0.5, 0.9, 1.3, 1.7], 1e-6);
        let y = r(Tensor::scalar(1.0f64), Tensor::scalar(-1.0f64), Tensor::scalar(-0.5f64)).unwrap();
        assert_eq!(y.as_slice::<f64>().unwrap(), &[1.0, 0.5, 0.0, -0.5]);
        // np.arange(1, 5, 1.25, dtype=np.float16) -> [1.0, 2.25, 3.5, 4.75]
        let h = |x: f32| Tensor::scalar(half::f16::from_f32(x));
        let y = r(h(1.0), h(5.0), h(1.25)).unwrap();
        let got: Vec<f32> = y.as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f32()).collect();
        assert_eq!(got, vec![1.0, 2.25, 3.5, 4.75]);
        let b = |x: f32| Tensor::scalar(half::bf16::from_f32(x));
        let y = r(b(-3.0), b(0.0), b(0.75)).unwrap();
        let got: Vec<f32> = y.as_slice::<half::bf16>().unwrap().iter().map(|x| x.to_f32()).collect();
        assert_eq!(got, vec![-3.0, -2.25, -1.5, -0.75]);
        let err = r(Tensor::scalar(1i64), Tensor::scalar(3i64), Tensor::scalar(0i64)).unwrap_err().to_string();
        assert!(err.contains("delta is 0"), "{err}");
        let err = r(Tensor::scalar(1f32), Tensor::scalar(3f32), Tensor::scalar(0f32)).unwrap_err().to_string();
        assert!(err.contains("no finite length"), "{err}");
        let err = r(Tensor::scalar(1i64), Tensor::scalar(3i32), Tensor::scalar(1i64)).unwrap_err().to_string();
        assert!(err.contains("input 1"), "{err}");
        let err = r(Tensor::scalar(0f32), Tensor::scalar(1e30f32), Tensor::scalar(1e-30f32)).unwrap_err().to_string();
        assert!(err.contains("too long"), "{err}");
        let err = r(Tensor::scalar(1u8), Tensor::scalar(3u8), Tensor::scalar(1u8)).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("uint8"), "{err}");
    }

    #[test]
    fn eye_like_like_numpy_eye() {
        let x = t(&[3, 4], vec![0i32; 12]);
        // np.eye(3, 4, k=1)
        let y = run1("EyeLike", 9, vec![int("k", 1), int("dtype", 1)], &[Some(x.clone())]).unwrap();
        assert_eq!(f32s(&y).1, vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        let y = run1("EyeLike", 22, vec![int("k", -2)], &[Some(x.clone())]).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        let y = run1("EyeLike", 9, vec![int("dtype", 9)], &[Some(t(&[2, 2], vec![0f32; 4]))]).unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[1, 0, 0, 1]);
        let y = run1("EyeLike", 9, vec![int("k", 10)], &[Some(x.clone())]).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[0; 12]);
        let err = run1("EyeLike", 9, vec![], &[Some(t(&[4], vec![0f32; 4]))]).unwrap_err().to_string();
        assert!(err.contains("2-D"), "{err}");
        let err = run1("EyeLike", 9, vec![int("dtype", 99)], &[Some(x)]).unwrap_err().to_string();
        assert!(err.contains("'dtype'"), "{err}");
    }
}
