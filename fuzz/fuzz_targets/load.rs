//! The loader: any bytes as an ONNX file. Loading must end in a model or an error; a model that
//! loads must also save to bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = onyx::load_model_from_bytes(data, None) {
        let _ = onyx::model_to_bytes(&model);
    }
});
