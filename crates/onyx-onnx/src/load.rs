//! `load_model` / `load_model_from_bytes`: ModelProto bytes to a checked `Model`.
//!
//! Tensor data is copied once: prost copies each `raw_data` out of the file's bytes while
//! decoding, and the conversion moves that vector into the tensor (copying again only in the
//! rare case the allocation is misaligned for the element type). `raw_data` is kept a `Vec<u8>`
//! rather than `bytes::Bytes`: slices of the file buffer would sit at arbitrary offsets, mostly
//! misaligned, so they would be copied anyway while keeping the whole file buffer alive.

use std::path::Path;

use onyx_core::ir::{check_model, Model, OpsetImports};
use onyx_core::{Error, Result};
use prost::Message;

use crate::external::ExternalData;
use crate::functions::{inline_functions, FunctionOpset};
use crate::graph::graph;
use crate::proto::{ModelProto, OperatorSetIdProto};

/// Loads and checks the ONNX model at `path`; external data is resolved (and memory-mapped)
/// relative to the model's folder and must stay inside it.
pub fn load_model(path: &Path) -> Result<Model> {
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    // Mapped rather than read: decoding copies each tensor's bytes out of the file once, and a
    // read would first copy the whole file into a buffer (100 MB for resnet50). An empty file
    // cannot be mapped everywhere, and is rejected by `decode` anyway.
    let decoded = if len == 0 { decode(&[]) } else { decode(&crate::external::map_read_only(&file).map_err(io)?) };
    let proto = decoded.map_err(|e| crate::in_context(e, &path.display().to_string()))?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    convert(proto, Some(folder))
}

/// Loads and checks a model from the bytes of an ONNX file. External data is resolved in
/// `base_dir`; without one, a model with external data is an error.
pub fn load_model_from_bytes(bytes: &[u8], base_dir: Option<&Path>) -> Result<Model> {
    convert(decode(bytes)?, base_dir)
}

fn decode(bytes: &[u8]) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Error::Load("not a valid ONNX ModelProto: the file is empty".into()));
    }
    ModelProto::decode(bytes).map_err(|e| Error::Load(format!("not a valid ONNX ModelProto: {e}")))
}

/// Converts a decoded ModelProto: functions inlined, graph converted, model checked.
fn convert(mut proto: ModelProto, base_dir: Option<&Path>) -> Result<Model> {
    if proto.graph.is_none() {
        if proto.ir_version.is_none() && proto.opset_import.is_empty() {
            return Err(Error::Load(
                "not a valid ONNX ModelProto: it decodes to an empty message (no ir_version, opset_import or graph)"
                    .into(),
            ));
        }
        return Err(Error::InvalidModel("the model has no graph".into()));
    }
    let function_opsets = inline_functions(&mut proto)?;
    let mut opsets = opset_imports(&proto.opset_import, proto.ir_version.unwrap_or(0))?;
    merge_function_opsets(&mut opsets, function_opsets)?;
    let mut ext = ExternalData::new(base_dir);
    let main = graph(proto.graph.take().unwrap_or_default(), &mut ext, 0)?;
    let metadata =
        proto.metadata_props.into_iter().map(|e| (e.key.unwrap_or_default(), e.value.unwrap_or_default())).collect();
    let mut model = Model {
        ir_version: proto.ir_version.unwrap_or(0),
        producer_name: proto.producer_name.unwrap_or_default(),
        producer_version: proto.producer_version.unwrap_or_default(),
        domain: proto.domain.unwrap_or_default(),
        model_version: proto.model_version,
        doc: proto.doc_string.unwrap_or_default(),
        opsets,
        metadata,
        graph: main,
    };
    check_model(&mut model)?;
    Ok(model)
}

/// The opset imports by normalized domain. Files before IR version 3 had none and used
/// version 1 of the default domain.
fn opset_imports(imports: &[OperatorSetIdProto], ir_version: i64) -> Result<OpsetImports> {
    let mut out = OpsetImports::new();
    if imports.is_empty() && ir_version < 3 {
        out.insert(String::new(), 1);
    }
    for o in imports {
        let domain = crate::normalize_domain(o.domain.as_deref());
        let shown = if domain.is_empty() { "ai.onnx" } else { &domain };
        let Some(version) = o.version else {
            return Err(Error::InvalidModel(format!("opset import {shown} has no version")));
        };
        if let Some(old) = out.insert(domain.clone(), version).filter(|&old| old != version) {
            return Err(Error::InvalidModel(format!(
                "opset {shown} is imported twice, as version {old} and {version}"
            )));
        }
    }
    Ok(out)
}

/// Adds the imports of inlined functions; a version that differs from the model's is an error.
fn merge_function_opsets(opsets: &mut OpsetImports, extra: Vec<FunctionOpset>) -> Result<()> {
    for (function, domain, version) in extra {
        match opsets.get(&domain) {
            Some(&v) if v != version => {
                let shown = if domain.is_empty() { "ai.onnx" } else { &domain };
                return Err(Error::InvalidModel(format!(
                    "function {function} imports opset {shown} version {version}, but the model imports version {v}"
                )));
            }
            Some(_) => {}
            None => {
                opsets.insert(domain, version);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
