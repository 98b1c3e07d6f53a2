//! Image-layout ops: CenterCropPad, Col2Im and MaxUnpool.
//!
//! CenterCropPad crops or zero-pads chosen axes to a target size, centred (the extra element of
//! an odd difference goes to the end). Col2Im is the inverse of im2col: it sums the columns of
//! `[N, C·∏block, L]` back into `[N, C, image...]` with strides, dilations and pads. MaxUnpool
//! scatters pooled values to the flat positions MaxPool's indices name, in a zero tensor of the
//! unpooled shape (placed at the start of `output_shape` when one is given).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("CenterCropPad", build_center_crop_pad);
    r.add("Col2Im", build_col2im);
    r.add("MaxUnpool", build_max_unpool);
}

/// A 1-D int64/int32 input as non-negative sizes.
fn sizes(t: &TensorView<'_>, i: usize, name: &str, at: &Location) -> Result<Vec<usize>> {
    if t.rank() != 1 || !matches!(t.dtype(), DataType::Int64 | DataType::Int32) {
        return Err(Error::input(at, i, format!("a 1-D int64 {name}"), format!("{} {:?}", t.dtype(), t.shape())));
    }
    util::to_i64(t)?
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| Error::input(at, i, format!("{name} >= 0"), v.to_string())))
        .collect()
}

/// Copies the elements of `x` (shape `from`) whose index `i` maps to `i + shift` inside `to`
/// into a zero tensor of shape `to` (shift per axis, possibly negative), by element size.
fn shifted_copy<T: Copy + Default>(x: &[T], from: &[usize], to: &[usize], shift: &[isize]) -> Vec<T> {
    let mut out = vec![T::default(); to.iter().product()];
    let (fs, ts) = (util::strides(from), util::strides(to));
    'elems: for (flat, &v) in x.iter().enumerate() {
        let mut dst = 0;
        for d in 0..from.len() {
            let i = ((flat / fs[d]) % from[d]) as isize + shift[d];
            if i < 0 || i as usize >= to[d] {
                continue 'elems;
            }
            dst += i as usize * ts[d];
        }
        out[dst] = v;
    }
    out
}

/// A CenterCropPad node.
struct CenterCropPad {
    axes: Option<Vec<i64>>,
    at: Location,
}

fn build_center_crop_pad(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(CenterCropPad { axes: ctx.node.get_ints("axes")?.map(<[i64]>::to_vec), at: ctx.node.location() }))
}

impl Kernel for CenterCropPad {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let target = sizes(&util::input(inputs, 1, at)?, 1, "shape", at)?;
        let rank = x.rank();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a.iter().map(|&a| util::normalize_axis(a, rank, at)).collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if axes.len() != target.len() {
            return Err(Error::input(
                at,
                1,
                format!("{} sizes (one per axis)", axes.len()),
                format!("{}", target.len()),
            ));
        }
        let mut out_shape = x.shape().to_vec();
        let mut shift = vec![0isize; rank];
        for (&a, &t) in axes.iter().zip(&target) {
            let dim = x.shape()[a];
            // Crop: drop (dim − t) / 2 at the start; pad: add (t − dim) / 2 at the start.
            shift[a] = if t < dim { -(((dim - t) / 2) as isize) } else { ((t - dim) / 2) as isize };
            out_shape[a] = t;
        }
        let y = move_elements(&x, &out_shape, &shift, at)?;
        Ok(vec![y])
    }
}

/// [`shifted_copy`] for a tensor of any fixed-size element type.
fn move_elements(x: &TensorView<'_>, to: &[usize], shift: &[isize], at: &Location) -> Result<Value> {
    let from = x.shape();
    let dtype = x.dtype();
    let bytes = x.bytes()?;
    let out: Vec<u8> = crate::dispatch_by_size!(dtype, T => {
        let src: &[T] = bytemuck::try_cast_slice(bytes).map_err(|e| Error::node(at, e.to_string()))?;
        bytemuck::cast_slice(&shifted_copy(src, from, to, shift)).to_vec()
    }, _ => return Err(Error::input(at, 0, "a tensor of 1, 2, 4 or 8-byte elements", dtype.name())));
    onyx_core::Tensor::from_bytes(dtype, to.to_vec(), onyx_core::HostBuffer::from_vec(out)).map(Value::Tensor)
}

/// Spatial pooling geometry shared by Col2Im and MaxUnpool.
struct Geometry {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Begin pads then end pads.
    pads: Vec<usize>,
}

