//! Window geometry shared by Conv, ConvTranspose and the pooling ops: decoding `kernel_shape`,
//! `strides`, `dilations`, `pads` and `auto_pad`, and resolving them against an input shape
//! into one [`Axis`] per spatial dimension.

use onyx_core::ir::Node;
use onyx_core::{Error, Location, Result};

/// Most spatial dimensions the kernels handle (they work on 3-D and pad 1-D and 2-D up).
pub(crate) const MAX_SPATIAL: usize = 3;

/// How padding is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Output size `ceil(in / stride)`; an odd total padding puts the extra cell at the end.
    SameUpper,
    /// Like `SameUpper`, with the extra cell at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    fn parse(s: &str, at: &Location) -> Result<Self> {
        match s {
            "NOTSET" | "" => Ok(AutoPad::NotSet),
            "SAME_UPPER" => Ok(AutoPad::SameUpper),
            "SAME_LOWER" => Ok(AutoPad::SameLower),
            "VALID" => Ok(AutoPad::Valid),
            other => {
                Err(Error::attribute(at, "auto_pad", "NOTSET, SAME_UPPER, SAME_LOWER or VALID", format!("'{other}'")))
            }
        }
    }

    fn is_same(self) -> bool {
        matches!(self, AutoPad::SameUpper | AutoPad::SameLower)
    }
}

/// One spatial axis of a sliding window, resolved against an input: output position `o` and
/// kernel tap `k` read input index `o * stride - pad_begin + k * dilation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Axis {
    /// Input size.
    pub input: usize,
    /// Kernel size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Dilation.
    pub dilation: usize,
    /// Padding before the first element (negative only for ConvTranspose with a large
    /// `output_shape`).
    pub pad_begin: isize,
    /// Padding after the last element.
    pub pad_end: isize,
    /// Output size.
    pub output: usize,
}

impl Axis {
    /// A size-1 axis that changes nothing: how 1-D and 2-D windows become 3-D.
    pub const UNIT: Axis = Axis { input: 1, kernel: 1, stride: 1, dilation: 1, pad_begin: 0, pad_end: 0, output: 1 };

    /// Input index read by output position `o` and kernel tap `k` (may be outside the input).
    pub fn input_index(&self, o: usize, k: usize) -> isize {
        (o * self.stride + k * self.dilation) as isize - self.pad_begin
    }

    /// The range `lo..hi` of output positions whose tap `k` reads inside the input.
    pub fn valid_outputs(&self, k: usize) -> (usize, usize) {
        // o * stride + shift must lie in 0..input.
        let shift = (k * self.dilation) as isize - self.pad_begin;
        let s = self.stride as isize;
        let lo = if shift >= 0 { 0 } else { (-shift + s - 1) / s };
        let end = self.input as isize - shift; // o * stride < end
        let hi = if end <= 0 { 0 } else { (end + s - 1) / s };
        let lo = (lo as usize).min(self.output);
        (lo, (hi as usize).clamp(lo, self.output))
    }

    /// Kernel extent with dilation.
    pub fn dilated_kernel(&self) -> usize {
        (self.kernel - 1) * self.dilation + 1
    }
}

/// Prepends unit axes so that there are exactly three.
pub(crate) fn to_3d(axes: &[Axis]) -> [Axis; 3] {
    let mut out = [Axis::UNIT; 3];
    let skip = MAX_SPATIAL.saturating_sub(axes.len());
    for (o, a) in out.iter_mut().skip(skip).zip(axes) {
        *o = *a;
    }
    out
}

/// The window attributes of a Conv, ConvTranspose or pooling node, decoded once.
#[derive(Clone, Debug)]
pub(crate) struct WindowAttrs {
    /// `kernel_shape`, if given.
    pub kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    /// `auto_pad`.
    pub auto_pad: AutoPad,
}

fn positive_list(node: &Node, name: &str, at: &Location) -> Result<Option<Vec<usize>>> {
    list(node, name, at, 1, "positive integers")
}

