//! Convolution windows: the attributes (kernel, strides, dilations, pads, auto_pad, and
//! ConvTranspose's output padding and shape) resolved against an input into per-axis geometry.

use onyx_core::ir::Node;
use onyx_core::{Error, Location, Result};

use crate::kernel::u32_of;

/// Most spatial dimensions the kernels handle.
pub(super) const MAX_SPATIAL: usize = 3;

/// Largest value a window attribute may hold (as the CPU EP).
pub(super) const MAX_ATTR: i64 = i32::MAX as i64;

/// Which of the two ops a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Conv,
    Transpose,
}

/// How padding is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// One spatial axis resolved against an input: output position `o` and tap `k` read input
/// index `o * stride - pad + k * dilation` (for ConvTranspose: input `i` and tap `k` write
/// output `i * stride - pad + k * dilation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Axis {
    pub(super) input: usize,
    pub(super) kernel: usize,
    pub(super) stride: usize,
    pub(super) dilation: usize,
    /// Padding before the first element (negative for ConvTranspose with a large output_shape).
    pub(super) pad: isize,
    pub(super) output: usize,
}

impl Axis {
    /// A size-1 axis that changes nothing.
    pub(super) const UNIT: Axis = Axis { input: 1, kernel: 1, stride: 1, dilation: 1, pad: 0, output: 1 };

    /// Kernel extent with dilation.
    pub(super) fn dilated_kernel(&self) -> usize {
        (self.kernel - 1) * self.dilation + 1
    }
}

/// The window attributes of a node, decoded once.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub(super) kernel_shape: Option<Vec<usize>>,
    pub(super) strides: Option<Vec<usize>>,
    pub(super) dilations: Option<Vec<usize>>,
    pub(super) pads: Option<Vec<usize>>,
    pub(super) auto_pad: AutoPad,
    /// ConvTranspose only.
    pub(super) output_padding: Option<Vec<usize>>,
    /// ConvTranspose only.
    pub(super) output_shape: Option<Vec<usize>>,
}

/// An INTS attribute whose values lie in `min..=MAX_ATTR`.
pub(super) fn ints_attr(node: &Node, name: &str, min: i64, at: &Location) -> Result<Option<Vec<usize>>> {
    match node.get_ints(name)? {
        None => Ok(None),
        Some(v) if v.iter().all(|&x| (min..=MAX_ATTR).contains(&x)) => {
            Ok(Some(v.iter().map(|&x| x as usize).collect()))
        }
        Some(v) => Err(Error::attribute(at, name, format!("integers from {min} to {MAX_ATTR}"), format!("{v:?}"))),
    }
}

/// A per-axis attribute, `default` on every axis when absent.
pub(super) fn per_axis(
    v: &Option<Vec<usize>>,
    name: &str,
    rank: usize,
    default: usize,
    at: &Location,
) -> Result<Vec<usize>> {
    match v {
        None => Ok(vec![default; rank]),
        Some(v) if v.len() == rank => Ok(v.clone()),
        Some(v) => Err(Error::attribute(at, name, format!("{rank} values (one per spatial axis)"), format!("{v:?}"))),
    }
}

