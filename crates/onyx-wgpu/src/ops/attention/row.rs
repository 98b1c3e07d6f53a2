//! The row Attention kernel: one workgroup per query row (64 threads) computes the row's
//! scores into an f32 scratch row, its softmax, and the weighted sum of values. It covers
//! what the tiled kernel of `flash.rs` does not (`qk_matmul_output`, head sizes over its
//! largest) and stands in for it while it compiles (see `mod.rs`).

use super::{
    bindings, mask_code, P_3D, P_CAUSAL, P_DH, P_DV, P_KVH, P_MODE, P_PAST, P_QH, P_QOFF, P_QROW, P_QS, P_ROWS,
    P_SCALE, P_SOFTCAP, P_TOTAL, REDUCE_64,
};

/// The per-row shader (64 threads a query row).
pub(super) fn row_shader(ty: &str, enable: &str, mask: u32, nonpad: bool, qk: bool) -> String {
    let mut outputs = vec![
        "var<storage, read_write> sc: array<f32>;".to_string(),
        format!("var<storage, read_write> y: array<{ty}>;"),
    ];
    if qk {
        outputs.push(format!("var<storage, read_write> qk: array<{ty}>;"));
    }
    let binds = bindings(ty, mask, nonpad, &outputs);
    let mask_code = mask_code(mask);
    let valid = if nonpad { "min(last, valid[2u * b])" } else { "last" };
    let keep = |mode: u32, v: &str| {
        if qk {
            format!("if (p[{P_MODE}] == {mode}u) {{ qk[base + j] = {ty}({v}); }}")
        } else {
            String::new()
        }
    };
    let (k0, k1, k2, k3) = (keep(0, "s"), keep(1, "s"), keep(2, "s"), keep(3, "w"));
    format!(
        "{enable}
{binds}
fn neg_inf() -> f32 {{ return bitcast<f32>(0xff800000u); }}
{REDUCE_64}@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let NEG_INF = neg_inf();
    let r = wid.x + wid.y * nwg.x;
    // Workgroups past the last row run with empty loops (barriers stay in uniform flow).
    let live = r < p[{P_ROWS}];
    let qh = p[{P_QH}]; let qs = p[{P_QS}]; let total = select(0u, p[{P_TOTAL}], live);
    let dh = p[{P_DH}]; let dv = select(0u, p[{P_DV}], live);
    let i = r % qs;
    let h = (r / qs) % qh;
    let b = r / (qs * qh);
    let kvh = p[{P_KVH}];
    let kh = h / (qh / kvh);
    var qo = ((b * qh + h) * qs + i) * dh;
    var yo = ((b * qh + h) * qs + i) * dv;
    if (p[{P_3D}] == 1u) {{ qo = (b * qs + i) * p[{P_QROW}] + p[{P_QOFF}] + h * dh; yo = ((b * qs + i) * qh + h) * dv; }}
    let kb = (b * kvh + kh) * total;
    let base = r * total;
    let scale = bitcast<f32>(p[{P_SCALE}]);
    let cap = bitcast<f32>(p[{P_SOFTCAP}]);
    var last = total;
    if (p[{P_CAUSAL}] == 1u) {{ last = min(p[{P_PAST}] + i + 1u, total); }}
    last = {valid};
    var mx = NEG_INF;
    for (var j = t; j < total; j += 64u) {{
        var dot = 0.0;
        for (var c = 0u; c < dh; c++) {{ dot += f32(q[qo + c]) * f32(k[(kb + j) * dh + c]); }}
        var s = dot * scale;
        {k0}
        if (cap > 0.0) {{ s = cap * tanh(s / cap); }}
        {k1}
        {mask_code}
        if (j >= last) {{ s = NEG_INF; }}
        {k2}
        sc[base + j] = s;
        mx = max(mx, s);
    }}
    mx = reduce_max(t, mx);
    var sum = 0.0;
    for (var j = t; j < total; j += 64u) {{
        var e = 0.0;
        if (mx > NEG_INF) {{ e = exp(sc[base + j] - mx); }}
        sc[base + j] = e;
        sum += e;
    }}
    sum = reduce_sum(t, sum);
    var inv = 0.0;
    if (sum > 0.0) {{ inv = 1.0 / sum; }}
    for (var j = t; j < total; j += 64u) {{
        let w = sc[base + j] * inv;
        sc[base + j] = w;
        {k3}
    }}
    storageBarrier();
    workgroupBarrier();
    for (var c = t; c < dv; c += 64u) {{
        var acc = 0.0;
        for (var j = 0u; j < total; j++) {{ acc += sc[base + j] * f32(v[(kb + j) * dv + c]); }}
        y[yo + c] = {ty}(acc);
    }}
}}
"
    )
}
