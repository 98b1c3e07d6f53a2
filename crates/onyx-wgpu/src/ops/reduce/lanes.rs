//! How a reduction's rows map onto a workgroup's threads and onto memory: the kept and reduced
//! dims of a shape ([`Split`]), the lane layouts that share rows out among 256 threads
//! ([`Lanes`]), whether rows are flat in memory ([`Layout`]), and a kernel's pipelines, one per
//! layout ([`LanePipelines`], also for the row normalizations of `norm.rs`).

use std::sync::{Arc, OnceLock};

use onyx_core::{Location, Result};

use crate::context::{GpuContext, Pipeline};
use crate::kernel::{strides, u32_of};

/// How the 256 threads of a workgroup share out rows (the runs of elements reduced into one
/// output): `w` rows per workgroup, `s` threads per row, each taking every `s`-th element.
/// With `slices_fast` the threads of one row are adjacent (contiguous rows coalesce); otherwise
/// the rows are (strided rows, whose neighbours are adjacent in memory, coalesce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lanes {
    /// Rows per workgroup.
    pub w: u32,
    /// Threads per row.
    pub s: u32,
    /// Whether the threads of one row have adjacent thread indices.
    pub slices_fast: bool,
}

/// One workgroup per row: long contiguous rows.
pub(crate) const ROW: Lanes = Lanes { w: 1, s: 256, slices_fast: true };
/// Eight rows per workgroup, 32 threads each: contiguous rows of moderate length.
pub(crate) const SHORT_ROWS: Lanes = Lanes { w: 8, s: 32, slices_fast: true };
/// 32 neighbouring strided rows per workgroup, 8 threads each: few, long strided rows.
pub(crate) const COLUMNS: Lanes = Lanes { w: 32, s: 8, slices_fast: false };
/// One thread per row: short rows, or many strided ones.
pub(crate) const THREAD: Lanes = Lanes { w: 256, s: 1, slices_fast: false };
/// Every lane layout; a kernel makes one pipeline for each and picks one per shape.
pub(crate) const ALL_LANES: [Lanes; 4] = [ROW, SHORT_ROWS, COLUMNS, THREAD];

/// Most workgroups one dispatch dimension takes (WebGPU's default limit).
const MAX_GROUPS_X: usize = 65535;

impl Lanes {
    /// The layout for `rows` rows of `len` elements each, whose elements are adjacent in memory
    /// (`contiguous`) or whose neighbouring rows are.
    pub fn choose(rows: usize, len: usize, contiguous: bool) -> Lanes {
        if contiguous {
            match len {
                512.. => ROW,
                16.. => SHORT_ROWS,
                _ => THREAD,
            }
        } else if len < 32 || rows >= 65536 {
            THREAD
        } else {
            COLUMNS
        }
    }

    /// A short name for pipeline keys.
    pub fn key(&self) -> String {
        format!("w{}s{}{}", self.w, self.s, if self.slices_fast { "s" } else { "c" })
    }

    /// The index of `self` in [`ALL_LANES`].
    pub fn index(&self) -> usize {
        ALL_LANES.iter().position(|l| l == self).unwrap_or(0)
    }

    /// Workgroups for `rows` rows, spread over x and y (shaders read the workgroup number with
    /// `workgroup_index`).
    pub fn groups(&self, rows: usize) -> [u32; 3] {
        let groups = rows.div_ceil(self.w as usize);
        let x = groups.min(MAX_GROUPS_X);
        let y = groups.div_ceil(x.max(1));
        [x as u32, y as u32, 1]
    }

    /// WGSL of the layout: constants `LW` and `LS`, `lane_row(t)` and `lane_slice(t)` (row within
    /// the workgroup and first element of thread `t`), `workgroup_index`, and
    /// `combine_slices(t, a)`, which combines the partial values `a` of a row's threads with
    /// `comb` over an accumulator type `Acc` (both defined by the shader) and returns the
    /// result to every thread. Call it from uniform control flow.
    pub fn wgsl(&self) -> String {
        let (row, slice, step, first) = if self.slices_fast {
            ("t / LS", "t % LS", "1u", "lane_row(t) * LS")
        } else {
            ("t % LW", "t / LW", "LW", "lane_row(t)")
        };
        format!(
            "
const LW: u32 = {w}u;
const LS: u32 = {s}u;
fn lane_row(t: u32) -> u32 {{ return {row}; }}
fn lane_slice(t: u32) -> u32 {{ return {slice}; }}
fn workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {{ return wid.x + wid.y * nwg.x; }}
var<workgroup> red: array<Acc, 256>;
fn combine_slices(t: u32, a: Acc) -> Acc {{
    if (LS == 1u) {{ return a; }}
    red[t] = a;
    workgroupBarrier();
    for (var h = LS / 2u; h > 0u; h = h / 2u) {{
        if (lane_slice(t) < h) {{ red[t] = comb(red[t], red[t + h * {step}]); }}
        workgroupBarrier();
    }}
    let r = red[{first}];
    workgroupBarrier();
    return r;
}}
",
            w = self.w,
            s = self.s,
        )
    }
}