impl Window {
    pub(super) fn from_node(node: &Node, kind: Kind) -> Result<Window> {
        let at = node.location();
        let auto_pad = match node.string_or("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(Error::attribute(
                    &at,
                    "auto_pad",
                    "NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                    format!("'{other}'"),
                ))
            }
        };
        let transpose = |name: &str| if kind == Kind::Transpose { ints_attr(node, name, 0, &at) } else { Ok(None) };
        Ok(Window {
            kernel_shape: ints_attr(node, "kernel_shape", 1, &at)?,
            strides: ints_attr(node, "strides", 1, &at)?,
            dilations: ints_attr(node, "dilations", 1, &at)?,
            pads: ints_attr(node, "pads", 0, &at)?,
            auto_pad,
            output_padding: transpose("output_padding")?,
            output_shape: transpose("output_shape")?,
        })
    }

    /// Explicit pads as (begin, end) per axis.
    pub(super) fn explicit_pads(&self, rank: usize, at: &Location) -> Result<Vec<(usize, usize)>> {
        match &self.pads {
            None => Ok(vec![(0, 0); rank]),
            Some(p) if p.len() == 2 * rank => Ok((0..rank).map(|i| (p[i], p[i + rank])).collect()),
            Some(p) => Err(Error::attribute(
                at,
                "pads",
                format!("{} values (begin and end per spatial axis)", 2 * rank),
                format!("{p:?}"),
            )),
        }
    }

    /// Unresolved axes (strides, dilations, kernel) over the spatial dims of `x`.
    pub(super) fn axes(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let rank = kernel.len();
        let strides = per_axis(&self.strides, "strides", rank, 1, at)?;
        let dilations = per_axis(&self.dilations, "dilations", rank, 1, at)?;
        Ok((0..rank)
            .map(|i| Axis {
                input: x[i + 2],
                kernel: kernel[i],
                stride: strides[i],
                dilation: dilations[i],
                pad: 0,
                output: 0,
            })
            .collect())
    }

    /// Resolves a Conv window over `x` (`[N, C, spatial...]`) with the given kernel.
    pub(super) fn resolve(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let pads = self.explicit_pads(kernel.len(), at)?;
        let mut axes = self.axes(x, kernel, at)?;
        for (i, a) in axes.iter_mut().enumerate() {
            let eff = a.dilated_kernel();
            let too_small = || {
                Error::input(
                    at,
                    0,
                    format!(
                        "spatial axis {} of at least {eff} (kernel {} with dilation {}) after pads {}+{}",
                        i + 2,
                        a.kernel,
                        a.dilation,
                        pads[i].0,
                        pads[i].1
                    ),
                    format!("shape {x:?}"),
                )
            };
            match self.auto_pad {
                AutoPad::NotSet => {
                    let span = (a.input + pads[i].0 + pads[i].1).checked_sub(eff).ok_or_else(too_small)?;
                    a.pad = pads[i].0 as isize;
                    a.output = span / a.stride + 1;
                }
                AutoPad::Valid => a.output = a.input.checked_sub(eff).ok_or_else(too_small)? / a.stride + 1,
                AutoPad::SameUpper | AutoPad::SameLower => {
                    a.output = a.input.div_ceil(a.stride);
                    let total = ((a.output.max(1) - 1) * a.stride + eff).saturating_sub(a.input);
                    a.pad = if self.auto_pad == AutoPad::SameUpper { total / 2 } else { total - total / 2 } as isize;
                }
            }
        }
        Ok(axes)
    }

    /// Resolves a ConvTranspose window: `x` is X's shape, `kernel` W's spatial dims.
    pub(super) fn resolve_transpose(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let rank = kernel.len();
        let pads = self.explicit_pads(rank, at)?;
        let out_pad = per_axis(&self.output_padding, "output_padding", rank, 0, at)?;
        let out_shape = match &self.output_shape {
            Some(s) if s.len() == rank + 2 => Some(s[2..].to_vec()),
            Some(s) if s.len() == rank => Some(s.clone()),
            Some(s) => {
                return Err(Error::attribute(
                    at,
                    "output_shape",
                    format!("{rank} values (one per spatial axis)"),
                    format!("{s:?}"),
                ))
            }
            None => None,
        };
        let mut axes = self.axes(x, kernel, at)?;
        for (i, a) in axes.iter_mut().enumerate() {
            let full = a
                .stride
                .checked_mul(a.input.saturating_sub(1))
                .and_then(|v| v.checked_add(out_pad[i] + a.dilated_kernel()))
                .and_then(|v| isize::try_from(v).ok())
                .ok_or_else(|| {
                    Error::input(at, 0, "a transposed output size that fits in memory", format!("shape {x:?}"))
                })?;
            let same = matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
            let target = match &out_shape {
                Some(s) => Some(s[i]),
                None if same => Some(a.input * a.stride),
                None => None,
            };
            if let Some(out) = target {
                // A negative total (output_shape past the full output) pads the end with
                // zeros, as ONNX's reference (and the CPU EP) does: floor division.
                let total = full - out as isize;
                let small = total.div_euclid(2);
                a.pad = if self.auto_pad == AutoPad::SameUpper { small } else { total - small };
                a.output = out;
            } else {
                let (b, e) = if self.auto_pad == AutoPad::Valid { (0, 0) } else { pads[i] };
                let out = full - (b + e) as isize;
                if out <= 0 {
                    return Err(Error::input(
                        at,
                        0,
                        format!("a spatial axis {} that gives a positive output size after pads {b}+{e}", i + 2),
                        format!("shape {x:?} (output size {out})"),
                    ));
                }
                a.pad = b as isize;
                a.output = out as usize;
            }
        }
        Ok(axes)
    }
}

