//! Checking, shape inference, optimization and planning: mutated valid models (the seeds are
//! valid models) made into CPU sessions. Every step must end in a session or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = onyx::load_model_from_bytes(data, None) {
        let _ = onyx_fuzz::builder().commit_from_model(model);
    }
});