/// A tensor's dims split into kept and reduced ones as (size, stride) pairs: size-1 dims
/// dropped, adjacent dims of one kind merged.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Split {
    /// Kept dims, outermost first.
    pub kept: Vec<(usize, usize)>,
    /// Reduced dims, outermost first.
    pub reduced: Vec<(usize, usize)>,
}

impl Split {
    /// Splits `shape` by `mask` (true: reduced).
    pub fn new(shape: &[usize], mask: &[bool]) -> Split {
        let st = strides(shape);
        let mut split = Split::default();
        let mut last: Option<bool> = None;
        for d in 0..shape.len() {
            if shape[d] == 1 {
                continue;
            }
            let list = if mask[d] { &mut split.reduced } else { &mut split.kept };
            match list.last_mut() {
                Some(prev) if last == Some(mask[d]) => *prev = (prev.0 * shape[d], st[d]),
                _ => list.push((shape[d], st[d])),
            }
            last = Some(mask[d]);
        }
        split
    }

    /// Number of outputs (product of the kept dims).
    pub fn outputs(&self) -> usize {
        self.kept.iter().map(|d| d.0).product()
    }

    /// Elements reduced into each output.
    pub fn len(&self) -> usize {
        self.reduced.iter().map(|d| d.0).product()
    }

    /// Whether consecutive elements of a row are adjacent in memory.
    pub fn contiguous(&self) -> bool {
        self.reduced.last().is_none_or(|d| d.1 == 1)
    }

    /// The lane layout for this split.
    pub fn lanes(&self) -> Lanes {
        Lanes::choose(self.outputs(), self.len(), self.contiguous())
    }

    /// Whether row `q` is elements `q * len..(q + 1) * len`: one contiguous reduced dim, the
    /// kept ones (merged into one) right above it. GlobalAveragePool and reductions over the
    /// last axes are.
    pub fn flat(&self) -> bool {
        let len = self.len();
        let kept_ok = match self.kept.as_slice() {
            [] => true,
            [(_, stride)] => *stride == len,
            _ => false,
        };
        kept_ok && matches!(self.reduced.as_slice(), [] | [(_, 1)])
    }

    /// The pipeline this split uses.
    pub fn layout(&self) -> Layout {
        Layout { lanes: self.lanes(), flat: self.flat() }
    }

    /// Shader parameters: outputs, row length, kept rank, reduced rank, `extra`, then the kept
    /// dims and strides and the reduced dims and strides (see [`OFFSETS_WGSL`]).
    pub fn params(&self, extra: u32, at: &Location) -> Result<Vec<u32>> {
        let mut p = vec![
            u32_of(self.outputs(), at)?,
            u32_of(self.len(), at)?,
            self.kept.len() as u32,
            self.reduced.len() as u32,
            extra,
        ];
        for list in [&self.kept, &self.reduced] {
            for &(d, _) in list.iter() {
                p.push(u32_of(d, at)?);
            }
            for &(_, s) in list.iter() {
                p.push(u32_of(s, at)?);
            }
        }
        Ok(p)
    }
}

/// A reduction kernel's pipeline for one shape class: its lane layout, and whether its rows are
/// flat in memory (see [`Split::flat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub lanes: Lanes,
    pub flat: bool,
}