/// Sizes of a convolution on 3-D windows.
#[derive(Clone, Debug)]
pub(super) struct ConvShape {
    pub(super) batch: usize,
    pub(super) c_in: usize,
    pub(super) c_out: usize,
    pub(super) group: usize,
    /// Depth, height and width.
    pub(super) axes: [Axis; 3],
}

impl ConvShape {
    pub(super) fn out_len(&self) -> usize {
        self.axes.iter().map(|a| a.output).product()
    }

    pub(super) fn k_len(&self) -> usize {
        self.axes.iter().map(|a| a.kernel).product()
    }

    /// Input channels per group.
    pub(super) fn cg(&self) -> usize {
        self.c_in / self.group
    }

    /// Output channels per group.
    pub(super) fn mg(&self) -> usize {
        self.c_out / self.group
    }

    /// The implicit GEMM's sizes for the tiled kernel: M, N, K and groups.
    pub(super) fn gemm_sizes(&self) -> [usize; 4] {
        [self.mg(), self.batch * self.out_len(), self.cg() * self.k_len(), self.group]
    }

    /// The kernel's taps along depth, height and width.
    pub(super) fn kernel(&self) -> [usize; 3] {
        self.axes.map(|a| a.kernel)
    }

    /// Whether the depth axis changes nothing (as in every 1-D and 2-D convolution): one input
    /// and output position, a kernel of 1, no padding; its stride and dilation then never
    /// move a tap.
    pub(super) fn planar(&self) -> bool {
        let d = self.axes[0];
        (d.input, d.output, d.kernel, d.pad) == (1, 1, 1, 0)
    }

    /// Shader params: M, N, K, first z, the tiled kernel's split-K params (set when it
    /// records), channels, then per axis input and output sizes,
    /// strides, dilations, pads.
    pub(super) fn params(&self, first: usize, at: &Location) -> Result<Vec<u32>> {
        let mut p = vec![];
        let sizes = [
            first,
            self.batch * self.out_len(),
            self.cg() * self.k_len(),
            0,
            0,
            0,
            0,
            0,
            self.c_in,
            self.cg(),
            self.c_out,
            self.mg(),
        ];
        for v in sizes.into_iter().chain(self.axes.map(|a| a.input)).chain(self.axes.map(|a| a.output)) {
            p.push(u32_of(v, at)?);
        }
        for v in self.axes.map(|a| a.stride).into_iter().chain(self.axes.map(|a| a.dilation)) {
            p.push(u32_of(v, at)?);
        }
        for a in self.axes {
            let pad = i32::try_from(a.pad)
                .map_err(|_| Error::node(at, format!("padding {} exceeds what the GPU kernels index", a.pad)))?;
            p.push(pad as u32);
        }
        Ok(p)
    }
}

/// Prepends unit axes so that there are exactly three.
pub(super) fn to_3d(axes: &[Axis]) -> [Axis; 3] {
    let mut out = [Axis::UNIT; 3];
    for (o, a) in out.iter_mut().skip(MAX_SPATIAL - axes.len()).zip(axes) {
        *o = *a;
    }
    out
}