/// Largest value a window attribute may hold: keeps every size computation far from overflow.
pub(crate) const MAX_ATTR: i64 = i32::MAX as i64;

fn list(node: &Node, name: &str, at: &Location, min: i64, what: &str) -> Result<Option<Vec<usize>>> {
    match node.get_ints(name)? {
        None => Ok(None),
        Some(v) if v.iter().all(|&x| (min..=MAX_ATTR).contains(&x)) => {
            Ok(Some(v.iter().map(|&x| x as usize).collect()))
        }
        Some(v) => Err(Error::attribute(at, name, format!("{what} up to {MAX_ATTR}"), format!("{v:?}"))),
    }
}

impl WindowAttrs {
    /// Decodes and checks the attributes (signs only; lengths are checked against the input).
    pub fn from_node(node: &Node) -> Result<Self> {
        let at = node.location();
        Ok(WindowAttrs {
            kernel_shape: positive_list(node, "kernel_shape", &at)?,
            strides: positive_list(node, "strides", &at)?,
            dilations: positive_list(node, "dilations", &at)?,
            pads: list(node, "pads", &at, 0, "non-negative integers")?,
            auto_pad: AutoPad::parse(&node.string_or("auto_pad", "NOTSET")?, &at)?,
        })
    }

    fn per_axis(v: &Option<Vec<usize>>, name: &str, rank: usize, default: usize, at: &Location) -> Result<Vec<usize>> {
        match v {
            None => Ok(vec![default; rank]),
            Some(v) if v.len() == rank => Ok(v.clone()),
            Some(v) => {
                Err(Error::attribute(at, name, format!("{rank} values (one per spatial axis)"), format!("{v:?}")))
            }
        }
    }

