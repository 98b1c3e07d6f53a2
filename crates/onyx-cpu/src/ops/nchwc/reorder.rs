//! `ai.onyx` ReorderInput (NCHW → blocked NCHWc, padding channels zero) and ReorderOutput
//! (blocked → NCHW, attribute `channels` = the real channel count): where a chain of NCHWc ops
//! starts and ends.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{Node, ONYX_DOMAIN};
use onyx_core::{host_pool, DataType, Error, Location, Result, Value};

use crate::ops::matmul::gemm::PARALLEL_WORK;
use crate::ops::util;
use crate::Registry;

/// Registers ReorderInput and ReorderOutput.
pub fn register(r: &mut Registry) {
    r.add_in(ONYX_DOMAIN, "ReorderInput", |ctx| Ok(Box::new(Reorder::new(ctx, Direction::ToBlocked)?)));
    r.add_in(ONYX_DOMAIN, "ReorderOutput", |ctx| Ok(Box::new(Reorder::new(ctx, Direction::ToNchw)?)));
}

/// Which way a reorder goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    ToBlocked,
    ToNchw,
}

/// A built ReorderInput or ReorderOutput node.
struct Reorder {
    at: Location,
    direction: Direction,
    block: usize,
    /// ReorderOutput's `channels`.
    channels: usize,
}

/// The `block` attribute of an NCHWc node (1 to 64).
pub(crate) fn block_attr(node: &Node) -> Result<usize> {
    let at = node.location();
    match node.get_int("block")? {
        Some(b) if (1..=64).contains(&b) => Ok(b as usize),
        Some(b) => Err(Error::attribute(&at, "block", "a block size from 1 to 64", b.to_string())),
        None => Err(Error::attribute(&at, "block", "a channel block size", "none")),
    }
}

impl Reorder {
    fn new(ctx: &NodeContext<'_>, direction: Direction) -> Result<Self> {
        let node = ctx.node;
        let at = node.location();
        let block = block_attr(node)?;
        let channels = match direction {
            Direction::ToBlocked => 0,
            Direction::ToNchw => match node.get_int("channels")? {
                Some(c) if c >= 1 => c as usize,
                other => {
                    return Err(Error::attribute(&at, "channels", "a positive channel count", format!("{other:?}")))
                }
            },
        };
        Ok(Reorder { at, direction, block, channels })
    }
}

impl Kernel for Reorder {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let (at, b) = (&self.at, self.block);
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float], 0, at)?;
        let xs = x.as_slice::<f32>()?;
        let y = match (self.direction, x.shape()) {
            (Direction::ToBlocked, &[n, c, h, w]) => {
                let shape = vec![n, c.div_ceil(b), h, w, b];
                onyx_core::element_count(&shape).map_err(|e| e.at(at))?;
                util::out(shape, to_blocked(xs, [n, c, h * w], b))?
            }
            (Direction::ToNchw, &[n, blocks, h, w, lanes])
                if lanes == b && blocks * b >= self.channels && (blocks - 1) * b < self.channels =>
            {
                util::out(vec![n, self.channels, h, w], to_nchw(xs, [n, self.channels, h * w], b))?
            }
            (Direction::ToBlocked, _) => {
                return Err(Error::input(at, 0, "an NCHW tensor of rank 4", format!("shape {:?}", x.shape())))
            }
            (Direction::ToNchw, _) => {
                return Err(Error::input(
                    at,
                    0,
                    format!(
                        "a blocked tensor [N, {}, H, W, {b}] ({} channels)",
                        self.channels.div_ceil(b),
                        self.channels
                    ),
                    format!("shape {:?}", x.shape()),
                ))
            }
        };
        Ok(vec![y])
    }
}

/// `x` (`[n, c, pixels]`) blocked: `[n, ceil(c/b), pixels, b]`, padding channels zero.
pub(crate) fn to_blocked(x: &[f32], [n, c, pixels]: [usize; 3], b: usize) -> Vec<f32> {
    let blocks = c.div_ceil(b);
    let mut y = host_pool::take::<f32>(n * blocks * pixels * b);
    let one = |(i, dst): (usize, &mut [f32])| {
        let (img, block) = (i / blocks, i % blocks);
        let lanes = b.min(c - block * b);
        let planes = &x[(img * c + block * b) * pixels..][..lanes * pixels];
        match (b, lanes) {
            (8, 8) => interleave::<8>(planes, dst, pixels),
            (16, 16) => interleave::<16>(planes, dst, pixels),
            _ => {
                for (lane, plane) in planes.chunks_exact(pixels).enumerate() {
                    dst[lane..].iter_mut().step_by(b).zip(plane).for_each(|(d, &v)| *d = v);
                }
                dst.chunks_exact_mut(b).for_each(|pixel| pixel[lanes..].fill(0.0));
            }
        }
    };
    let plane = (pixels * b).max(1);
    if y.len() >= PARALLEL_WORK {
        crate::parallel::for_each_chunk_mut(&mut y, plane, &|p, dst| one((p, dst)));
    } else {
        y.chunks_mut(plane).enumerate().for_each(one);
    }
    y
}

