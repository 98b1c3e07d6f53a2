//! HannWindow, HammingWindow and BlackmanWindow with f32 output: one dispatch writing the
//! cosine sum at each point (the size is read on the host).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::Registry;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{host_ints, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers the window generators.
pub(crate) fn register(r: &mut Registry) {
    for op in ["HannWindow", "HammingWindow", "BlackmanWindow"] {
        r.add_with_host_inputs(op, supports_window, build_window, &[0]);
    }
}

/// f32 output (`output_datatype` 1, the default) and a periodic flag of 0 or 1.
fn supports_window(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    ctx.node.int_or("output_datatype", 1).is_ok_and(|d| d == 1)
        && ctx.node.int_or("periodic", 1).is_ok_and(|p| p == 0 || p == 1)
}

/// The WGSL expression of each window in `a = 2 pi i / N`.
fn formula(op: &str) -> Option<&'static str> {
    match op {
        "HannWindow" => Some("0.5 - 0.5 * cos(a)"),
        "HammingWindow" => Some("25.0 / 46.0 - (21.0 / 46.0) * cos(a)"),
        "BlackmanWindow" => Some("0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a)"),
        _ => None,
    }
}

/// A window generator: `periodic` picks N = size, else size - 1; a 1-point window is 1.
struct Window {
    periodic: bool,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_window(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let op = ctx.node.op_type.as_str();
    let f = formula(op).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} is not a window")))?;
    let code = format!(
        "fn fetch(e: u32) -> E {{
    let n = p[3];
    if (n == 0u) {{ return bitcast<u32>(1.0); }}
    let a = 2.0 * 3.14159265358979 * f32(e) / f32(n);
    return bitcast<u32>({f});
}}
"
    );
    let pipeline = gpu.pipeline(&format!("window/{op}"), || element_shader("", 4, &[], &code))?;
    Ok(Box::new(Window { periodic: ctx.node.int_or("periodic", 1)? != 0, pipeline, at }))
}

impl GpuOp for Window {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let size = match host_ints(inputs, 0, at)?.as_deref() {
            Some(&[s]) if s >= 0 => s as usize,
            other => return Err(Error::input(at, 0, "one size >= 0", format!("{other:?}"))),
        };
        let n = if self.periodic { size } else { size.saturating_sub(1) };
        let y = run.alloc(DataType::Float, vec![size])?;
        if size > 0 {
            dispatch_elements(run, &self.pipeline, Elements::new(4, size), &[u32_of(n, at)?], &[y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, t, Case};

    #[test]
    fn windows_match_the_cpu() {
        for op in ["HannWindow", "HammingWindow", "BlackmanWindow"] {
            for size in [0i64, 1, 2, 7, 10, 257] {
                for periodic in [0, 1] {
                    let case = Case::new(op, vec![t(&[], vec![size])]).attrs(vec![int("periodic", periodic)]).opset(17);
                    case.constants(&[0]).check(1e-5, 2e-6);
                    let case =
                        Case::new(op, vec![t(&[], vec![size as i32])]).attrs(vec![int("periodic", periodic)]).opset(17);
                    case.check(1e-5, 2e-6);
                }
            }
        }
    }
}