fn positive(ctx: &NodeContext<'_>, name: &str, n: usize, default: usize) -> Result<Option<Vec<usize>>> {
    let at = ctx.node.location();
    let Some(v) = ctx.node.get_ints(name)? else {
        return Ok(None);
    };
    let min = if default == 0 { 0 } else { 1 };
    let ok = v.iter().all(|&x| x >= min) && (n == 0 || v.len() == n);
    if !ok {
        return Err(Error::attribute(
            &at,
            name,
            format!("{} values >= {min}", if n == 0 { "some".into() } else { n.to_string() }),
            format!("{v:?}"),
        ));
    }
    Ok(Some(v.iter().map(|&x| x as usize).collect()))
}

impl Geometry {
    fn new(ctx: &NodeContext<'_>, kernel: Vec<usize>) -> Result<Self> {
        let n = kernel.len();
        Ok(Geometry {
            strides: positive(ctx, "strides", n, 1)?.unwrap_or_else(|| vec![1; n]),
            dilations: positive(ctx, "dilations", n, 1)?.unwrap_or_else(|| vec![1; n]),
            pads: positive(ctx, "pads", 2 * n, 0)?.unwrap_or_else(|| vec![0; 2 * n]),
            kernel,
        })
    }
}

/// A Col2Im node: strides, dilations and pads (the block shape is an input).
struct Col2Im {
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    at: Location,
}

fn build_col2im(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Col2Im {
        strides: positive(ctx, "strides", 0, 1)?,
        dilations: positive(ctx, "dilations", 0, 1)?,
        pads: positive(ctx, "pads", 0, 0)?,
        at: ctx.node.location(),
    }))
}

impl Col2Im {
    fn geometry(&self, block: Vec<usize>) -> Result<Geometry> {
        let n = block.len();
        let pick = |v: &Option<Vec<usize>>, len: usize, default: usize, name: &str| -> Result<Vec<usize>> {
            match v {
                Some(v) if v.len() == len => Ok(v.clone()),
                Some(v) => Err(Error::attribute(&self.at, name, format!("{len} values"), format!("{v:?}"))),
                None => Ok(vec![default; len]),
            }
        };
        Ok(Geometry {
            strides: pick(&self.strides, n, 1, "strides")?,
            dilations: pick(&self.dilations, n, 1, "dilations")?,
            pads: pick(&self.pads, 2 * n, 0, "pads")?,
            kernel: block,
        })
    }

    fn compute(&self, x: &TensorView<'_>, image: Vec<usize>, block: Vec<usize>) -> Result<Value> {
        let at = &self.at;
        let g = self.geometry(block)?;
        let n = image.len();
        if g.kernel.len() != n || n == 0 || g.kernel.contains(&0) {
            return Err(Error::node(
                at,
                format!(
                    "image_shape {image:?} and block_shape {:?} must have one positive size per spatial axis",
                    g.kernel
                ),
            ));
        }
        let s = x.shape();
        let kprod: usize = g.kernel.iter().product();
        if s.len() != 3 || s[1] % kprod != 0 {
            return Err(Error::input(at, 0, format!("[N, C * {kprod}, L]"), format!("{s:?}")));
        }
        let mut blocks = Vec::with_capacity(n);
        for (d, &size) in image.iter().enumerate() {
            let span = g.dilations[d] * (g.kernel[d] - 1) + 1;
            let padded = size + g.pads[d] + g.pads[n + d];
            if padded < span {
                return Err(Error::node(
                    at,
                    format!("block of {span} does not fit the padded image size {padded} on axis {d}"),
                ));
            }
            blocks.push((padded - span) / g.strides[d] + 1);
        }
        if blocks.iter().product::<usize>() != s[2] {
            return Err(Error::input(
                at,
                0,
                format!("L = {} blocks ({blocks:?})", blocks.iter().product::<usize>()),
                s[2].to_string(),
            ));
        }
        if compute_type(x.dtype()).is_none() {
            return Err(Error::input(at, 0, "a float tensor", x.dtype().name()));
        }
        let data = float_slice::<f64>(x)?;
        let (batch, channels, l) = (s[0], s[1] / kprod, s[2]);
        let img: usize = image.iter().product();
        let (ks, bs, is) = (util::strides(&g.kernel), util::strides(&blocks), util::strides(&image));
        let mut out = vec![0.0; batch * channels * img];
        for bc in 0..batch * channels {
            for k in 0..kprod {
                let row = &data[(bc * kprod + k) * l..][..l];
                'cols: for (col, &v) in row.iter().enumerate() {
                    let mut dst = 0;
                    for d in 0..n {
                        let (kd, bd) = ((k / ks[d]) % g.kernel[d], (col / bs[d]) % blocks[d]);
                        let p = (bd * g.strides[d] + kd * g.dilations[d]) as isize - g.pads[d] as isize;
                        if p < 0 || p as usize >= image[d] {
                            continue 'cols;
                        }
                        dst += p as usize * is[d];
                    }
                    out[bc * img + dst] += v;
                }
            }
        }
        let shape = [vec![batch, channels], image].concat();
        float_output(x.dtype(), shape, out)
    }
}