/// Blocked `x` (`[n, ceil(c/b), pixels, b]`) back to `[n, c, pixels]`.
pub(crate) fn to_nchw(x: &[f32], [n, c, pixels]: [usize; 3], b: usize) -> Vec<f32> {
    let mut y = host_pool::take::<f32>(n * c * pixels);
    let blocks = c.div_ceil(b);
    // Output block `block` of image `img`: its channel planes, split from X's block.
    let one = |img: usize, (block, dst): (usize, &mut [f32])| {
        let src = &x[(img * blocks + block) * pixels * b..][..pixels * b];
        match b {
            8 if dst.len() == 8 * pixels => split::<8>(src, dst, pixels),
            16 if dst.len() == 16 * pixels => split::<16>(src, dst, pixels),
            _ => {
                for (lane, plane) in dst.chunks_exact_mut(pixels).enumerate() {
                    plane.iter_mut().zip(src[lane..].iter().step_by(b)).for_each(|(d, &v)| *d = v);
                }
            }
        }
    };
    let (image, block) = ((c * pixels).max(1), (b * pixels).max(1));
    if y.len() >= PARALLEL_WORK {
        for (img, planes) in y.chunks_mut(image).enumerate() {
            crate::parallel::for_each_chunk_mut(planes, block, &|blk, dst| one(img, (blk, dst)));
        }
    } else {
        for (img, planes) in y.chunks_mut(image).enumerate() {
            planes.chunks_mut(block).enumerate().for_each(|dst| one(img, dst));
        }
    }
    y
}

/// Pixels per step of [`interleave`] and [`split`]: 4 x 4 transposes in vector registers.
const STEP: usize = 4;

/// [`to_blocked`] of one whole block: the `B` planes of `pixels` each into `dst`.
fn interleave<const B: usize>(planes: &[f32], dst: &mut [f32], pixels: usize) {
    let whole = pixels / STEP * STEP;
    for p in (0..whole).step_by(STEP) {
        for lane in (0..B).step_by(4) {
            transpose4(&planes[lane * pixels + p..], pixels, &mut dst[p * B + lane..], B);
        }
    }
    for p in whole..pixels {
        for lane in 0..B {
            dst[p * B + lane] = planes[lane * pixels + p];
        }
    }
}

/// [`to_nchw`] of one whole block: `src` (`pixels` x `B`) into the `B` planes of `dst`.
fn split<const B: usize>(src: &[f32], dst: &mut [f32], pixels: usize) {
    let whole = pixels / STEP * STEP;
    for p in (0..whole).step_by(STEP) {
        for lane in (0..B).step_by(4) {
            transpose4(&src[p * B + lane..], B, &mut dst[lane * pixels + p..], pixels);
        }
    }
    for p in whole..pixels {
        for lane in 0..B {
            dst[lane * pixels + p] = src[p * B + lane];
        }
    }
}

