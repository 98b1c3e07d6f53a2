//! Ops that write one of two values by position: OneHot (`on` where an index points, `off`
//! elsewhere) and EyeLike (ones on a diagonal), for every element size, one dispatch each.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, elem_size, element_shader, input_elem_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers OneHot and EyeLike.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("OneHot", supports_one_hot, build_one_hot, &[1, 2]);
    r.add("EyeLike", supports_eye_like, build_eye_like);
}

/// The element `e` of `bytes` holding `size`-byte elements, as the two little-endian words of
/// an element shader's holder.
fn words_at(bytes: &[u8], size: usize, e: usize) -> Option<[u32; 2]> {
    let src = bytes.get(e * size..(e + 1) * size)?;
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(src);
    Some([u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u32::from_le_bytes([b[4], b[5], b[6], b[7]])])
}

// ---------------------------------------------------------------------------------------------
// OneHot
// ---------------------------------------------------------------------------------------------

/// How the kernel reads an index dtype: its element size and whether it is f32.
fn index_kind(dtype: Option<DataType>) -> Option<(u32, bool)> {
    match dtype {
        Some(DataType::Int64) => Some((8, false)),
        Some(DataType::Int32) => Some((4, false)),
        Some(DataType::Float) => Some((4, true)),
        _ => None,
    }
}

/// int32/int64/f32 indices, values of any movable type.
fn supports_one_hot(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    index_kind(input_dtype(ctx, 0)).is_some() && input_elem_size(ctx, 2).is_some()
}

/// WGSL `index(p) -> i32` of index `p`, or `NOIDX` where it is beyond the i32 range (no depth
/// reaches it, so it hits nothing either way). f32 indices truncate toward zero.
fn index_reader(size: u32, float: bool) -> &'static str {
    match (size, float) {
        (8, _) => {
            "fn index(p: u32) -> i32 {
    let v = load_i(p);
    if (v.y == 0u && v.x < 0x80000000u) { return i32(v.x); }
    if (v.y == 0xffffffffu && v.x >= 0x80000000u) { return bitcast<i32>(v.x); }
    return NOIDX;
}
"
        }
        (_, true) => {
            "fn index(p: u32) -> i32 {
    let f = bitcast<f32>(load_i(p));
    if (abs(f) < 2147483520.0) { return i32(f); }
    return NOIDX;
}
"
        }
        _ => "fn index(p: u32) -> i32 { return bitcast<i32>(load_i(p)); }\n",
    }
}

/// OneHot's `fetch`. Parameters: depth, inner, then the `on` element's words (the `off` one is
/// the fill).
const ONE_HOT: &str = "
const NOIDX: i32 = -2147483647 - 1;
fn on() -> E {
    var w = array<u32, 2>(p[5], p[6]);
    return E(HOLD);
}
fn fetch(e: u32) -> E {
    let depth = p[3];
    let inner = p[4];
    let r = e % inner;
    let t = e / inner;
    let j = t % depth;
    let o = t / depth;
    var v = index(o * inner + r);
    if (v == NOIDX) { return fill(); }
    if (v < 0) { v += i32(depth); }
    if (v >= 0 && u32(v) == j) { return on(); }
    return fill();
}
";

/// OneHot: inserts an axis of `depth` values: `on` where it equals the index (negative
/// indices count from the end), `off` elsewhere.
struct OneHot {
    axis: i64,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_one_hot(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let (isize, float) =
        index_kind(input_dtype(ctx, 0)).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} indices")))?;
    let size = input_elem_size(ctx, 2).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} values")))?;
    let hold = match size {
        8 => "w[0], w[1]",
        _ => "w[0]",
    };
    let code = format!("{}{}", index_reader(isize, float), ONE_HOT.replace("HOLD", hold));
    let key = format!("onehot/{size}/{isize}/{float}");
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("i", isize)], &code))?;
    Ok(Box::new(OneHot { axis: ctx.node.int_or("axis", -1)?, size, pipeline, at }))
}

