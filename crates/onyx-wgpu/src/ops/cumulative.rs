//! CumSum and CumProd on f32, int32 and uint32, one dispatch: each element folds its line up
//! to itself in the CPU EP's order (so f32 results match bit for bit; integers wrap). The fold
//! costs up to one pass over the line per element: fine for the short lines models scan.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, normalize_axis, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_ints, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers CumSum and CumProd.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("CumSum", supports_cumulative, build_cumulative, &[1]);
    r.add_with_host_inputs("CumProd", supports_cumulative, build_cumulative, &[1]);
}

/// The WGSL type of a dtype the kernel folds in.
fn scalar(dtype: DataType) -> Option<&'static str> {
    match dtype {
        DataType::Float => Some("f32"),
        DataType::Int32 => Some("i32"),
        DataType::Uint32 => Some("u32"),
        _ => None,
    }
}

/// f32/int32/uint32 data, flags of 0 or 1.
fn supports_cumulative(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let flag = |name| ctx.node.int_or(name, 0).is_ok_and(|v| v == 0 || v == 1);
    input_dtype(ctx, 0).and_then(scalar).is_some() && flag("exclusive") && flag("reverse")
}

/// `fetch` (T, OP, ONE, EXCLUSIVE and REVERSE are pipeline constants). Parameters: n, inner.
const CUMULATIVE: &str = "
fn fetch(e: u32) -> E {
    let n = p[3];
    let inner = p[4];
    let i = e % inner;
    let k = (e / inner) % n;
    let line = e - k * inner;
    var acc = T(ONE);
    let steps = select(k + 1u, n - k, REVERSE);
    for (var s = 0u; s < steps; s++) {
        let j = select(s, n - 1u - s, REVERSE);
        if (EXCLUSIVE && j == k) { break; }
        acc = acc OP bitcast<T>(load_x(line + j * inner));
    }
    return bitcast<u32>(acc);
}
";

/// CumSum or CumProd with its flags.
struct Cumulative {
    pipeline: Arc<Pipeline>,
    dtype: DataType,
    at: Location,
}

fn build_cumulative(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} untyped data")))?;
    let t = scalar(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype} data")))?;
    let (op, one) = if ctx.node.op_type == "CumProd" { ("*", "1") } else { ("+", "0") };
    let flag = |name| -> Result<bool> {
        match ctx.node.int_or(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::attribute(&at, name, "0 or 1", v.to_string())),
        }
    };
    let (exclusive, reverse) = (flag("exclusive")?, flag("reverse")?);
    let code = format!(
        "alias T = {t};\nconst ONE = {one};\nconst EXCLUSIVE = {exclusive};\nconst REVERSE = {reverse};\n{}",
        CUMULATIVE.replace("OP", op)
    );
    let key = format!("cumulative/{t}/{op}/{exclusive}/{reverse}");
    let pipeline = gpu.pipeline(&key, || element_shader("", 4, &[("x", 4)], &code))?;
    Ok(Box::new(Cumulative { pipeline, dtype, at }))
}

impl GpuOp for Cumulative {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if x.dtype() != self.dtype {
            return Err(Error::input(at, 0, self.dtype.name(), x.dtype().name()));
        }
        let axis = match host_ints(inputs, 1, at)?.as_deref() {
            Some(&[a]) => a,
            other => return Err(Error::input(at, 1, "a scalar int32/int64 axis", format!("{other:?}"))),
        };
        if x.shape().is_empty() {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(axis, x.shape().len(), at)?;
        let inner: usize = x.shape()[axis + 1..].iter().product();
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        if !y.is_empty() {
            let params = [u32_of(x.shape()[axis], at)?, u32_of(inner, at)?];
            dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &[x.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::{check_exact, random};
    use crate::testkit::{int, rand, t, Case};

    #[test]
    fn cumsum_and_cumprod_match_the_cpu() {
        let shapes: &[&[usize]] = &[&[7], &[3, 5], &[2, 9, 3], &[4, 0]];
        for (s, shape) in shapes.iter().enumerate() {
            let xs = [
                rand(shape, 0.5, 1.5, 70 + s as u64),
                random(DataType::Int32, shape, 80 + s as u64),
                random(DataType::Uint32, shape, 90 + s as u64),
            ];
            for x in xs {
                for axis in -(shape.len() as i64)..shape.len() as i64 {
                    for (ex, rev) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                        for (op, opset) in [("CumSum", 14), ("CumProd", 26)] {
                            let attrs = vec![int("exclusive", ex), int("reverse", rev)];
                            let case = Case::new(op, vec![x.clone(), t(&[], vec![axis])]).attrs(attrs).opset(opset);
                            check_exact(&case.constants(&[1]));
                        }
                    }
                }
            }
        }
    }
}
