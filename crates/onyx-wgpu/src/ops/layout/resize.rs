//! Resize and Upsample: nearest, linear and cubic interpolation over up to eight resized
//! axes.

use super::tile_pad::scalar_words;
use super::*;

/// Resize's interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How nearest mode rounds an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rounding {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Opset 10 and Upsample: floor when upsampling, ceil when downsampling.
    Simple,
}

/// How `sizes` keeps the aspect ratio (opset 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where Resize's arguments are: `(X, scales)` (Resize-10, Upsample-9), `(X, roi, scales,
/// sizes)` (Resize-11 on) or a `scales` attribute (Upsample-7).
#[derive(Debug, Clone, PartialEq)]
enum ResizeInputs {
    ScalesAttr(Vec<f32>),
    Scales,
    RoiScalesSizes,
}

/// One axis to resize: lengths, scale and region of interest (TfCropAndResize).
#[derive(Debug, Clone, Copy, PartialEq)]
struct ResizeAxis {
    input: usize,
    output: usize,
    scale: f64,
    roi: (f64, f64),
}

impl ResizeAxis {
    fn is_identity(&self, coord: Coord) -> bool {
        self.input == self.output && self.scale == 1.0 && (coord != Coord::TfCropAndResize || self.roi == (0.0, 1.0))
    }