impl OneHot {
    /// The depth from input 1 (any numeric scalar; a positive whole count).
    fn depth(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<usize> {
        let v = host_input(inputs, 1, &self.at)?;
        let d: Option<f64> = match v.dtype() {
            DataType::Int64 => v.as_slice::<i64>()?.first().map(|&x| x as f64),
            DataType::Int32 => v.as_slice::<i32>()?.first().map(|&x| f64::from(x)),
            DataType::Float => v.as_slice::<f32>()?.first().map(|&x| f64::from(x)),
            DataType::Double => v.as_slice::<f64>()?.first().copied(),
            other => return Err(Error::input(&self.at, 1, "an int64, int32, float or double depth", other.name())),
        };
        match d {
            Some(d) if v.len() == 1 && (1.0..2147483648.0).contains(&d) => Ok(d as usize),
            _ => Err(Error::input(&self.at, 1, "one positive depth below 2^31", format!("{} values", v.len()))),
        }
    }
}

impl GpuOp for OneHot {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let idx = gpu_input(run, inputs, 0, at)?;
        let depth = self.depth(inputs)?;
        let values = host_input(inputs, 2, at)?;
        if index_kind(Some(idx.dtype())).is_none() {
            return Err(Error::input(at, 0, "int32, int64 or float indices", idx.dtype().name()));
        }
        if elem_size(values.dtype()) != Some(self.size) || values.len() != 2 {
            return Err(Error::input(at, 2, "2 values [off, on] of the planned type", format!("{:?}", values.shape())));
        }
        let bytes = values.bytes()?;
        let pair = (words_at(bytes, self.size as usize, 0), words_at(bytes, self.size as usize, 1));
        let (Some(off), Some(on)) = pair else {
            return Err(Error::input(at, 2, "2 values [off, on]", format!("{} bytes", bytes.len())));
        };
        let rank = idx.shape().len() as i64;
        if self.axis < -rank - 1 || self.axis > rank {
            let want = format!("a value in [{}, {rank}]", -rank - 1);
            return Err(Error::attribute(at, "axis", want, self.axis.to_string()));
        }
        let axis = if self.axis < 0 { self.axis + rank + 1 } else { self.axis } as usize;
        let inner: usize = idx.shape()[axis..].iter().product();
        let mut shape = idx.shape().to_vec();
        shape.insert(axis, depth);
        let y = run.alloc(values.dtype(), shape)?;
        if !y.is_empty() {
            let params = [u32_of(depth, at)?, u32_of(inner, at)?, on[0], on[1]];
            let out = Elements::new(self.size, y.len()).fill(off);
            dispatch_elements(run, &self.pipeline, out, &params, &[idx.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// EyeLike
// ---------------------------------------------------------------------------------------------

/// The bits of 1 in `dtype`, for the numeric types and bool.
fn one_bits(dtype: DataType) -> Option<[u32; 2]> {
    Some(match dtype {
        DataType::Float => [0x3f80_0000, 0],
        DataType::Double => [0, 0x3ff0_0000],
        DataType::Float16 => [0x3c00, 0],
        DataType::BFloat16 => [0x3f80, 0],
        DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16 => [1, 0],
        DataType::Int32 | DataType::Uint32 | DataType::Int64 | DataType::Uint64 | DataType::Bool => [1, 0],
        _ => return None,
    })
}

/// The output dtype: the `dtype` attribute, else the input's.
fn eye_dtype(ctx: &NodeContext<'_>) -> Option<DataType> {
    match ctx.node.int_or("dtype", 0).ok()? {
        0 if ctx.node.attr("dtype").is_none() => input_dtype(ctx, 0),
        code => i32::try_from(code).ok().and_then(DataType::from_onnx),
    }
}

/// A numeric or bool output type; the input is only read for its shape.
fn supports_eye_like(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    eye_dtype(ctx).and_then(one_bits).is_some() && input_elem_size(ctx, 0).is_some()
}

/// EyeLike's `fetch`: one (p[4], p[5]) where `col - row == k` (p[3], an i32), else zero.
/// Parameters: k, the one's words, columns.
const EYE: &str = "
fn fetch(e: u32) -> E {
    let cols = p[6];
    let j = i32(e % cols);
    let i = i32(e / cols);
    if (j - i == bitcast<i32>(p[3])) {
        var w = array<u32, 2>(p[4], p[5]);
        return E(HOLD);
    }
    return fill();
}
";

/// EyeLike: a matrix shaped like the input with ones on diagonal `k`.
struct EyeLike {
    dtype: DataType,
    k: i64,
    one: [u32; 2],
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_eye_like(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let unsupported = || Error::Unsupported(format!("wgpu: {at} output type"));
    let dtype = eye_dtype(ctx).ok_or_else(unsupported)?;
    let one = one_bits(dtype).ok_or_else(unsupported)?;
    let size = elem_size(dtype).ok_or_else(unsupported)?;
    let code = EYE.replace("HOLD", if size == 8 { "w[0], w[1]" } else { "w[0]" });
    let pipeline = gpu.pipeline(&format!("onehot/eye/{size}"), || element_shader("", size, &[], &code))?;
    Ok(Box::new(EyeLike { dtype, k: ctx.node.int_or("k", 0)?, one, pipeline, at }))
}

impl GpuOp for EyeLike {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let &[rows, cols] = x.shape() else {
            return Err(Error::input(at, 0, "a 2-D tensor", format!("{:?}", x.shape())));
        };
        let y = run.alloc(self.dtype, vec![rows, cols])?;
        if !y.is_empty() {
            // Every |j - i| is below rows + cols, so clamping k there changes nothing.
            let bound = (rows + cols) as i64;
            let k = i32::try_from(self.k.clamp(-bound, bound)).map_err(|_| Error::node(at, "matrix too large"))?;
            let params = [k as u32, self.one[0], self.one[1], u32_of(cols, at)?];
            let size = elem_size(self.dtype).unwrap_or(4);
            dispatch_elements(run, &self.pipeline, Elements::new(size, y.len()), &params, &[y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{int, rand, t, Case};

    #[test]
    fn one_hot_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[7], &[3, 5], &[2, 3, 4], &[1], &[0, 3]];
        for (s, shape) in shapes.iter().enumerate() {
            let n: usize = shape.iter().product();
            let ints: Vec<i64> = (0..n).map(|i| (i as i64 * 7919 + s as i64) % 23 - 11).collect();
            let indices = [
                t(shape, ints.clone()),
                t(shape, ints.iter().map(|&v| v as i32).collect::<Vec<_>>()),
                t(shape, ints.iter().map(|&v| v as f32 * 1.3).collect::<Vec<_>>()),
            ];
            for (k, idx) in indices.iter().enumerate() {
                for dtype in DTYPES {
                    let values = random(dtype, &[2], 7 + k as u64);
                    for axis in (-(shape.len() as i64) - 1)..=(shape.len() as i64) {
                        let depth = if k == 0 { t(&[], vec![9i64]) } else { t(&[1], vec![10.0f32]) };
                        let case = Case::new("OneHot", vec![idx.clone(), depth, values.clone()])
                            .attrs(vec![int("axis", axis)]);
                        check_exact(&case.constants(&[1, 2]));
                    }
                }
            }
        }
        let huge = t(&[4], vec![1i64 << 40, -(1i64 << 40), 3, -1]);
        check_exact(&Case::new("OneHot", vec![huge, t(&[], vec![5i64]), t(&[2], vec![0.5f32, 2.0])]));
    }

    #[test]
    fn eye_like_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[4, 5], &[5, 4], &[1, 1], &[37, 41], &[0, 3]];
        for shape in shapes {
            let x = rand(shape, -1.0, 1.0, 3);
            for k in [-100i64, -3, -1, 0, 2, 7, 1 << 40] {
                check_exact(&Case::new("EyeLike", vec![x.clone()]).attrs(vec![int("k", k)]));
                for dtype in DTYPES {
                    let attrs = vec![int("k", k), int("dtype", dtype as i64)];
                    check_exact(&Case::new("EyeLike", vec![x.clone()]).attrs(attrs));
                }
            }
            let ints = Tensor::from_vec(shape.to_vec(), vec![3i32; shape.iter().product()]).unwrap();
            check_exact(&Case::new("EyeLike", vec![ints]).attrs(vec![int("k", 1)]));
        }
    }
}
