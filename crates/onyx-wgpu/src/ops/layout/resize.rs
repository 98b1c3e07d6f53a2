//! Resize and Upsample: nearest, linear and cubic interpolation over up to eight resized
//! axes.

use onyx_core::ops::resize::{round_nearest, Arguments, Axis, Mode, ResizeAttrs};

use super::tile_pad::scalar_words;
use super::*;

/// Most resized axes the linear/cubic kernel combines.
const MAX_RESIZED: usize = 8;

/// Resize's nearest `fetch`. Parameters: rank, then per axis (4 each): out dim, in stride,
/// taps (0: identity axis), table offset. Table entries are (index, weight bits) pairs; an
/// index of `NONE` marks an extrapolated coordinate.
const RESIZE_NEAREST: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {
        let q = 4u + 4u * (d - 1u);
        let c = rem % p[q];
        rem = rem / p[q];
        if (p[q + 2u] == 0u) { s += c * p[q + 1u]; continue; }
        let idx = b_t[p[q + 3u] + 2u * c];
        if (idx == NONE) { return fill(); }
        s += idx * p[q + 1u];
    }
    return load_x(s);
}
";

/// Resize's linear/cubic `fetch` in f32 (see [`RESIZE_NEAREST`] for the parameters), for a
/// float type read and written by `to_f32`/`from_f32`.
fn resize_filter_code(dtype: DataType) -> String {
    let (to, from) = match dtype {
        DataType::Float16 => ("bitcast<f32>(f16_to_f32(v))", "f32_to_f16(bitcast<u32>(v))"),
        DataType::BFloat16 => ("bitcast<f32>(v << 16u)", "f32_to_bf16(bitcast<u32>(v))"),
        _ => ("bitcast<f32>(v)", "bitcast<u32>(v)"),
    };
    format!(
        "{lib}
fn to_f32(v: u32) -> f32 {{ return {to}; }}
fn from_f32(v: f32) -> u32 {{ return {from}; }}
fn fetch(e: u32) -> E {{
    let rank = p[3];
    var pos: array<u32, {MAX_RESIZED}>;
    var wid: array<u32, {MAX_RESIZED}>;
    var str: array<u32, {MAX_RESIZED}>;
    var r = 0u;
    var total = 1u;
    var base = 0u;
    var rem = e;
    for (var d = rank; d > 0u; d--) {{
        let q = 4u + 4u * (d - 1u);
        let c = rem % p[q];
        rem = rem / p[q];
        let width = p[q + 2u];
        if (width == 0u) {{ base += c * p[q + 1u]; continue; }}
        let at = p[q + 3u] + 2u * width * c;
        if (b_t[at] == NONE) {{ return fill(); }}
        pos[r] = at;
        wid[r] = width;
        str[r] = p[q + 1u];
        total *= width;
        r += 1u;
    }}
    var acc = 0.0;
    for (var t = 0u; t < total; t++) {{
        var rest = t;
        var s = base;
        var w = 1.0;
        for (var a = 0u; a < r; a++) {{
            let k = rest % wid[a];
            rest = rest / wid[a];
            let at = pos[a] + 2u * k;
            s += b_t[at] * str[a];
            w *= bitcast<f32>(b_t[at + 1u]);
        }}
        acc += w * to_f32(load_x(s));
    }}
    return from_f32(acc);
}}
",
        lib = super::super::cast::CAST_LIB
    )
}

/// Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest for every element size,
/// linear and cubic (antialiased or not) for f32, f16 and bf16, computed in f32.
///
/// The per-axis sampling tables (input index and weight of each tap, computed on the host
/// in f64 exactly as the CPU EP computes them) are uploaded once per input shape and
/// arguments, and cached.
struct Resize {
    attrs: ResizeAttrs,
    size: u32,
    pipeline: Arc<Pipeline>,
    /// The last table: its key (shape and argument bits) and the GPU tensor.
    table: std::sync::Mutex<Option<(Vec<u64>, onyx_core::Tensor)>>,
}

/// Nearest mode moves any element size; linear and cubic compute in f32 on float types.
pub(super) fn supports_resize(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let Ok(attrs) = ResizeAttrs::from_node(ctx.node, ctx.since_version) else { return false };
    let dtype = input_dtype(ctx, 0);
    match attrs.mode {
        Mode::Nearest => movable(ctx, 0),
        _ => matches!(dtype, Some(DataType::Float | DataType::Float16 | DataType::BFloat16)),
    }
}

