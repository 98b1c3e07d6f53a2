//! Compiles the vendored onnx-ml.proto / onnx-data.proto with protox (no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/onnx/onnx-ml.proto", "proto/onnx/onnx-data.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