impl Kernel for Col2Im {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let image = sizes(&util::input(inputs, 1, at)?, 1, "image_shape", at)?;
        let block = sizes(&util::input(inputs, 2, at)?, 2, "block_shape", at)?;
        Ok(vec![self.compute(&x, image, block).map_err(|e| e.at(at))?])
    }
}

/// A MaxUnpool node.
struct MaxUnpool {
    g: Geometry,
    at: Location,
}

fn build_max_unpool(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let kernel = positive(ctx, "kernel_shape", 0, 1)?
        .ok_or_else(|| Error::attribute(&at, "kernel_shape", "a list of sizes", "nothing"))?;
    Ok(Box::new(MaxUnpool { g: Geometry::new(ctx, kernel)?, at }))
}

impl MaxUnpool {
    fn compute(&self, x: &TensorView<'_>, idx: &TensorView<'_>, out_shape: Option<Vec<usize>>) -> Result<Value> {
        let at = &self.at;
        let (s, n) = (x.shape(), self.g.kernel.len());
        if s.len() != n + 2 {
            return Err(Error::input(
                at,
                0,
                format!("a tensor of rank {} (N, C and {n} spatial axes)", n + 2),
                format!("{s:?}"),
            ));
        }
        if idx.shape() != s || idx.dtype() != DataType::Int64 {
            return Err(Error::input(
                at,
                1,
                format!("int64 indices of shape {s:?}"),
                format!("{} {:?}", idx.dtype(), idx.shape()),
            ));
        }
        let mut inferred = s[..2].to_vec();
        for d in 0..n {
            let full = s[d + 2].saturating_sub(1) * self.g.strides[d] + self.g.kernel[d];
            let pads = self.g.pads[d] + self.g.pads[n + d];
            if full < pads {
                return Err(Error::node(at, format!("pads {:?} exceed the unpooled size on axis {d}", self.g.pads)));
            }
            inferred.push(full - pads);
        }
        let total: usize = inferred.iter().product();
        let positions: Vec<usize> = util::to_i64(idx)?
            .into_iter()
            .map(|i| {
                usize::try_from(i)
                    .ok()
                    .filter(|&i| i < total)
                    .ok_or_else(|| Error::input(at, 1, format!("indices in 0..{total}"), i.to_string()))
            })
            .collect::<Result<_>>()?;
        let target = match out_shape {
            Some(o) if o.len() == inferred.len() && o.iter().zip(&inferred).all(|(a, b)| a >= b) => o,
            Some(o) => {
                return Err(Error::input(
                    at,
                    2,
                    format!("an output_shape of rank {} at least {inferred:?}", inferred.len()),
                    format!("{o:?}"),
                ))
            }
            None => inferred.clone(),
        };
        let dtype = x.dtype();
        let bytes = x.bytes()?;
        let shift = vec![0isize; target.len()];
        let out: Vec<u8> = crate::dispatch_by_size!(dtype, T => {
            let src: &[T] = bytemuck::try_cast_slice(bytes).map_err(|e| Error::node(at, e.to_string()))?;
            let mut y = vec![T::default(); total];
            positions.iter().zip(src).for_each(|(&p, &v)| y[p] = v);
            bytemuck::cast_slice(&shifted_copy(&y, &inferred, &target, &shift)).to_vec()
        }, _ => return Err(Error::input(at, 0, "a tensor of 1, 2, 4 or 8-byte elements", dtype.name())));
        onyx_core::Tensor::from_bytes(dtype, target, onyx_core::HostBuffer::from_vec(out)).map(Value::Tensor)
    }
}

impl Kernel for MaxUnpool {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let idx = util::input(inputs, 1, at)?;
        let out_shape = util::opt_input(inputs, 2, at)?.map(|t| sizes(&t, 2, "output_shape", at)).transpose()?;
        Ok(vec![self.compute(&x, &idx, out_shape).map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests;
