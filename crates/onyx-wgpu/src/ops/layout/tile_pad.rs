//! Tile and Pad (constant, reflect, edge and wrap modes).

use super::*;

/// Tile's `fetch`. Parameters: rank, out dims[rank], in dims[rank], in strides[rank].
const TILE_CODE: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let od = p[4u + k];
        let c = rem % od;
        rem = rem / od;
        s += (c % p[4u + rank + k]) * p[4u + 2u * rank + k];
    }
    return load_x(s);
}
";

/// Tile: repeats the input `repeats[d]` times along each axis `d`.
struct Tile {
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

pub(super) fn build_tile(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    let pipeline =
        gpu.pipeline(&format!("layout/tile/{size}"), || element_shader("", size, &[("x", size)], TILE_CODE))?;
    Ok(Box::new(Tile { size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for Tile {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let repeats = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "repeats", "nothing"))?;
        let rank = x.shape().len();
        if repeats.len() != rank {
            return Err(Error::input(
                &self.at,
                1,
                format!("{rank} repeats (the input's rank)"),
                format!("{repeats:?}"),
            ));
        }
        let mut shape = Vec::with_capacity(rank);
        for (&d, &r) in x.shape().iter().zip(&repeats) {
            let r = usize::try_from(r)
                .map_err(|_| Error::input(&self.at, 1, "non-negative repeats", format!("{repeats:?}")))?;
            shape.push(
                d.checked_mul(r)
                    .ok_or_else(|| Error::node(&self.at, format!("tiling a dim of {d} {r} times overflows")))?,
            );
        }
        let y = run.alloc(x.dtype(), shape.clone())?;
        let mut params = vec![rank as u32];
        for &v in shape.iter().chain(x.shape()).chain(&strides(x.shape())) {
            params.push(u32_of(v, &self.at)?);
        }
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()),
            &params,
            &[x.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// How Pad fills positions outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl PadMode {
    fn parse(s: &str, version: i64) -> Option<PadMode> {
        match s {
            "constant" => Some(PadMode::Constant),
            "reflect" => Some(PadMode::Reflect),
            "edge" => Some(PadMode::Edge),
            "wrap" if version >= 19 => Some(PadMode::Wrap),
            _ => None,
        }
    }

    /// WGSL that handles `q` outside `lo..hi` (the surviving input part of the axis).
    fn wgsl(self) -> &'static str {
        match self {
            PadMode::Constant => "return NONE;",
            PadMode::Edge => "q = clamp(q, lo, hi - 1);",
            PadMode::Wrap => "let m = hi - lo; q = lo + (((q - lo) % m) + m) % m;",
            PadMode::Reflect => {
                "let m = hi - lo;
            if (m == 1) { q = lo; } else {
                let period = 2 * (m - 1);
                let r = (((q - lo) % period) + period) % period;
                q = lo + select(period - r, r, r < m);
            }"
            }
        }
    }
}

/// Pad's `fetch`. Parameters: rank, then per axis (arrays of rank): out dims, in strides,
/// begin pads (i32), and the surviving input range lo..hi.
fn pad_code(mode: PadMode) -> String {
    format!(
        "
fn src(e: u32) -> u32 {{
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {{
        let k = d - 1u;
        let od = p[4u + k];
        let c = i32(rem % od);
        rem = rem / od;
        var q = c - bitcast<i32>(p[4u + 2u * rank + k]);
        let lo = i32(p[4u + 3u * rank + k]);
        let hi = i32(p[4u + 4u * rank + k]);
        if (q < lo || q >= hi) {{
            {}
        }}
        s += u32(q) * p[4u + rank + k];
    }}
    return s;
}}
fn fetch(e: u32) -> E {{
    let s = src(e);
    if (s == NONE) {{ return fill(); }}
    return load_x(s);
}}
",
        mode.wgsl()
    )
}

/// Pad: constant, reflect, edge and wrap; negative pads crop.
struct Pad {
    mode: PadMode,
    /// Pads and constant words from attributes (before opset 11).
    attr: Option<(Vec<i64>, [u32; 2])>,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

pub(super) fn supports_pad(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let mode_ok = ctx.node.string_or("mode", "constant").is_ok_and(|m| PadMode::parse(&m, ctx.since_version).is_some());
    let value_ok = ctx.since_version >= 11 || input_dtype(ctx, 0).is_some_and(|d| scalar_words(d, 0.0).is_some());
    mode_ok && value_ok && movable(ctx, 0)
}

pub(super) fn build_pad(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let mode_name = node.string_or("mode", "constant")?;
    let mode = PadMode::parse(&mode_name, ctx.since_version)
        .ok_or_else(|| Error::attribute(&at, "mode", "constant, reflect, edge (or wrap from opset 19)", mode_name))?;
    let dtype = known_dtype(ctx, 0)?;
    let attr = if ctx.since_version < 11 {
        let pads = node.get_ints("pads")?.or(node.get_ints("paddings")?);
        let pads = pads.ok_or_else(|| Error::attribute(&at, "pads", "a list of ints", "nothing"))?;
        let value = f64::from(node.float_or("value", 0.0)?);
        let words = scalar_words(dtype, value).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
        Some((pads.to_vec(), words))
    } else {
        None
    };
    let size = known_size(ctx, 0)?;
    let key = format!("layout/pad/{mode:?}/{size}");
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", size)], &pad_code(mode)))?;
    Ok(Box::new(Pad { mode, attr, size, pipeline, at }))
}

/// `v` as the bits of a scalar of `dtype` (converted as a cast would), for the numeric types
/// and bool.
pub(crate) fn scalar_words(dtype: DataType, v: f64) -> Option<[u32; 2]> {
    let w = |lo: u64| Some([lo as u32, (lo >> 32) as u32]);
    match dtype {
        DataType::Float => w(u64::from((v as f32).to_bits())),
        DataType::Double => w(v.to_bits()),
        DataType::Float16 => w(u64::from(half::f16::from_f64(v).to_bits())),
        DataType::BFloat16 => w(u64::from(half::bf16::from_f64(v).to_bits())),
        DataType::Int8 => w(u64::from(v as i8 as u8)),
        DataType::Uint8 => w(u64::from(v as u8)),
        DataType::Int16 => w(u64::from(v as i16 as u16)),
        DataType::Uint16 => w(u64::from(v as u16)),
        DataType::Int32 => w(u64::from(v as i32 as u32)),
        DataType::Uint32 => w(u64::from(v as u32)),
        DataType::Int64 => w(v as i64 as u64),
        DataType::Uint64 => w(v as u64),
        DataType::Bool => w(u64::from(v != 0.0)),
        _ => None,
    }
}

impl Pad {
    /// Begin and end pads of every axis.
    fn pads(&self, inputs: &[Option<ValueRef<'_>>], rank: usize) -> Result<Vec<(i64, i64)>> {
        let pads = match &self.attr {
            Some((p, _)) => p.clone(),
            None => host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "pads", "no input"))?,
        };
        let axes: Vec<usize> = match host_ints(inputs, 3, &self.at)? {
            Some(a) => a.iter().map(|&a| normalize_axis(a, rank, &self.at)).collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(Error::node(
                &self.at,
                format!("pads {pads:?} must hold a begin and an end for each of the {} axes", axes.len()),
            ));
        }
        let mut out = vec![(0, 0); rank];
        for (i, &axis) in axes.iter().enumerate() {
            out[axis] = (pads[i], pads[i + axes.len()]);
        }
        Ok(out)
    }

    /// The fill element: the attribute value, constant_value input, or zero.
    fn fill(&self, inputs: &[Option<ValueRef<'_>>], dtype: DataType) -> Result<[u32; 2]> {
        if let Some((_, words)) = &self.attr {
            return Ok(*words);
        }
        if self.mode != PadMode::Constant || inputs.get(2).copied().flatten().is_none() {
            return Ok([0, 0]);
        }
        let c = host_input(inputs, 2, &self.at)?;
        if c.is_empty() {
            return Ok([0, 0]);
        }
        if c.dtype() != dtype {
            return Err(Error::input(&self.at, 2, format!("a {dtype} scalar"), c.dtype().name()));
        }
        fill_words(&c)
    }

    /// Per axis: output length, begin pad, and the surviving input range `lo..hi`.
    fn axis(&self, dim: usize, begin: i64, end: i64) -> Result<(usize, i64, i64, i64)> {
        let d = dim as i64;
        let out = d.checked_add(begin).and_then(|x| x.checked_add(end)).filter(|&n| n >= 0);
        let Some(out) = out else {
            return Err(Error::node(&self.at, format!("pads {begin} and {end} leave nothing of a dim of {d}")));
        };
        let lo = (-begin).max(0);
        let hi = d - (-end).max(0);
        if hi <= lo && self.mode != PadMode::Constant && out > 0 {
            return Err(Error::node(
                &self.at,
                format!("{:?} padding needs a non-empty dim, found a dim of {d} after cropping", self.mode),
            ));
        }
        let fits = |v: i64| i32::try_from(v).is_ok();
        if !(fits(out) && fits(begin) && fits(lo) && fits(hi)) {
            return Err(Error::node(&self.at, format!("pads {begin} and {end} are too large for the GPU kernel")));
        }
        Ok((out as usize, begin, lo, hi.max(lo)))
    }
}

impl GpuOp for Pad {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let rank = x.shape().len();
        let pads = self.pads(inputs, rank)?;
        let fill = self.fill(inputs, x.dtype())?;
        let axes = x.shape().iter().zip(&pads).map(|(&d, &(b, e))| self.axis(d, b, e)).collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> = axes.iter().map(|a| a.0).collect();
        let in_strides = strides(x.shape());
        let mut params = vec![rank as u32];
        params.extend(shape.iter().map(|&d| d as u32));
        for &s in &in_strides {
            params.push(u32_of(s, &self.at)?);
        }
        params.extend(axes.iter().map(|a| a.1 as i32 as u32));
        params.extend(axes.iter().map(|a| a.2 as u32));
        params.extend(axes.iter().map(|a| a.3 as u32));
        let y = run.alloc(x.dtype(), shape)?;
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(fill),
            &params,
            &[x.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;
    use onyx_core::DataType;

    #[test]
    fn pad_matches_the_cpu_in_every_mode() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 5, 4], k as u64);
            let value = random(dtype, &[], k as u64 + 7);
            for mode in ["constant", "reflect", "edge", "wrap"] {
                let attrs = vec![string("mode", mode)];
                let pads = i64s(&[1, 2, 3, 2, 0, 5]);
                check_exact(
                    &Case::new("Pad", vec![x.clone(), pads.clone(), value.clone()])
                        .attrs(attrs.clone())
                        .constants(&[1, 2]),
                );
                let crop = i64s(&[-1, 3, 0, 1, -2, 2]);
                check_exact(
                    &Case::new("Pad", vec![x.clone(), crop, value.clone()]).attrs(attrs.clone()).constants(&[1, 2]),
                );
                let mut axes =
                    Case::new("Pad", vec![x.clone(), i64s(&[4, 9]), value.clone(), i64s(&[-1])]).attrs(attrs.clone());
                axes = axes.constants(&[1, 2, 3]);
                check_exact(&axes);
            }
            check_exact(&Case::new("Pad", vec![x.clone(), i64s(&[0, 1, 1, 0, 0, 0])]).constants(&[1]));
        }
        let x = random(DataType::Float, &[2, 3], 1);
        check_exact(
            &Case::new("Pad", vec![x.clone()]).opset(2).attrs(vec![ints("pads", &[1, 2, 0, 1]), float("value", 1.5)]),
        );
        check_exact(
            &Case::new("Pad", vec![x]).opset(2).attrs(vec![ints("pads", &[1, 2, 0, 1]), string("mode", "reflect")]),
        );
    }
}