/// Writes the 4 x 4 matrix whose rows are `src[r * src_stride..][..4]` transposed: row `c` of
/// the result to `dst[c * dst_stride..][..4]`. In SSE registers on x86_64 (16 floats in 4
/// loads, 8 shuffles and 4 stores, where element by element took 32 scalar moves).
#[inline(always)]
fn transpose4(src: &[f32], src_stride: usize, dst: &mut [f32], dst_stride: usize) {
    assert!(src.len() >= 3 * src_stride + 4 && dst.len() >= 3 * dst_stride + 4, "a 4 x 4 transpose out of bounds");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_loadu_ps, _mm_movehl_ps, _mm_movelh_ps, _mm_storeu_ps, _mm_unpackhi_ps, _mm_unpacklo_ps,
        };
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: SSE is part of x86_64; the 4 rows of 4 floats read and written lie inside
        // `src` and `dst` (asserted above); unaligned loads and stores.
        unsafe {
            let r = [0, 1, 2, 3].map(|r| _mm_loadu_ps(s.add(r * src_stride)));
            let (lo01, lo23) = (_mm_unpacklo_ps(r[0], r[1]), _mm_unpacklo_ps(r[2], r[3]));
            let (hi01, hi23) = (_mm_unpackhi_ps(r[0], r[1]), _mm_unpackhi_ps(r[2], r[3]));
            _mm_storeu_ps(d, _mm_movelh_ps(lo01, lo23));
            _mm_storeu_ps(d.add(dst_stride), _mm_movehl_ps(lo23, lo01));
            _mm_storeu_ps(d.add(2 * dst_stride), _mm_movelh_ps(hi01, hi23));
            _mm_storeu_ps(d.add(3 * dst_stride), _mm_movehl_ps(hi23, hi01));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for r in 0..4 {
        for c in 0..4 {
            dst[c * dst_stride + r] = src[r * src_stride + c];
        }
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use super::*;
    use crate::ops::layout::testkit::rand_f32;
    use crate::ops::matmul::test_support::{build, node, run};

    #[test]
    fn blocked_and_back_is_the_identity_with_zero_padding() {
        // Planes of 143, 200 and 3000 pixels (8-pixel steps and the rest), partial blocks; the last
        // case big enough to run in parallel.
        for (shape, b) in [
            ([2, 5, 3, 7], 4),
            ([1, 16, 2, 2], 16),
            ([1, 3, 5, 1], 8),
            ([3, 20, 4, 4], 8),
            ([2, 11, 13, 11], 8),
            ([1, 40, 10, 20], 16),
            ([2, 13, 50, 60], 8),
        ] {
            let [n, c, h, w] = shape;
            let x = rand_f32(n * c * h * w, 7);
            let attrs = |extra: Vec<(&'static str, onyx_core::ir::AttrValue)>| {
                let mut a = vec![("block", onyx_core::ir::AttrValue::Int(b as i64))];
                a.extend(extra);
                a
            };
            let mut to = node("ReorderInput", &["x"], 1, attrs(vec![]));
            to.domain = ONYX_DOMAIN.into();
            let k = build(|ctx| Ok(Box::new(Reorder::new(ctx, Direction::ToBlocked)?)), &to, 1).unwrap();
            let blocked = run(k.as_ref(), &[Some(Tensor::from_vec(shape.to_vec(), x.clone()).unwrap())], 1).unwrap();
            let blocked = blocked[0].as_tensor().unwrap().clone();
            let cb = c.div_ceil(b);
            assert_eq!(blocked.shape(), [n, cb, h, w, b]);
            let bs = blocked.as_slice::<f32>().unwrap();
            // Element (n, ch, y, x) at [n][ch / b][y][x][ch % b]; padding zero.
            for img in 0..n {
                for ch in 0..cb * b {
                    for p in 0..h * w {
                        let got = bs[((img * cb + ch / b) * h * w + p) * b + ch % b];
                        let want = if ch < c { x[(img * c + ch) * h * w + p] } else { 0.0 };
                        assert_eq!(got, want);
                    }
                }
            }
            let mut back =
                node("ReorderOutput", &["x"], 1, attrs(vec![("channels", onyx_core::ir::AttrValue::Int(c as i64))]));
            back.domain = ONYX_DOMAIN.into();
            let k = build(|ctx| Ok(Box::new(Reorder::new(ctx, Direction::ToNchw)?)), &back, 1).unwrap();
            let y = run(k.as_ref(), &[Some(blocked.clone())], 1).unwrap();
            assert_eq!(y[0].as_tensor().unwrap().shape(), shape);
            assert_eq!(y[0].as_tensor().unwrap().as_slice::<f32>().unwrap(), x.as_slice());
            // A channel count the blocks cannot hold is an error naming both.
            let mut wrong = back.clone();
            wrong.attributes[1].value = onyx_core::ir::AttrValue::Int((cb * b + 1) as i64);
            let k = build(|ctx| Ok(Box::new(Reorder::new(ctx, Direction::ToNchw)?)), &wrong, 1).unwrap();
            let e = run(k.as_ref(), &[Some(blocked)], 1).unwrap_err().to_string();
            assert!(e.contains(&format!("{} channels", cb * b + 1)) && e.contains("shape"), "{e}");
        }
    }
}
