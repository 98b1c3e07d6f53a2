//! Writing the IR back to ONNX: [`save_model`], [`save_model_with_options`], [`model_to_bytes`].
//!
//! Everything the IR holds is written: opset imports, metadata, nodes (the default domain as no
//! domain), attributes of every type (subgraphs recursively; sparse attributes from their dense
//! values), inputs, outputs and value_info with their types, symbolic dims as `dim_param`, and
//! initializers as little-endian `raw_data` (strings as `string_data`). What the IR does not keep
//! is not written: model-local functions (inlined at load), sparse initializers (densified),
//! training info. A graph without a name gets one (`main_graph`, or the attribute's name for a
//! subgraph), since ONNX requires it.
//!
//! Protobuf messages cannot exceed 2 GiB: when a model's tensors take more than
//! [`SaveOptions::external_data_above`] bytes, or the file would exceed the limit anyway,
//! tensors of at least [`SaveOptions::min_external_tensor_bytes`] bytes are written to one
//! external data file beside the model (see `external.rs`), as ONNX does.
//!
//! Files are written to temporary names in the destination folder and renamed into place, so a
//! model can be saved over the file it was loaded from (its external data stays mapped).

mod attribute;
mod external;
mod graph;
mod tensor;
mod types;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use onyx_core::ir::{AttrValue, Graph, Model};
use onyx_core::{Error, Result};
use prost::Message;

use external::ExternalWriter;
use graph::model_to_proto;

/// The largest protobuf message (2 GiB - 1 bytes).
const PROTOBUF_LIMIT: u64 = i32::MAX as u64;

/// How [`save_model_with_options`] writes a model.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// Tensor bytes (initializers and tensor attributes, every graph) above which large tensors
    /// go to an external data file. Default: 2 GiB less 64 MiB for the rest of the model.
    pub external_data_above: u64,
    /// The smallest tensor, in bytes, moved to external data (default 1024, as ONNX).
    pub min_external_tensor_bytes: usize,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { external_data_above: PROTOBUF_LIMIT - (64 << 20), min_external_tensor_bytes: 1024 }
    }
}

/// Serializes `model` as the bytes of an ONNX file, every tensor inline. Models whose file
/// would exceed protobuf's 2 GiB limit are an error: save them with [`save_model`].
pub fn model_to_bytes(model: &Model) -> Result<Vec<u8>> {
    let proto = model_to_proto(model, &mut None)?;
    check_size(proto.encoded_len() as u64, "use save_model, which moves large tensors to an external data file")?;
    Ok(proto.encode_to_vec())
}

/// Saves `model` as an ONNX file at `path`, with default [`SaveOptions`]: large models get their
/// large tensors in `<file name>.data` beside it.
pub fn save_model(model: &Model, path: &Path) -> Result<()> {
    save_model_with_options(model, path, &SaveOptions::default())
}

/// Saves `model` as an ONNX file at `path`; see [`SaveOptions`] for when tensors go to the
/// external data file `<file name>.data` beside it.
pub fn save_model_with_options(model: &Model, path: &Path, options: &SaveOptions) -> Result<()> {
    let target = Target::new(path)?;
    let result = write_files(model, options, &target);
    if result.is_err() {
        let _ = std::fs::remove_file(&target.temp_model);
        let _ = std::fs::remove_file(&target.temp_data);
    }
    result
}

/// The files a save writes: the model, its external data, and their temporary names.
struct Target {
    model: PathBuf,
    data: PathBuf,
    /// The data file's name, as the model refers to it.
    location: String,
    temp_model: PathBuf,
    temp_data: PathBuf,
}

impl Target {
    fn new(path: &Path) -> Result<Self> {
        let file_name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot save a model to '{}': expected a file name", path.display()))
        })?;
        let location = format!("{file_name}.data");
        let data = path.with_file_name(&location);
        Ok(Target {
            temp_model: temp_path(path),
            temp_data: temp_path(&data),
            model: path.to_path_buf(),
            data,
            location,
        })
    }

    fn external_writer(&self, options: &SaveOptions) -> ExternalWriter {
        ExternalWriter::new(
            self.location.clone(),
            self.data.clone(),
            self.temp_data.clone(),
            options.min_external_tensor_bytes,
        )
    }
}

/// Converts, writes the temporary files, then renames them into place (data file first).
fn write_files(model: &Model, options: &SaveOptions, target: &Target) -> Result<()> {
    let mut external =
        (tensor_bytes(&model.graph) > options.external_data_above).then(|| target.external_writer(options));
    let mut proto = model_to_proto(model, &mut external.as_mut())?;
    if external.is_none() && proto.encoded_len() as u64 > PROTOBUF_LIMIT {
        drop(proto);
        external = Some(target.external_writer(options));
        proto = model_to_proto(model, &mut external.as_mut())?;
    }
    let moved = external.as_ref().map_or(0, ExternalWriter::tensors_written);
    check_size(proto.encoded_len() as u64, &format!("{moved} tensors are already in external data"))?;
    let bytes = proto.encode_to_vec();
    drop(proto);
    write_synced(&target.temp_model, &bytes)?;
    if let Some((from, to)) = external.map(ExternalWriter::finish).transpose()?.flatten() {
        rename(&from, &to)?;
    }
    rename(&target.temp_model, &target.model)
}

/// Writes `bytes` to `path` and flushes them to disk (before the file is renamed into place).
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let mut file = std::fs::File::create(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

fn check_size(len: u64, hint: &str) -> Result<()> {
    if len > PROTOBUF_LIMIT {
        return Err(Error::InvalidArgument(format!(
            "the model takes {len} bytes as a protobuf message, above the 2 GiB limit ({hint})"
        )));
    }
    Ok(())
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to)
        .map_err(|source| Error::Io { path: format!("{} -> {}", from.display(), to.display()), source })
}

/// A fresh temporary name beside `path` (same folder, so renaming it into place is atomic).
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Bytes of every tensor of `graph` and its subgraphs (initializers and tensor attributes).
fn tensor_bytes(graph: &Graph) -> u64 {
    let initializers: u64 = graph.initializers.values().map(tensor::stored_len).sum();
    let attributes: u64 = graph
        .nodes
        .iter()
        .flat_map(|n| &n.attributes)
        .map(|a| match &a.value {
            AttrValue::Tensor(t) | AttrValue::SparseTensor(t) => tensor::stored_len(t),
            AttrValue::Tensors(ts) | AttrValue::SparseTensors(ts) => ts.iter().map(tensor::stored_len).sum(),
            AttrValue::Graph(g) => tensor_bytes(g),
            AttrValue::Graphs(gs) => gs.iter().map(tensor_bytes).sum(),
            _ => 0,
        })
        .sum();
    initializers + attributes
}

#[cfg(test)]
mod tests;
