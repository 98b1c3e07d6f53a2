//! Runs of small models (fuzz/models, picked by the first byte) on inputs decoded from the
//! rest: shapes, indices, sizes and special floats. Every run must end in outputs or an error,
//! within the sessions' small limits.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use onyx::Session;
use onyx_fuzz::Bytes;

/// The models, in file-name order.
const MODELS: &[&[u8]] = &[
    include_bytes!("../models/00_reshape.onnx"),
    include_bytes!("../models/01_expand.onnx"),
    include_bytes!("../models/02_tile.onnx"),
    include_bytes!("../models/03_constant_of_shape.onnx"),
    include_bytes!("../models/04_range.onnx"),
    include_bytes!("../models/05_slice.onnx"),
    include_bytes!("../models/06_gather.onnx"),
    include_bytes!("../models/07_pad.onnx"),
    include_bytes!("../models/08_topk.onnx"),
    include_bytes!("../models/09_onehot.onnx"),
    include_bytes!("../models/10_nonzero.onnx"),
    include_bytes!("../models/11_resize.onnx"),
    include_bytes!("../models/12_conv_pool.onnx"),
    include_bytes!("../models/13_matmul_softmax.onnx"),
    include_bytes!("../models/14_scatter_where.onnx"),
    include_bytes!("../models/15_cast_cumsum.onnx"),
];

/// One session per model, made once and shared by every execution.
fn sessions() -> &'static [Session] {
    static SESSIONS: OnceLock<Vec<Session>> = OnceLock::new();
    SESSIONS.get_or_init(|| {
        MODELS
            .iter()
            .map(|m| onyx_fuzz::builder().commit_from_memory(m).expect("the fuzz models are valid"))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = Bytes::new(data);
    let sessions = sessions();
    let session = &sessions[bytes.byte() as usize % sessions.len()];
    let inputs = onyx_fuzz::inputs(session, &mut bytes);
    let _ = session.run(inputs);
});
