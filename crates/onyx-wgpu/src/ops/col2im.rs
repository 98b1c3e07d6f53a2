//! Col2Im on f32: the inverse of im2col, one dispatch. Each output pixel gathers the column
//! entries that land on it (one per kernel offset at most), in kernel-offset order, which is
//! the order the CPU EP adds them in. `image_shape` and `block_shape` are read on the host.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_ints, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Spatial axes the kernel handles (its coordinates live in a fixed-size array).
const MAX_AXES: usize = 8;

/// Registers Col2Im.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("Col2Im", supports_col2im, build_col2im, &[1, 2]);
}

/// f32 input and valid attributes.
fn supports_col2im(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float) && Attrs::decode(ctx).is_ok()
}

/// `fetch(e)`: output pixel `e`. Parameters: axes, kernel positions, L, image pixels, then
/// per axis: image size, kernel size, blocks, stride, dilation, begin pad.
const COL2IM: &str = "
fn fetch(e: u32) -> E {
    let n = p[3];
    let kprod = p[4];
    let l = p[5];
    let img = p[6];
    let bc = e / img;
    var rem = e % img;
    var pix: array<u32, 8>;
    for (var d = n; d > 0u; d--) {
        let size = p[7u + 6u * (d - 1u)];
        pix[d - 1u] = rem % size;
        rem = rem / size;
    }
    var acc = 0.0;
    for (var k = 0u; k < kprod; k++) {
        var kr = k;
        var col = 0u;
        var step = 1u;
        var hit = true;
        for (var d = n; d > 0u; d--) {
            let q = 7u + 6u * (d - 1u);
            let kd = kr % p[q + 1u];
            kr = kr / p[q + 1u];
            let num = i32(pix[d - 1u] + p[q + 5u]) - i32(kd * p[q + 4u]);
            let stride = i32(p[q + 3u]);
            if (num < 0 || num % stride != 0) { hit = false; break; }
            let bd = u32(num / stride);
            if (bd >= p[q + 2u]) { hit = false; break; }
            col += bd * step;
            step *= p[q + 2u];
        }
        if (hit) { acc += bitcast<f32>(load_x((bc * kprod + k) * l + col)); }
    }
    return bitcast<u32>(acc);
}
";

/// Strides, dilations and pads as given (checked against the block's rank at run time).
struct Attrs {
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
}

impl Attrs {
    fn decode(ctx: &NodeContext<'_>) -> Result<Attrs> {
        let at = ctx.node.location();
        let get = |name: &str, min: i64| -> Result<Option<Vec<usize>>> {
            let Some(v) = ctx.node.get_ints(name)? else { return Ok(None) };
            if v.iter().any(|&x| x < min || x >= 1 << 24) {
                return Err(Error::attribute(&at, name, format!("values >= {min}"), format!("{v:?}")));
            }
            Ok(Some(v.iter().map(|&x| x as usize).collect()))
        };
        Ok(Attrs { strides: get("strides", 1)?, dilations: get("dilations", 1)?, pads: get("pads", 0)? })
    }

    /// The attribute `v` for `len` values, or `default` everywhere.
    fn pick(v: &Option<Vec<usize>>, len: usize, default: usize, name: &str, at: &Location) -> Result<Vec<usize>> {
        match v {
            Some(v) if v.len() == len => Ok(v.clone()),
            Some(v) => Err(Error::attribute(at, name, format!("{len} values"), format!("{v:?}"))),
            None => Ok(vec![default; len]),
        }
    }
}

