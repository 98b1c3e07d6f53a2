//! The tiled ("flash") Attention kernel: one workgroup per (batch, query head, block of query
//! rows). The block's queries sit in workgroup memory; key and value tiles are staged there
//! once and shared by all the block's rows; each row keeps a running maximum, sum and output
//! accumulators in registers (online softmax), so no score ever goes to global memory.
//!
//! Each query row has as many threads as a tile has keys: a thread computes its key's score
//! (a dot product over vec4s of workgroup memory, unrolled over the tile's head size), then its
//! key's weight, then the weighted sum for its share of the value columns. Many threads a row
//! keep enough warps on each multiprocessor to hide the latency of workgroup memory.
//!
//! It covers every feature of the row kernel except the `qk_matmul_output` output (which needs
//! the full score rows) and head sizes over [`MAX_HEAD`]; the caller keeps the row kernel for
//! those. Parameters are the row kernel's (see `mod.rs`), except that `P_ROWS` holds the number
//! of workgroups.

use super::{
    bindings, mask_code, P_3D, P_CAUSAL, P_DH, P_DV, P_KOFF, P_KROW, P_KV3D, P_KVH, P_PAST, P_QH, P_QOFF, P_QROW, P_QS,
    P_ROWS, P_SCALE, P_SOFTCAP, P_TOTAL, P_VOFF, P_VROW,
};

/// Largest head size (of Q/K and of V) the tiled kernel handles.
pub(super) const MAX_HEAD: usize = 128;

/// Threads of one workgroup: one per (row, key) of a tile. 256 (8 rows of 32 keys at head size
/// 64) ran vit_b_16's and bert's attention about 1.8x faster than 128 on an H200; more rows per
/// thread (fewer threads per row) ran slower.
const THREADS: usize = 256;

/// One shape of the tiled kernel, chosen by head size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tiling {
    /// Head size the workgroup arrays hold (>= both head sizes).
    pub dmax: usize,
    /// Query rows per workgroup.
    pub rows: usize,
    /// Keys per staged tile.
    pub keys: usize,
}

impl Tiling {
    /// The tiling for Q/K head size `dh` and V head size `dv`, if the tiled kernel takes them
    /// within `storage_limit` bytes of workgroup memory.
    pub fn choose(dh: usize, dv: usize, storage_limit: u32) -> Option<Tiling> {
        let d = dh.max(dv);
        let t = match d {
            0..=64 => Tiling { dmax: 64, rows: 8, keys: 32 },
            65..=MAX_HEAD => Tiling { dmax: MAX_HEAD, rows: 16, keys: 16 },
            _ => return None,
        };
        (t.storage_bytes() <= storage_limit as usize).then_some(t)
    }

    /// Elements of each workgroup array: queries and keys in vec4s (key rows padded by one
    /// vec4), then values and scores (and weights) in floats.
    fn arrays(self) -> [usize; 4] {
        let d4 = self.dmax / 4;
        [self.rows * d4, self.keys * (d4 + 1), self.keys * self.dmax, self.rows * self.keys]
    }

    /// Bytes of workgroup memory the kernel declares.
    pub fn storage_bytes(self) -> usize {
        let [q, k, v, s] = self.arrays();
        16 * (q + k) + 4 * (v + 2 * s)
    }

    /// A name for pipeline keys.
    pub fn name(self) -> String {
        format!("{}x{}x{}", self.dmax, self.rows, self.keys)
    }
}

/// The accumulator updates of one key, unrolled so that the accumulators stay in registers.
fn unrolled(n: usize, line: impl Fn(usize) -> String) -> String {
    (0..n).map(line).collect::<Vec<_>>().join("\n        ")
}

/// The register staging of the key and value tiles: (declarations, loads of the first tile,
/// loads of the next one, stores into workgroup memory).
fn staging(t: Tiling) -> (String, String, String, String) {
    let loads = t.keys * t.dmax / THREADS;
    let regs = unrolled(loads, |i| format!("var kx_{i} = 0.0; var vx_{i} = 0.0;"));
    let load = |j0: &str| {
        unrolled(loads, |i| {
            format!(
                "{{ let e = t + {}u; let c = e % D; let j = {j0} + e / D; kx_{i} = 0.0; vx_{i} = 0.0; if (j < total) {{ \
                 if (c < dh) {{ kx_{i} = f32(k[kbase + j * kstride + c]); }} if (c < dv) {{ vx_{i} = f32(v[vbase + j * vstride + c]); }} }} }}",
                i * THREADS
            )
        })
    };
    let stage = unrolled(loads, |i| {
        format!(
            "{{ let e = t + {}u; let jj = e / D; let c = e % D; kt[jj * KROW4 + c / 4u][c % 4u] = kx_{i}; vs[jj * D + c] = vx_{i}; }}",
            i * THREADS
        )
    });
    (regs, load("0u"), load("(j0 + BK)"), stage)
}