    /// The input coordinate of output index `x`, or `None` where TfCropAndResize extrapolates.
    fn source(&self, x: usize, coord: Coord) -> Option<f64> {
        let (x, input, output, s) = (x as f64, self.input as f64, self.output as f64, self.scale);
        Some(match coord {
            Coord::HalfPixel => (x + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = output / (s * input);
                input / 2.0 * (1.0 - adjustment) + (x + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if self.output > 1 => (x + 0.5) / s - 0.5,
            // As ONNX's reference (and the CPU EP): the unrounded output length scale · input.
            Coord::AlignCorners if self.output > 1 && s * input != 1.0 => x * (input - 1.0) / (s * input - 1.0),
            Coord::PytorchHalfPixel | Coord::AlignCorners => 0.0,
            Coord::Asymmetric => x / s,
            Coord::TfHalfPixelForNn => (x + 0.5) / s,
            Coord::TfCropAndResize => {
                let (a, b) = self.roi;
                let v = if self.output > 1 {
                    a * (input - 1.0) + x * (b - a) * (input - 1.0) / (output - 1.0)
                } else {
                    0.5 * (a + b) * (input - 1.0)
                };
                if v < 0.0 || v > input - 1.0 {
                    return None;
                }
                v
            }
        })
    }
}

/// The input index nearest to `x` under `rounding`, clamped into an axis of `len`.
fn round_nearest(x: f64, rounding: Rounding, scale: f64, len: usize) -> usize {
    let f = x.floor();
    let r = x - f;
    let i = match rounding {
        Rounding::RoundPreferFloor => {
            if r <= 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::RoundPreferCeil => {
            if r < 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::Floor => f,
        Rounding::Ceil => x.ceil(),
        Rounding::Simple => {
            if scale < 1.0 {
                x.ceil()
            } else {
                f
            }
        }
    };
    i.clamp(0.0, len.saturating_sub(1) as f64) as usize
}

/// Linear/cubic filter options.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Filter {
    mode: ResizeMode,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

impl Filter {
    /// The kernel's value at distance `x`.
    fn weight(&self, x: f64) -> f64 {
        let x = x.abs();
        match self.mode {
            ResizeMode::Cubic => {
                let a = self.cubic_a;
                if x <= 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                } else {
                    0.0
                }
            }
            _ => (1.0 - x).max(0.0),
        }
    }
}

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
    mode: ResizeMode,
    coord: Coord,
    rounding: Rounding,
    filter: Filter,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
    inputs: ResizeInputs,
    size: u32,
    pipeline: Arc<Pipeline>,
    /// The last table: its key (shape and argument bits) and the GPU tensor.
    table: std::sync::Mutex<Option<(Vec<u64>, onyx_core::Tensor)>>,
    at: Location,
}

fn parse_resize_mode(s: &str, allow_cubic: bool) -> Option<ResizeMode> {
    match s {
        "nearest" => Some(ResizeMode::Nearest),
        "linear" | "bilinear" => Some(ResizeMode::Linear),
        "cubic" | "bicubic" if allow_cubic => Some(ResizeMode::Cubic),
        _ => None,
    }
}

fn parse_coord(s: &str) -> Option<Coord> {
    Some(match s {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        _ => return None,
    })
}

fn parse_rounding(s: &str) -> Option<Rounding> {
    Some(match s {
        "round_prefer_floor" => Rounding::RoundPreferFloor,
        "round_prefer_ceil" => Rounding::RoundPreferCeil,
        "floor" => Rounding::Floor,
        "ceil" => Rounding::Ceil,
        _ => return None,
    })
}

/// The decoded attributes of a Resize or Upsample node.
struct ResizeAttrs {
    mode: ResizeMode,
    coord: Coord,
    rounding: Rounding,
    filter: Filter,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
    inputs: ResizeInputs,
}

/// The decoded attributes of a Resize/Upsample node, or an error.
fn resize_attributes(ctx: &NodeContext<'_>) -> Result<ResizeAttrs> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let legacy = node.op_type == "Upsample" || v < 11;
    let mode_name = node.string_or("mode", "nearest")?;
    let mode = parse_resize_mode(&mode_name, !legacy)
        .ok_or_else(|| Error::attribute(&at, "mode", "nearest, linear or cubic", mode_name.as_str()))?;
    if legacy {
        let inputs = if node.op_type == "Upsample" && v < 9 {
            let scales = node
                .get_floats("scales")?
                .ok_or_else(|| Error::attribute(&at, "scales", "a list of floats", "nothing"))?;
            ResizeInputs::ScalesAttr(scales.to_vec())
        } else {
            ResizeInputs::Scales
        };
        let filter = Filter { mode, cubic_a: -0.75, exclude_outside: false, antialias: false };
        return Ok(ResizeAttrs {
            mode,
            coord: Coord::Asymmetric,
            rounding: Rounding::Simple,
            filter,
            extrapolation: 0.0,
            axes: None,
            policy: Policy::Stretch,
            inputs,
        });
    }
    let policy_name = node.string_or("keep_aspect_ratio_policy", "stretch")?;
    let policy = match policy_name.as_str() {
        "stretch" => Policy::Stretch,
        "not_larger" if v >= 18 => Policy::NotLarger,
        "not_smaller" if v >= 18 => Policy::NotSmaller,
        other => {
            return Err(Error::attribute(&at, "keep_aspect_ratio_policy", "stretch, not_larger or not_smaller", other))
        }
    };
    let coord_name = node.string_or("coordinate_transformation_mode", "half_pixel")?;
    let coord = parse_coord(&coord_name).ok_or_else(|| {
        Error::attribute(&at, "coordinate_transformation_mode", "a mode the ONNX spec lists", coord_name.as_str())
    })?;
    let rounding_name = node.string_or("nearest_mode", "round_prefer_floor")?;
    let rounding = parse_rounding(&rounding_name).ok_or_else(|| {
        Error::attribute(
            &at,
            "nearest_mode",
            "round_prefer_floor, round_prefer_ceil, floor or ceil",
            rounding_name.as_str(),
        )
    })?;
    let filter = Filter {
        mode,
        cubic_a: f64::from(node.float_or("cubic_coeff_a", -0.75)?),
        exclude_outside: node.int_or("exclude_outside", 0)? != 0,
        antialias: v >= 18 && node.int_or("antialias", 0)? != 0,
    };
    let extrapolation = f64::from(node.float_or("extrapolation_value", 0.0)?);
    let axes = if v >= 18 { node.get_ints("axes")?.map(<[i64]>::to_vec) } else { None };
    Ok(ResizeAttrs { mode, coord, rounding, filter, extrapolation, axes, policy, inputs: ResizeInputs::RoiScalesSizes })
}

/// Nearest mode moves any element size; linear and cubic compute in f32 on float types.
pub(super) fn supports_resize(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    let Ok(attrs) = resize_attributes(ctx) else { return false };
    let dtype = input_dtype(ctx, 0);
    match attrs.mode {
        ResizeMode::Nearest => movable(ctx, 0),
        _ => matches!(dtype, Some(DataType::Float | DataType::Float16 | DataType::BFloat16)),
    }
}

pub(super) fn build_resize(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let ResizeAttrs { mode, coord, rounding, filter, extrapolation, axes, policy, inputs } = resize_attributes(ctx)?;
    let dtype = known_dtype(ctx, 0)?;
    let size = known_size(ctx, 0)?;
    let pipeline = if mode == ResizeMode::Nearest {
        gpu.pipeline(&format!("layout/resize_nearest/{size}"), || {
            element_shader("", size, &[("x", size), ("t", 4)], RESIZE_NEAREST)
        })?
    } else {
        let code = resize_filter_code(dtype);
        gpu.pipeline(&format!("layout/resize_filter/{}", dtype.name()), || {
            element_shader("", size, &[("x", size), ("t", 4)], &code)
        })?
    };
    let table = std::sync::Mutex::new(None);
    let at = ctx.node.location();
    Ok(Box::new(Resize {
        mode,
        coord,
        rounding,
        filter,
        extrapolation,
        axes,
        policy,
        inputs,
        size,
        pipeline,
        table,
        at,
    }))
}

impl Resize {
    /// A float host input (roi, scales) as f64 values; `None` when omitted or empty.
    fn floats(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<Vec<f64>>> {
        if inputs.get(i).copied().flatten().is_none() {
            return Ok(None);
        }
        let v = host_input(inputs, i, &self.at)?;
        if v.is_empty() {
            return Ok(None);
        }
        Ok(Some(match v.dtype() {
            DataType::Float => v.as_slice::<f32>()?.iter().map(|&x| f64::from(x)).collect(),
            DataType::Float16 => v.as_slice::<half::f16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::BFloat16 => v.as_slice::<half::bf16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::Double => v.as_slice::<f64>()?.iter().map(|&x| f64::from(x as f32)).collect(),
            other => return Err(Error::input(&self.at, i, "a float tensor", other.name())),
        }))
    }

    /// The axes that scales/sizes/roi refer to.
    fn axes(&self, rank: usize) -> Result<Vec<usize>> {
        let Some(axes) = &self.axes else { return Ok((0..rank).collect()) };
        let mut seen = vec![false; rank];
        axes.iter()
            .map(|&a| {
                let d = normalize_axis(a, rank, &self.at)?;
                if std::mem::replace(&mut seen[d], true) {
                    return Err(Error::attribute(&self.at, "axes", "distinct axes", format!("{axes:?}")));
                }
                Ok(d)
            })
            .collect()
    }

    /// Every axis' input and output length, scale and region of interest.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<ResizeAxis>> {
        let axes = self.axes(shape.len())?;
        let (roi, scales, sizes) = match &self.inputs {
            ResizeInputs::ScalesAttr(s) => (None, Some(s.iter().map(|&x| f64::from(x)).collect()), None),
            ResizeInputs::Scales => (None, self.floats(inputs, 1)?, None),
            ResizeInputs::RoiScalesSizes => {
                let sizes = host_ints(inputs, 3, &self.at)?.filter(|s| !s.is_empty());
                (self.floats(inputs, 1)?, self.floats(inputs, 2)?, sizes)
            }
        };
        let mut plan: Vec<ResizeAxis> =
            shape.iter().map(|&d| ResizeAxis { input: d, output: d, scale: 1.0, roi: (0.0, 1.0) }).collect();
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(Error::node(&self.at, "Resize takes scales or sizes, not both")),
            (None, None) => return Err(Error::node(&self.at, "Resize needs scales or sizes")),
            (Some(scales), None) => self.apply_scales(&mut plan, &axes, &scales)?,
            (None, Some(sizes)) => self.apply_sizes(&mut plan, &axes, &sizes)?,
        }
        if self.coord == Coord::TfCropAndResize {
            let roi = roi.ok_or_else(|| Error::input(&self.at, 1, "a roi for tf_crop_and_resize", "no input"))?;
            if roi.len() != 2 * axes.len() {
                return Err(Error::input(
                    &self.at,
                    1,
                    format!("{} roi values (start and end per axis)", 2 * axes.len()),
                    roi.len().to_string(),
                ));
            }
            for (i, &d) in axes.iter().enumerate() {
                plan[d].roi = (roi[i], roi[i + axes.len()]);
            }
        }
        if let Some(a) = plan.iter().find(|a| a.input == 0 && a.output > 0) {
            return Err(Error::node(&self.at, format!("cannot resize an empty axis to {} elements", a.output)));
        }
        Ok(plan)
    }

    fn apply_scales(&self, plan: &mut [ResizeAxis], axes: &[usize], scales: &[f64]) -> Result<()> {
        let index = if matches!(self.inputs, ResizeInputs::RoiScalesSizes) { 2 } else { 1 };
        if scales.len() != axes.len() || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return Err(Error::input(
                &self.at,
                index,
                format!("{} positive scales", axes.len()),
                format!("{scales:?}"),
            ));
        }
        for (&d, &s) in axes.iter().zip(scales) {
            let out = (plan[d].input as f64 * s).floor();
            if out > u32::MAX as f64 {
                return Err(Error::input(
                    &self.at,
                    index,
                    "scales giving an output the GPU can index",
                    format!("{scales:?}"),
                ));
            }
            plan[d].output = out as usize;
            plan[d].scale = s;
        }
        Ok(())
    }