pub(super) fn build_resize(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let attrs = ResizeAttrs::from_node(ctx.node, ctx.since_version)?;
    let dtype = known_dtype(ctx, 0)?;
    let size = known_size(ctx, 0)?;
    let pipeline = if attrs.mode == Mode::Nearest {
        gpu.pipeline(&format!("layout/resize_nearest/{size}"), || {
            element_shader("", size, &[("x", size), ("t", 4)], RESIZE_NEAREST)
        })?
    } else {
        let code = resize_filter_code(dtype);
        gpu.pipeline(&format!("layout/resize_filter/{}", dtype.name()), || {
            element_shader("", size, &[("x", size), ("t", 4)], &code)
        })?
    };
    Ok(Box::new(Resize { attrs, size, pipeline, table: std::sync::Mutex::new(None) }))
}

impl Resize {
    /// A float host input (roi, scales) as f64 values; `None` when omitted or empty.
    fn floats(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<Vec<f64>>> {
        if inputs.get(i).copied().flatten().is_none() {
            return Ok(None);
        }
        let v = host_input(inputs, i, &self.attrs.at)?;
        if v.is_empty() {
            return Ok(None);
        }
        Ok(Some(match v.dtype() {
            DataType::Float => v.as_slice::<f32>()?.iter().map(|&x| f64::from(x)).collect(),
            DataType::Float16 => v.as_slice::<half::f16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::BFloat16 => v.as_slice::<half::bf16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::Double => v.as_slice::<f64>()?.iter().map(|&x| f64::from(x as f32)).collect(),
            other => return Err(Error::input(&self.attrs.at, i, "a float tensor", other.name())),
        }))
    }

    /// Every axis' input and output length, scale and region of interest.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<Axis>> {
        let (roi, scales, sizes) = match self.attrs.arguments {
            Arguments::ScalesAttr(_) => (None, None, None),
            Arguments::Scales => (None, self.floats(inputs, 1)?, None),
            Arguments::RoiScalesSizes => {
                let sizes = host_ints(inputs, 3, &self.attrs.at)?.filter(|s| !s.is_empty());
                (self.floats(inputs, 1)?, self.floats(inputs, 2)?, sizes)
            }
        };
        self.attrs.plan(shape, roi, scales, sizes, u32::MAX as usize)
    }