/// The layout of an input of `dims` (`None`: unknown until a run) reduced over the dims marked
/// in `mask`, when the session can tell: every dim known, or reduced dims that are the last
/// ones and known (contiguous rows of a known length, flat whatever the leading dims, such as
/// a dynamic batch and sequence).
pub(crate) fn known_layout(dims: &[Option<usize>], mask: &[bool]) -> Option<Layout> {
    if let Some(shape) = dims.iter().copied().collect::<Option<Vec<usize>>>() {
        return Some(Split::new(&shape, mask).layout());
    }
    let first_reduced = mask.iter().position(|&m| m).unwrap_or(mask.len());
    if !mask[first_reduced..].iter().all(|&m| m) {
        return None;
    }
    let len: usize = dims[first_reduced..].iter().copied().product::<Option<usize>>()?;
    Some(Layout { lanes: Lanes::choose(1, len, true), flat: true })
}

/// WGSL of `kept_offset(q)` and `reduced_offset(k)` for flat rows (see [`Split::flat`]): no
/// index arithmetic, and a shader the driver compiles in about half the time of
/// [`OFFSETS_WGSL`]'s (resnet50's GlobalAveragePool on a cold NVIDIA driver: 16 ms against 30).
const FLAT_OFFSETS_WGSL: &str = "
fn kept_offset(q: u32) -> u32 { return q * p[1]; }
fn reduced_offset(k: u32) -> u32 { return k; }
";

/// WGSL turning an output number and an element number of its row into element offsets, for
/// the parameters of [`Split::params`].
const OFFSETS_WGSL: &str = "
fn kept_offset(q: u32) -> u32 {
    let kr = p[2];
    var rem = q;
    var off = 0u;
    for (var d = kr; d > 0u; d--) {
        let dim = p[4u + d];
        off += (rem % dim) * p[4u + kr + d];
        rem = rem / dim;
    }
    return off;
}
fn reduced_offset(k: u32) -> u32 {
    let rr = p[3];
    let at = 4u + 2u * p[2];
    if (rr == 1u) { return k * p[at + 2u]; }
    var rem = k;
    var off = 0u;
    for (var d = rr; d > 0u; d--) {
        let dim = p[at + d];
        off += (rem % dim) * p[at + rr + d];
        rem = rem / dim;
    }
    return off;
}
";

/// A kernel's pipelines, one per layout, each made when first needed: the one for the shape
/// known when the session is built (when the shape is unknown, the strided one of every lane
/// layout), any other at the first run whose shape needs it. Flat rows are a fast path: a run
/// takes the strided pipeline of its lane layout when the flat one was not made.
pub(crate) struct LanePipelines {
    /// The pipelines' key without the layout.
    key: String,
    /// The shader of a lane layout, without `kept_offset` and `reduced_offset` (added here
    /// unless `own_rows`).
    shader: Box<dyn Fn(Lanes) -> String + Send + Sync>,
    /// Whether the shaders address contiguous rows themselves (see [`LanePipelines::rows`]).
    own_rows: bool,
    /// Strided pipelines, then flat ones, each in [`ALL_LANES`]' order.
    made: [OnceLock<Arc<Pipeline>>; 2 * ALL_LANES.len()],
}

impl LanePipelines {
    /// The pipelines `key`/layout of `shader`; the one of `known` is made now (when `None`,
    /// the strided one of every lane layout).
    pub fn new(
        gpu: &GpuContext,
        key: String,
        shader: impl Fn(Lanes) -> String + Send + Sync + 'static,
        known: Option<Layout>,
    ) -> Result<LanePipelines> {
        Self::build(gpu, key, Box::new(shader), false, known)
    }

    /// The pipelines of a kernel that reads contiguous rows on its own (no offsets added, never
    /// flat); the one of the lane layout `known` is made now (every layout when `None`).
    pub fn rows(
        gpu: &GpuContext,
        key: String,
        shader: impl Fn(Lanes) -> String + Send + Sync + 'static,
        known: Option<Lanes>,
    ) -> Result<LanePipelines> {
        Self::build(gpu, key, Box::new(shader), true, known.map(|lanes| Layout { lanes, flat: false }))
    }

    /// The pipelines, with that of `known` made (or the strided one of every lane layout).
    fn build(
        gpu: &GpuContext,
        key: String,
        shader: Box<dyn Fn(Lanes) -> String + Send + Sync>,
        own_rows: bool,
        known: Option<Layout>,
    ) -> Result<LanePipelines> {
        let pipelines = LanePipelines { key, shader, own_rows, made: Default::default() };
        match known {
            Some(layout) => drop(pipelines.make(gpu, layout)?),
            None => {
                for lanes in ALL_LANES {
                    pipelines.make(gpu, Layout { lanes, flat: false })?;
                }
            }
        }
        Ok(pipelines)
    }