    /// Explicit pads as (begin, end) per axis.
    fn explicit_pads(&self, rank: usize, at: &Location) -> Result<Vec<(usize, usize)>> {
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

    /// Strides and dilations per axis.
    pub fn strides_dilations(&self, rank: usize, at: &Location) -> Result<(Vec<usize>, Vec<usize>)> {
        Ok((
            Self::per_axis(&self.strides, "strides", rank, 1, at)?,
            Self::per_axis(&self.dilations, "dilations", rank, 1, at)?,
        ))
    }

    /// Resolves a Conv or pooling window over `input` (the full input shape, `[N, C, spatial...]`)
    /// with the given kernel; `ceil_mode` rounds output sizes up (pooling only).
    pub fn resolve(&self, input: &[usize], kernel: &[usize], ceil_mode: bool, at: &Location) -> Result<Vec<Axis>> {
        let spatial = input.get(2..).unwrap_or_default();
        let rank = spatial.len();
        if kernel.len() != rank {
            return Err(Error::input(
                at,
                0,
                format!("{} spatial dimensions like kernel {kernel:?}", kernel.len()),
                format!("shape {input:?}"),
            ));
        }
        let (strides, dilations) = self.strides_dilations(rank, at)?;
        let pads = self.explicit_pads(rank, at)?;
        (0..rank)
            .map(|i| {
                let axis = Axis {
                    input: spatial[i],
                    kernel: kernel[i],
                    stride: strides[i],
                    dilation: dilations[i],
                    pad_begin: 0,
                    pad_end: 0,
                    output: 0,
                };
                self.resolve_axis(axis, pads[i], ceil_mode).ok_or_else(|| {
                    Error::input(
                        at,
                        0,
                        format!(
                            "spatial axis {} of at least {} (kernel {} with dilation {}) after pads {}+{}",
                            i + 2,
                            (kernel[i] - 1) * dilations[i] + 1,
                            kernel[i],
                            dilations[i],
                            pads[i].0,
                            pads[i].1
                        ),
                        format!("shape {input:?}"),
                    )
                })
            })
            .collect()
    }

    /// Fills in pads and output size of one axis; `None` when the kernel does not fit.
    fn resolve_axis(&self, mut a: Axis, pads: (usize, usize), ceil_mode: bool) -> Option<Axis> {
        let eff = a.dilated_kernel();
        match self.auto_pad {
            AutoPad::NotSet => {
                let padded = a.input + pads.0 + pads.1;
                let span = padded.checked_sub(eff)?;
                let mut out = if ceil_mode { span.div_ceil(a.stride) } else { span / a.stride } + 1;
                // A last window that would start inside the end padding is dropped.
                if ceil_mode && (out - 1) * a.stride >= a.input + pads.0 {
                    out -= 1;
                }
                a.pad_begin = pads.0 as isize;
                a.pad_end = pads.1 as isize;
                a.output = out;
            }
            AutoPad::Valid => {
                a.output = a.input.checked_sub(eff)? / a.stride + 1;
            }
            AutoPad::SameUpper | AutoPad::SameLower => {
                a.output = a.input.div_ceil(a.stride);
                let total = ((a.output.max(1) - 1) * a.stride + eff).saturating_sub(a.input);
                let small = total / 2;
                let (begin, end) =
                    if self.auto_pad == AutoPad::SameUpper { (small, total - small) } else { (total - small, small) };
                a.pad_begin = begin as isize;
                a.pad_end = end as isize;
            }
        }
        Some(a)
    }

    /// Resolves a ConvTranspose window: `input` is X's full shape, `kernel` W's spatial dims;
    /// `output_padding` and `output_shape` are the node's attributes.
    pub fn resolve_transpose(
        &self,
        input: &[usize],
        kernel: &[usize],
        output_padding: &Option<Vec<usize>>,
        output_shape: &Option<Vec<usize>>,
        at: &Location,
    ) -> Result<Vec<Axis>> {
        let spatial = input.get(2..).unwrap_or_default();
        let rank = spatial.len();
        let (strides, dilations) = self.strides_dilations(rank, at)?;
        let pads = self.explicit_pads(rank, at)?;
        let out_pad = Self::per_axis(output_padding, "output_padding", rank, 0, at)?;
        let out_shape = match output_shape {
            // Some exporters include N and C; only the spatial tail matters.
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
        (0..rank)
            .map(|i| {
                let mut a = Axis {
                    input: spatial[i],
                    kernel: kernel[i],
                    stride: strides[i],
                    dilation: dilations[i],
                    pad_begin: 0,
                    pad_end: 0,
                    output: 0,
                };
                let full = a
                    .stride
                    .checked_mul(a.input.saturating_sub(1))
                    .and_then(|v| v.checked_add(out_pad[i] + a.dilated_kernel()))
                    .and_then(|v| isize::try_from(v).ok())
                    .ok_or_else(|| {
                        Error::input(at, 0, "a transposed output size that fits in memory", format!("shape {input:?}"))
                    })?;
                let target = match (&out_shape, self.auto_pad) {
                    (Some(s), _) => Some(s[i]),
                    (None, mode) if mode.is_same() => Some(a.input * a.stride),
                    _ => None,
                };
                match target {
                    Some(out) => {
                        // A negative total (output_shape past the full output) pads the end
                        // with zeros, as ONNX's reference does (floor division).
                        let total = full - out as isize;
                        let small = total.div_euclid(2);
                        let (b, e) = if self.auto_pad == AutoPad::SameUpper {
                            (small, total - small)
                        } else {
                            (total - small, small)
                        };
                        a.pad_begin = b;
                        a.pad_end = e;
                        a.output = out;
                    }
                    None => {
                        let (b, e) = if self.auto_pad == AutoPad::Valid { (0, 0) } else { pads[i] };
                        let out = full - (b + e) as isize;
                        if out <= 0 {
                            return Err(Error::input(
                                at,
                                0,
                                format!(
                                    "a spatial axis {} that gives a positive output size after pads {b}+{e}",
                                    i + 2
                                ),
                                format!("shape {input:?} (output size {out})"),
                            ));
                        }
                        a.pad_begin = b as isize;
                        a.pad_end = e as isize;
                        a.output = out as usize;
                    }
                }
                Ok(a)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(input: usize, kernel: usize, stride: usize, dilation: usize, pad_begin: isize, output: usize) -> Axis {
        Axis { input, kernel, stride, dilation, pad_begin, pad_end: 0, output }
    }

    #[test]
    fn valid_outputs_match_brute_force() {
        for input in 1..9 {
            for kernel in 1..4 {
                for stride in 1..4 {
                    for dilation in 1..3 {
                        for pad in -2..4isize {
                            let a = axis(input, kernel, stride, dilation, pad, 7);
                            for k in 0..kernel {
                                let valid: Vec<usize> =
                                    (0..7).filter(|&o| (0..input as isize).contains(&a.input_index(o, k))).collect();
                                let (lo, hi) = a.valid_outputs(k);
                                let want = valid.first().map_or((lo, lo), |&f| (f, valid.last().map_or(f, |l| l + 1)));
                                assert_eq!((lo, hi), want, "{a:?} k={k}");
                                assert_eq!(valid.len(), hi - lo, "{a:?} k={k} is contiguous");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn output_sizes_and_same_padding() {
        let attrs = |auto_pad: AutoPad, pads: Option<Vec<usize>>, strides: Vec<usize>| WindowAttrs {
            kernel_shape: None,
            strides: Some(strides),
            dilations: None,
            pads,
            auto_pad,
        };
        let at = Location::default();
        // (auto_pad, pads, stride, input, kernel, ceil) -> (pad_begin, pad_end, output)
        let cases = [
            (AutoPad::NotSet, Some(vec![1, 2]), 2, 7, 3, false, (1, 2, 4)),
            (AutoPad::NotSet, Some(vec![0, 0]), 2, 8, 3, false, (0, 0, 3)),
            (AutoPad::NotSet, Some(vec![0, 0]), 2, 8, 3, true, (0, 0, 4)),
            // ceil mode would start a window in the end padding: dropped.
            (AutoPad::NotSet, Some(vec![1, 1]), 2, 4, 2, true, (1, 1, 3)),
            (AutoPad::NotSet, Some(vec![1, 2]), 2, 3, 3, true, (1, 2, 2)),
            (AutoPad::Valid, None, 2, 8, 3, false, (0, 0, 3)),
            (AutoPad::SameUpper, None, 2, 7, 4, false, (1, 2, 4)),
            (AutoPad::SameLower, None, 2, 7, 4, false, (2, 1, 4)),
            (AutoPad::SameUpper, None, 1, 5, 3, false, (1, 1, 5)),
        ];
        for (mode, pads, stride, input, kernel, ceil, (pb, pe, out)) in cases {
            let a = attrs(mode, pads.clone(), vec![stride]);
            let got = a.resolve(&[1, 1, input], &[kernel], ceil, &at).unwrap();
            assert_eq!(
                (got[0].pad_begin, got[0].pad_end, got[0].output),
                (pb, pe, out),
                "{mode:?} {pads:?} s{stride} in{input} k{kernel} ceil={ceil}"
            );
        }
        let err = attrs(AutoPad::NotSet, Some(vec![0, 1]), vec![1]).resolve(&[1, 1, 2], &[5], false, &at).unwrap_err();
        assert!(
            err.to_string().contains("at least 5 (kernel 5 with dilation 1) after pads 0+1, found shape [1, 1, 2]"),
            "{err}"
        );
        let err =
            attrs(AutoPad::NotSet, Some(vec![0, 1, 1]), vec![1]).resolve(&[1, 1, 8], &[3], false, &at).unwrap_err();
        assert!(err.to_string().contains("'pads': expected 2 values"), "{err}");
    }
}