    /// The taps of one axis: `width` (index, weight) pairs per output index, with `NONE` as
    /// the first index of an extrapolated one.
    fn taps(&self, axis: &Axis) -> Result<(u32, Vec<u32>)> {
        const NONE: u32 = u32::MAX;
        let last = axis.input.saturating_sub(1);
        if self.attrs.mode == Mode::Nearest {
            let mut t = Vec::with_capacity(2 * axis.output);
            for x in 0..axis.output {
                let i = axis
                    .source(x, self.attrs.coord)
                    .map(|v| round_nearest(v, self.attrs.rounding, axis.scale, axis.input));
                t.extend([i.map_or(NONE, |i| i as u32), 1f32.to_bits()]);
            }
            return Ok((1, t));
        }
        let f = &self.attrs.filter;
        let support = if f.mode == Mode::Cubic { 2.0 } else { 1.0 };
        let s = if f.antialias { axis.scale.min(1.0) } else { 1.0 };
        let reach = (support / s).ceil();
        if reach.is_nan() || reach > 64.0 {
            return Err(Error::Unsupported(format!(
                "wgpu: {} antialiasing at scale {} needs too wide a filter",
                self.attrs.at, axis.scale
            )));
        }
        let start = (-support / s).floor() as i64 + 1;
        let width = (2 - 2 * start) as usize;
        let mut t = Vec::with_capacity(2 * width * axis.output);
        let mut w = vec![0f64; width];
        for x in 0..axis.output {
            let src = axis.source(x, self.attrs.coord);
            let v = src.unwrap_or(0.0);
            let mut fl = v.floor();
            let mut ratio = v - fl;
            if ratio == 0.0 {
                fl -= 1.0;
                ratio = 1.0;
            }
            let base = fl as i64;
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = f.weight(((start + k as i64) as f64 - ratio) * s);
            }
            let inside = |k: usize| (0..=last as i64).contains(&(base + start + k as i64));
            if f.exclude_outside {
                for (k, wk) in w.iter_mut().enumerate() {
                    if !inside(k) {
                        *wk = 0.0;
                    }
                }
            }
            if f.antialias || f.exclude_outside {
                let sum: f64 = w.iter().sum();
                if sum != 0.0 {
                    w.iter_mut().for_each(|wk| *wk /= sum);
                }
            }
            for (k, &wk) in w.iter().enumerate() {
                let i = (base + start + k as i64).clamp(0, last as i64) as u32;
                t.extend([if src.is_none() && k == 0 { NONE } else { i }, (wk as f32).to_bits()]);
            }
        }
        Ok((width as u32, t))
    }

    /// Kernel parameters and the table for `plan` on an input of `shape` (the table from the
    /// cache when the arguments did not change).
    fn tables(&self, run: &GpuRun, plan: &[Axis], shape: &[usize]) -> Result<(Vec<u32>, onyx_core::Tensor)> {
        let in_strides = strides(shape);
        let mut params = vec![plan.len() as u32];
        let mut table: Vec<u32> = vec![];
        let mut key: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let mut resized = 0;
        for (a, &stride) in plan.iter().zip(&in_strides) {
            key.extend([a.output as u64, a.scale.to_bits(), a.roi.0.to_bits(), a.roi.1.to_bits()]);
            params.extend([u32_of(a.output, &self.attrs.at)?, u32_of(stride, &self.attrs.at)?]);
            if a.is_identity(self.attrs.coord) {
                params.extend([0, 0]);
                continue;
            }
            resized += 1;
            let (width, taps) = self.taps(a)?;
            params.extend([width, u32_of(table.len(), &self.attrs.at)?]);
            table.extend(taps);
        }
        if resized > MAX_RESIZED {
            return Err(Error::Unsupported(format!("wgpu: {} resizes more than {MAX_RESIZED} axes", self.attrs.at)));
        }
        let mut cache = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((k, t)) = cache.as_ref() {
            if *k == key {
                return Ok((params, t.clone()));
            }
        }
        if table.is_empty() {
            table.push(0);
        }
        let tensor = run.context().upload(TensorView::from_slice(&[table.len()], &table)?)?;
        *cache = Some((key, tensor.clone()));
        Ok((params, tensor))
    }
}