    fn apply_sizes(&self, plan: &mut [ResizeAxis], axes: &[usize], sizes: &[i64]) -> Result<()> {
        if sizes.len() != axes.len() || sizes.iter().any(|&s| s < 0) {
            return Err(Error::input(&self.at, 3, format!("{} non-negative sizes", axes.len()), format!("{sizes:?}")));
        }
        let ratios: Vec<f64> = axes.iter().zip(sizes).map(|(&d, &s)| s as f64 / plan[d].input as f64).collect();
        let common = match self.policy {
            Policy::Stretch => None,
            Policy::NotLarger => ratios.iter().copied().reduce(f64::min),
            Policy::NotSmaller => ratios.iter().copied().reduce(f64::max),
        };
        for ((&d, &s), &r) in axes.iter().zip(sizes).zip(&ratios) {
            let axis = &mut plan[d];
            match common {
                None => {
                    axis.output = s as usize;
                    axis.scale = r;
                }
                Some(c) => {
                    axis.output = (c * axis.input as f64 + 0.5).floor() as usize;
                    axis.scale = c;
                }
            }
        }
        Ok(())
    }

    /// The taps of one axis: `width` (index, weight) pairs per output index, with `NONE` as
    /// the first index of an extrapolated one.
    fn taps(&self, axis: &ResizeAxis) -> Result<(u32, Vec<u32>)> {
        const NONE: u32 = u32::MAX;
        let last = axis.input.saturating_sub(1);
        if self.mode == ResizeMode::Nearest {
            let mut t = Vec::with_capacity(2 * axis.output);
            for x in 0..axis.output {
                let i = axis.source(x, self.coord).map(|v| round_nearest(v, self.rounding, axis.scale, axis.input));
                t.extend([i.map_or(NONE, |i| i as u32), 1f32.to_bits()]);
            }
            return Ok((1, t));
        }
        let f = &self.filter;
        let support = if f.mode == ResizeMode::Cubic { 2.0 } else { 1.0 };
        let s = if f.antialias { axis.scale.min(1.0) } else { 1.0 };
        let reach = (support / s).ceil();
        if reach.is_nan() || reach > 64.0 {
            return Err(Error::Unsupported(format!(
                "wgpu: {} antialiasing at scale {} needs too wide a filter",
                self.at, axis.scale
            )));
        }
        let start = (-support / s).floor() as i64 + 1;
        let width = (2 - 2 * start) as usize;
        let mut t = Vec::with_capacity(2 * width * axis.output);
        let mut w = vec![0f64; width];
        for x in 0..axis.output {
            let src = axis.source(x, self.coord);
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
    fn tables(&self, run: &GpuRun, plan: &[ResizeAxis], shape: &[usize]) -> Result<(Vec<u32>, onyx_core::Tensor)> {
        let in_strides = strides(shape);
        let mut params = vec![plan.len() as u32];
        let mut table: Vec<u32> = vec![];
        let mut key: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let mut resized = 0;
        for (a, &stride) in plan.iter().zip(&in_strides) {
            key.extend([a.output as u64, a.scale.to_bits(), a.roi.0.to_bits(), a.roi.1.to_bits()]);
            params.extend([u32_of(a.output, &self.at)?, u32_of(stride, &self.at)?]);
            if a.is_identity(self.coord) {
                params.extend([0, 0]);
                continue;
            }
            resized += 1;
            let (width, taps) = self.taps(a)?;
            params.extend([width, u32_of(table.len(), &self.at)?]);
            table.extend(taps);
        }
        if resized > MAX_RESIZED {
            return Err(Error::Unsupported(format!("wgpu: {} resizes more than {MAX_RESIZED} axes", self.at)));
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
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let plan = self.plan(inputs, x.shape())?;
        if plan.iter().all(|a| a.is_identity(self.coord)) {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let y = run.alloc(x.dtype(), shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let fill = scalar_words(x.dtype(), self.extrapolation).unwrap_or([0, 0]);
        let (params, table) = self.tables(run, &plan, x.shape())?;
        let buffers = [x.buffer, table.gpu()?, y.gpu()?];
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(fill),
            &params,
            &buffers,
            &self.at,
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