    /// How many pipelines have been made so far.
    #[cfg(test)]
    pub(crate) fn made(&self) -> usize {
        self.made.iter().filter(|p| p.get().is_some()).count()
    }

    /// The pipeline for a shape of `layout`: its own if made, the strided one of its lane
    /// layout otherwise (made, or reused from the context, the first time).
    pub fn get(&self, gpu: &GpuContext, layout: Layout) -> Result<&Arc<Pipeline>> {
        match self.made[Self::slot(layout)].get() {
            Some(p) => Ok(p),
            None => self.make(gpu, Layout { flat: false, ..layout }),
        }
    }

    fn slot(layout: Layout) -> usize {
        layout.lanes.index() + if layout.flat { ALL_LANES.len() } else { 0 }
    }

    fn make(&self, gpu: &GpuContext, layout: Layout) -> Result<&Arc<Pipeline>> {
        let slot = &self.made[Self::slot(layout)];
        if let Some(p) = slot.get() {
            return Ok(p);
        }
        let (offsets, flat) = match (self.own_rows, layout.flat) {
            (true, _) => ("", ""),
            (false, true) => (FLAT_OFFSETS_WGSL, "/flat"),
            (false, false) => (OFFSETS_WGSL, ""),
        };
        let key = format!("{}/{}{flat}", self.key, layout.lanes.key());
        let p = gpu.pipeline(&key, || (self.shader)(layout.lanes) + offsets)?;
        Ok(slot.get_or_init(|| p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_merge_adjacent_dims() {
        let s = Split::new(&[2, 3, 1, 4, 5], &[false, true, true, true, false]);
        assert_eq!(s.kept, vec![(2, 60), (5, 1)]);
        assert_eq!(s.reduced, vec![(12, 5)]);
        assert!(!s.contiguous());
        let s = Split::new(&[2, 3, 4], &[true, false, true]);
        assert_eq!((s.kept.clone(), s.reduced.clone()), (vec![(3, 4)], vec![(2, 12), (4, 1)]));
        assert!(s.contiguous());
        assert_eq!((s.outputs(), s.len()), (3, 8));
    }

    #[test]
    fn layouts_known_from_partial_shapes_match_the_full_ones() {
        let (n, len) = (Some(3), Some(700));
        // Trailing known dims reduced under a dynamic leading one: as for any batch.
        for batch in [1, 2, 70_000] {
            let full = Split::new(&[batch, 3, 700], &[false, false, true]).layout();
            assert_eq!(known_layout(&[None, n, len], &[false, false, true]), Some(full));
            let full = Split::new(&[batch, 3, 700], &[false, true, true]).layout();
            assert_eq!(known_layout(&[None, n, len], &[false, true, true]), Some(full));
        }
        assert_eq!(
            known_layout(&[Some(2), n, len], &[true, false, true]),
            Some(Split::new(&[2, 3, 700], &[true, false, true]).layout())
        );
        // A reduced dim unknown, or a kept dim after a reduced one, with some dim unknown.
        assert_eq!(known_layout(&[n, None], &[false, true]), None);
        assert_eq!(known_layout(&[None, n, len], &[false, true, false]), None);
    }

    #[test]
    fn flat_rows_are_contiguous_rows_one_after_another() {
        let flat = |shape: &[usize], mask: &[bool]| Split::new(shape, mask).flat();
        // GlobalAveragePool over NCHW, a reduction over the last axes, over everything.
        assert!(flat(&[2, 3, 4, 5], &[false, false, true, true]));
        assert!(flat(&[6, 7], &[false, true]));
        assert!(flat(&[6, 7], &[true, true]));
        // Size-1 dims do not matter; nothing reduced is flat with rows of one element.
        assert!(flat(&[6, 1, 7], &[false, false, true]));
        assert!(flat(&[6, 7], &[false, false]));
        // A strided row, rows between kept dims, or kept dims on both sides are not.
        assert!(!flat(&[6, 7], &[true, false]));
        assert!(!flat(&[2, 3, 4], &[true, false, true]));
        assert!(!flat(&[2, 3, 4], &[false, true, false]));
    }
}