impl GpuOp for Resize {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.attrs.at)?;
        let plan = self.plan(inputs, x.shape())?;
        if plan.iter().all(|a| a.is_identity(self.attrs.coord)) {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let y = run.alloc(x.dtype(), shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let fill = scalar_words(x.dtype(), self.attrs.extrapolation).unwrap_or([0, 0]);
        let (params, table) = self.tables(run, &plan, x.shape())?;
        let buffers = [x.buffer, table.gpu()?, y.gpu()?];
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(fill),
            &params,
            &buffers,
            &self.attrs.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;
    use onyx_core::{DataType, Tensor};

    /// A Resize case: `(X, roi, scales, sizes)` with the arguments as constants.
    fn resize(
        x: &Tensor,
        roi: Option<&[f32]>,
        scales: Option<&[f32]>,
        sizes: Option<&[i64]>,
        attrs: Vec<onyx_core::ir::Attribute>,
    ) -> Case {
        let f = |v: &[f32]| t(&[v.len()], v.to_vec());
        let mut case = Case::new("Resize", vec![x.clone()]).attrs(attrs);
        case.inputs.extend([roi.map(f), scales.map(f), sizes.map(i64s)]);
        case.constant = vec![1, 2, 3];
        case
    }

    #[test]
    fn resize_nearest_moves_every_dtype_like_the_cpu() {
        let modes = [
            ("half_pixel", "round_prefer_floor"),
            ("asymmetric", "round_prefer_ceil"),
            ("align_corners", "floor"),
            ("pytorch_half_pixel", "ceil"),
            ("tf_half_pixel_for_nn", "round_prefer_floor"),
            ("half_pixel_symmetric", "round_prefer_ceil"),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[2, 3, 5, 7], k as u64);
            for (coord, nearest) in modes {
                let attrs = vec![string("coordinate_transformation_mode", coord), string("nearest_mode", nearest)];
                check_exact(&resize(&x, None, Some(&[1.0, 1.0, 2.0, 1.5]), None, attrs.clone()));
                check_exact(&resize(&x, None, Some(&[1.0, 1.0, 0.6, 0.43]), None, attrs.clone()));
                check_exact(&resize(&x, None, None, Some(&[2, 3, 9, 4]), attrs));
            }
            let crop =
                vec![string("coordinate_transformation_mode", "tf_crop_and_resize"), float("extrapolation_value", 3.0)];
            let roi = [0.0, 0.0, -0.2, 0.1, 1.0, 1.0, 1.3, 0.9];
            check_exact(&resize(&x, Some(&roi), None, Some(&[2, 3, 8, 6]), crop));
        }
    }

    #[test]
    fn resize_linear_and_cubic_match_the_cpu() {
        let x = crate::testkit::rand(&[2, 3, 9, 11], -2.0, 2.0, 7);
        let coords = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"];
        for mode in ["linear", "cubic"] {
            for coord in coords {
                let attrs = vec![string("mode", mode), string("coordinate_transformation_mode", coord)];
                resize(&x, None, Some(&[1.0, 1.0, 2.0, 1.7]), None, attrs.clone()).check(1e-5, 1e-5);
                resize(&x, None, None, Some(&[2, 3, 4, 5]), attrs.clone()).check(1e-5, 1e-5);
                resize(&x, None, None, Some(&[2, 3, 1, 16]), attrs).check(1e-5, 1e-5);
            }
            let excl = vec![string("mode", mode), int("exclude_outside", 1), float("cubic_coeff_a", -0.5)];
            resize(&x, None, Some(&[1.0, 1.0, 1.5, 0.8]), None, excl).check(1e-5, 1e-5);
            let aa = vec![string("mode", mode), int("antialias", 1)];
            resize(&x, None, Some(&[1.0, 1.0, 0.4, 0.7]), None, aa).check(1e-5, 1e-5);
            let crop = vec![
                string("mode", mode),
                string("coordinate_transformation_mode", "tf_crop_and_resize"),
                float("extrapolation_value", -9.0),
            ];
            let mut c = resize(&x, Some(&[0.1, -0.3, 0.8, 1.2]), None, Some(&[6, 7]), crop);
            c.attributes.push(ints("axes", &[2, 3]));
            c.check(1e-5, 1e-5);
            let keep =
                vec![string("mode", mode), string("keep_aspect_ratio_policy", "not_larger"), ints("axes", &[-1, -2])];
            resize(&x, None, None, Some(&[20, 13]), keep).check(1e-5, 1e-5);
        }
        let h = Case::new("Cast", vec![x.clone()]).attrs(vec![int("to", 10)]).run_cpu().remove(0);
        let attrs = vec![string("mode", "linear")];
        resize(&h, None, Some(&[1.0, 1.0, 1.6, 0.5]), None, attrs).check(1e-3, 2e-3);
    }

    #[test]
    fn legacy_resize_and_upsample_match_the_cpu() {
        let x = random(DataType::Float, &[1, 2, 3, 4], 3);
        let scales = t(&[4], vec![1.0f32, 1.0, 2.0, 1.5]);
        for mode in ["nearest", "linear"] {
            let attrs = vec![string("mode", mode)];
            Case::new("Resize", vec![x.clone(), scales.clone()])
                .opset(10)
                .attrs(attrs.clone())
                .constants(&[1])
                .check(1e-5, 1e-5);
            Case::new("Upsample", vec![x.clone(), scales.clone()])
                .opset(9)
                .attrs(attrs.clone())
                .constants(&[1])
                .check(1e-5, 1e-5);
            let mut a7 = attrs.clone();
            a7.push(crate::testkit::attr("scales", onyx_core::ir::AttrValue::Floats(vec![1.0, 1.0, 0.5, 3.0])));
            Case::new("Upsample", vec![x.clone()]).opset(7).attrs(a7).check(1e-5, 1e-5);
        }
        check_exact(&resize(&x, None, Some(&[1.0, 1.0, 1.0, 1.0]), None, vec![]));
    }
}