/// A Col2Im node.
struct Col2Im {
    attrs: Attrs,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_col2im(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let attrs = Attrs::decode(ctx)?;
    let pipeline = gpu.pipeline("col2im/f32", || element_shader("", 4, &[("x", 4)], COL2IM))?;
    Ok(Box::new(Col2Im { attrs, pipeline, at: ctx.node.location() }))
}

/// Positive sizes from host input `i`.
fn sizes(inputs: &[Option<ValueRef<'_>>], i: usize, at: &Location) -> Result<Vec<usize>> {
    let v = host_ints(inputs, i, at)?.ok_or_else(|| Error::input(at, i, "a 1-D int64 tensor", "nothing"))?;
    if v.iter().any(|&x| x <= 0) {
        return Err(Error::input(at, i, "positive sizes", format!("{v:?}")));
    }
    Ok(v.iter().map(|&x| x as usize).collect())
}

impl GpuOp for Col2Im {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let image = sizes(inputs, 1, at)?;
        let kernel = sizes(inputs, 2, at)?;
        let n = image.len();
        if kernel.len() != n || n == 0 || n > MAX_AXES {
            let want = format!("one block size per spatial axis (1 to {MAX_AXES} axes)");
            return Err(Error::node(at, format!("image_shape {image:?} and block_shape {kernel:?}: expected {want}")));
        }
        if x.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", x.dtype().name()));
        }
        let strides = Attrs::pick(&self.attrs.strides, n, 1, "strides", at)?;
        let dilations = Attrs::pick(&self.attrs.dilations, n, 1, "dilations", at)?;
        let pads = Attrs::pick(&self.attrs.pads, 2 * n, 0, "pads", at)?;
        let s = x.shape();
        let kprod: usize = kernel.iter().product();
        if s.len() != 3 || s[1] % kprod != 0 {
            return Err(Error::input(at, 0, format!("[N, C * {kprod}, L]"), format!("{s:?}")));
        }
        let mut blocks = Vec::with_capacity(n);
        for d in 0..n {
            let span = dilations[d] * (kernel[d] - 1) + 1;
            let padded = image[d] + pads[d] + pads[n + d];
            if padded < span {
                return Err(Error::node(
                    at,
                    format!("block of {span} does not fit the padded image size {padded} on axis {d}"),
                ));
            }
            blocks.push((padded - span) / strides[d] + 1);
        }
        let want: usize = blocks.iter().product();
        if want != s[2] {
            return Err(Error::input(at, 0, format!("L = {want} blocks ({blocks:?})"), s[2].to_string()));
        }
        let shape = [vec![s[0], s[1] / kprod], image.clone()].concat();
        let y = run.alloc(DataType::Float, shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let mut params = vec![n as u32, u32_of(kprod, at)?, u32_of(s[2], at)?, u32_of(image.iter().product(), at)?];
        for d in 0..n {
            for v in [image[d], kernel[d], blocks[d], strides[d], dilations[d], pads[d]] {
                params.push(u32_of(v, at)?);
            }
        }
        u32_of(x.len(), at)?;
        dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &[x.buffer, y.gpu()?], at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{i64s, ints, rand, Case};

    /// Blocks along one axis.
    fn blocks(size: i64, k: i64, stride: i64, dil: i64, pad: i64) -> i64 {
        (size + 2 * pad - (dil * (k - 1) + 1)) / stride + 1
    }

    #[test]
    fn col2im_matches_the_cpu() {
        let cases: &[(&[i64], &[i64], i64, i64, i64)] = &[
            (&[5, 5], &[1, 5], 1, 1, 0),
            (&[7, 6], &[2, 3], 2, 1, 1),
            (&[9, 5], &[3, 2], 1, 2, 0),
            (&[6, 7], &[3, 3], 3, 1, 2),
            (&[4, 5, 3], &[2, 2, 1], 1, 1, 0),
            (&[11], &[4], 3, 2, 1),
        ];
        for (i, &(image, block, stride, dil, pad)) in cases.iter().enumerate() {
            let n = image.len();
            let l: i64 = image.iter().zip(block).map(|(&s, &k)| blocks(s, k, stride, dil, pad)).product();
            let kprod: i64 = block.iter().product();
            for (batch, channels) in [(1usize, 1usize), (2, 3)] {
                let x = rand(&[batch, channels * kprod as usize, l as usize], -1.0, 1.0, 300 + i as u64);
                let attrs = vec![
                    ints("strides", &vec![stride; n]),
                    ints("dilations", &vec![dil; n]),
                    ints("pads", &vec![pad; 2 * n]),
                ];
                let case = Case::new("Col2Im", vec![x.clone(), i64s(image), i64s(block)]).attrs(attrs).opset(18);
                case.constants(&[1, 2]).check(1e-5, 1e-6);
                if stride == 1 && dil == 1 && pad == 0 {
                    let case = Case::new("Col2Im", vec![x, i64s(image), i64s(block)]).opset(18);
                    case.check(1e-5, 1e-6);
                }
            }
        }
    }
}
