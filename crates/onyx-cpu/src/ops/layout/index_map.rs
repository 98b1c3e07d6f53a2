//! Gathering through per-axis index maps: output index `o` along axis `d` reads input index
//! `maps[d][o]`, or the fill value where that is `None`. Slice, Pad, Tile and nearest Resize
//! are all this one loop; runs of consecutive input indices along the last axis become block
//! copies.

use rayon::prelude::*;

use super::elems::{self, Elem};
use onyx_core::{Location, Result};

/// A piece of an output row: a copy of `len` input elements from `src`, `len` copies of the
/// element at `src`, or `len` fill values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Segment {
    Copy { src: usize, len: usize },
    Repeat { src: usize, len: usize },
    Fill { len: usize },
}

/// Splits the last axis' map into maximal copies, repeats and fills.
fn segments(map: &[Option<usize>]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for &m in map {
        match (out.last_mut(), m) {
            (Some(seg @ Segment::Copy { len: 1, .. }), Some(s)) if matches!(*seg, Segment::Copy { src, .. } if src == s) =>
            {
                *seg = Segment::Repeat { src: s, len: 2 };
            }
            (Some(Segment::Copy { src, len }), Some(s)) if *src + *len == s => *len += 1,
            (Some(Segment::Repeat { src, len }), Some(s)) if *src == s => *len += 1,
            (Some(Segment::Fill { len }), None) => *len += 1,
            (_, Some(s)) => out.push(Segment::Copy { src: s, len: 1 }),
            (_, None) => out.push(Segment::Fill { len: 1 }),
        }
    }
    out
}

/// The output of gathering `data` (of `shape`) through `maps` (one per axis, each as long as
/// the output along that axis; every `Some` index must be below the input dim).
pub(crate) fn gather_axes<T: Elem>(
    data: &[T],
    shape: &[usize],
    maps: &[Vec<Option<usize>>],
    fill: &T,
    at: &Location,
) -> Result<Vec<T>> {
    let out_shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    let n = elems::count(&out_shape, at)?;
    let mut out = elems::alloc::<T>(n, at)?;
    let Some((last, outer_maps)) = maps.split_last() else {
        // Rank 0: one element.
        if let (Some(o), Some(d)) = (out.first_mut(), data.first()) {
            *o = d.clone();
        }
        return Ok(out);
    };
    let row_len = last.len();
    if row_len == 0 || n == 0 {
        return Ok(out);
    }
    if data.is_empty() {
        // Nothing to read: every output position is a fill (maps into an empty input are all `None`).
        out.fill(fill.clone());
        return Ok(out);
    }
    let segs = segments(last);
    let strides = elems::strides(shape, at)?;
    let fill_row = |(row, dst): (usize, &mut [T])| {
        let mut rest = row;
        let mut base = Some(0usize);
        for (d, map) in outer_maps.iter().enumerate().rev() {
            let o = rest % map.len();
            rest /= map.len();
            base = match (base, map[o]) {
                (Some(b), Some(i)) => Some(b + i * strides[d]),
                _ => None,
            };
        }
        let Some(base) = base else {
            dst.fill(fill.clone());
            return;
        };
        let mut pos = 0;
        for seg in &segs {
            match *seg {
                Segment::Copy { src, len } => {
                    dst[pos..pos + len].clone_from_slice(&data[base + src..base + src + len]);
                    pos += len;
                }
                Segment::Repeat { src, len } => {
                    dst[pos..pos + len].fill(data[base + src].clone());
                    pos += len;
                }
                Segment::Fill { len } => {
                    dst[pos..pos + len].fill(fill.clone());
                    pos += len;
                }
            }
        }
    };
    if elems::parallel(n) {
        out.par_chunks_mut(row_len).enumerate().for_each(fill_row);
    } else {
        out.chunks_mut(row_len).enumerate().for_each(fill_row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_merge_runs() {
        let map = [Some(3), Some(4), None, None, Some(0), Some(2), Some(3), Some(3), Some(3), Some(1)];
        assert_eq!(
            segments(&map),
            vec![
                Segment::Copy { src: 3, len: 2 },
                Segment::Fill { len: 2 },
                Segment::Copy { src: 0, len: 1 },
                Segment::Copy { src: 2, len: 2 },
                Segment::Repeat { src: 3, len: 2 },
                Segment::Copy { src: 1, len: 1 }
            ]
        );
    }

    #[test]
    fn gathers_against_naive_loop() {
        let at = Location::default();
        let shape = [3usize, 5, 7];
        let data: Vec<u32> = (0..105).map(|i| i * 7 + 1).collect();
        let maps = vec![
            vec![Some(2), None, Some(0), Some(0)],
            vec![Some(4), Some(3), Some(1)],
            vec![None, Some(0), Some(1), Some(2), Some(6), None, Some(5), Some(5), Some(5), Some(4)],
        ];
        let got = gather_axes(&data, &shape, &maps, &9999, &at).unwrap();
        let mut want = Vec::new();
        for a in &maps[0] {
            for b in &maps[1] {
                for c in &maps[2] {
                    want.push(match (a, b, c) {
                        (Some(a), Some(b), Some(c)) => data[a * 35 + b * 7 + c],
                        _ => 9999,
                    });
                }
            }
        }
        assert_eq!(got, want);
        assert_eq!(gather_axes(&[5u8], &[], &[], &0, &at).unwrap(), vec![5]);
    }
}