/// The tiled shader for element type `ty`, mask kind (0 none, 1 bool, 2 additive) and
/// whether `nonpad_kv_seqlen` is bound.
pub(super) fn flash_shader(ty: &str, enable: &str, mask: u32, nonpad: bool, t: Tiling) -> String {
    let binds = bindings(ty, mask, nonpad, &[format!("var<storage, read_write> y: array<{ty}>;")]);
    let masking = mask_code(mask);
    let nonpad_code = if nonpad { "end = min(end, valid[2u * b]); last = min(last, valid[2u * b]);" } else { "" };
    let [qn, kn, vn, sn] = t.arrays();
    let nv = t.dmax / t.keys;
    let rescale = unrolled(nv, |a| format!("acc[{a}] *= alpha;"));
    let d4 = t.dmax / 4;
    let dot = unrolled(d4, |c| format!("d4 += qt[qr + {c}u] * kt[kr + {c}u];"));
    let tile_max = unrolled(t.keys, |j| format!("tmax = max(tmax, ps[pr + {j}u]);"));
    let accumulate = unrolled(t.keys, |j| {
        let terms =
            (0..nv).map(|a| format!("acc[{a}] += w * vs[{}u + tr];", j * t.dmax + a * t.keys)).collect::<String>();
        format!("{{ let w = pw[pr + {j}u]; l += w; {terms} }}")
    });
    let (regs, load_first, load_next, stage) = staging(t);
    let store = unrolled(nv, |a| {
        let c = format!("tr + {}u", a * t.keys);
        format!("if ({c} < dv) {{ y[yo + {c}] = {ty}(acc[{a}] * inv); }}")
    });
    format!(
        "{enable}
{binds}
const BQ: u32 = {rows}u;
const BK: u32 = {keys}u;
const D: u32 = {dmax}u;
const D4: u32 = {d4}u;
const KROW4: u32 = {krow4}u;
const THREADS: u32 = {THREADS}u;
var<workgroup> qt: array<vec4<f32>, {qn}>;
var<workgroup> kt: array<vec4<f32>, {kn}>;
var<workgroup> vs: array<f32, {vn}>;
var<workgroup> ps: array<f32, {sn}>;
var<workgroup> pw: array<f32, {sn}>;
@compute @workgroup_size({THREADS})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let NEG_INF = bitcast<f32>(0xff800000u);
    let g = wid.x + wid.y * nwg.x;
    // Workgroups past the last one run with an empty key loop (barriers stay uniform).
    let live = g < p[{P_ROWS}];
    let qh = p[{P_QH}]; let qs = p[{P_QS}]; let kvh = p[{P_KVH}];
    let total = p[{P_TOTAL}]; let dh = p[{P_DH}]; let dv = p[{P_DV}];
    let blocks = (qs + BQ - 1u) / BQ;
    let blk = g % blocks;
    let h = (g / blocks) % qh;
    let b = g / (blocks * qh);
    let kh = h / (qh / kvh);
    let three_d = p[{P_3D}] == 1u;
    // Stage the block's query rows (zeros past the last row and the head size).
    for (var e = t; e < BQ * D; e += THREADS) {{
        let rr = e / D; let c = e % D; let ii = blk * BQ + rr;
        var x = 0.0;
        if (live && ii < qs && c < dh) {{
            var qo = ((b * qh + h) * qs + ii) * dh;
            if (three_d) {{ qo = (b * qs + ii) * p[{P_QROW}] + p[{P_QOFF}] + h * dh; }}
            x = f32(q[qo + c]);
        }}
        qt[rr * D4 + c / 4u][c % 4u] = x;
    }}
    let r = t / BK; let tr = t % BK;
    let qr = r * D4; let kr = tr * KROW4; let pr = r * BK;
    let row = blk * BQ + r;
    let i = min(row, qs - 1u);
    let past = p[{P_PAST}];
    var end = total;
    var last = total;
    if (p[{P_CAUSAL}] == 1u) {{
        end = min(past + min(blk * BQ + BQ, qs), total);
        last = min(past + i + 1u, total);
    }}
    {nonpad_code}
    if (!live) {{ end = 0u; }}
    // K and V rows: the 4-D layout [b, kv_heads, total, d], or 3-D rows (of their own, or of a
    // packed tensor, at an offset).
    var kbase = (b * kvh + kh) * total * dh; var kstride = dh;
    var vbase = (b * kvh + kh) * total * dv; var vstride = dv;
    if (p[{P_KV3D}] == 1u) {{
        kstride = p[{P_KROW}]; kbase = b * total * kstride + p[{P_KOFF}] + kh * dh;
        vstride = p[{P_VROW}]; vbase = b * total * vstride + p[{P_VOFF}] + kh * dv;
    }}
    let scale = bitcast<f32>(p[{P_SCALE}]);
    let cap = bitcast<f32>(p[{P_SOFTCAP}]);
    var mx = NEG_INF;
    var l = 0.0;
    var acc: array<f32, {nv}>;
    // Each tile's keys and values are loaded into registers while the previous tile computes
    // (loads in a loop, each stored before the next, ran the kernel 1.3x slower).
    {regs}
    if (end > 0u) {{ {load_first} }}
    for (var j0 = 0u; j0 < end; j0 += BK) {{
        workgroupBarrier();
        {stage}
        workgroupBarrier();
        if (j0 + BK < end) {{ {load_next} }}
        // This thread's key: its score.
        let j = j0 + tr;
        var d4 = vec4<f32>(0.0);
        {dot}
        var s = (d4.x + d4.y + d4.z + d4.w) * scale;
        if (cap > 0.0) {{ s = cap * tanh(s / cap); }}
        {masking}
        if (j >= last) {{ s = NEG_INF; }}
        ps[r * BK + tr] = s;
        workgroupBarrier();
        // The row's new maximum, then this key's weight.
        var tmax = NEG_INF;
        {tile_max}
        let mn = max(mx, tmax);
        var we = 0.0;
        if (mn > NEG_INF && s > NEG_INF) {{ we = exp(s - mn); }}
        pw[r * BK + tr] = we;
        workgroupBarrier();
        if (mn > NEG_INF) {{
            let alpha = select(exp(mx - mn), 0.0, mx == NEG_INF);
            l *= alpha;
            {rescale}
            {accumulate}
            mx = mn;
        }}
    }}
    if (live && row < qs) {{
        var inv = 0.0;
        if (l > 0.0) {{ inv = 1.0 / l; }}
        var yo = ((b * qh + h) * qs + row) * dv;
        if (three_d) {{ yo = ((b * qs + row) * qh + h) * dv; }}
        {store}
    }}
}}
",
        rows = t.rows,
        keys = t.keys,
        dmax = t.dmax,
        krow4 = t.dmax / 4 + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant of the shader passes naga's validation.
    #[test]
    fn every_flash_shader_validates() {
        for (mask, nonpad, d) in [(0, false, 64), (1, true, 64), (2, false, 64), (2, true, MAX_HEAD)] {
            let t = Tiling::choose(d, d, 65536).unwrap();
            let wgsl = flash_shader("f32", "", mask, nonpad, t);
            let module =
                naga::front::wgsl::parse_str(&wgsl).unwrap_or_else(|e| panic!("{}\n{wgsl}", e.emit_to_string(&wgsl)));
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
                .validate(&module)
                .unwrap_or_else(|e| panic!("{t:?} mask {mask}: {e:?}"));
        }
    }

    #[test]
    fn tilings_follow_head_size_and_memory() {
        let t = Tiling::choose(64, 64, 49152).unwrap();
        assert_eq!((t.dmax, t.rows, t.keys), (64, 8, 32));
        assert_eq!(t.storage_bytes(), 16 * (128 + 544) + 4 * (2048 + 512));
        assert_eq!(Tiling::choose(100, 72, 49152).map(|t| t.dmax), Some(MAX_HEAD));
        assert_eq!(Tiling::choose(8, 129, 49152), None);
        for d in [1, 64, 65, MAX_HEAD] {
            let t = Tiling::choose(d, d, 49152).unwrap();
            assert_eq!(t.rows * t.keys, THREADS, "one thread per (row, key) of a tile");
            assert_eq!(t.dmax % t.keys, 0, "value columns split evenly over a row's threads");
        }
        // Too little workgroup memory: the row kernel runs instead.
        assert_eq!(Tiling::choose(64, 64, 16384), None);
    }
}
