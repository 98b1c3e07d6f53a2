//! The external data file of a saved model: one file beside the model, named after it
//! (`model.onnx` → `model.onnx.data`, the `location` written relative to the model's folder),
//! tensors appended at aligned offsets and described by `location`, `offset` and `length`.
//!
//! Alignment: tensors of 1 MiB or more start on a 64 KiB boundary (the allocation granularity
//! ONNX Runtime aligns large initializers to, so each can be mapped on its own); smaller ones
//! on a 64-byte boundary, which suits every element type, so the loader maps them without a
//! copy. Padding bytes are zero.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use onyx_core::{Error, Result};

use super::graph::entry;
use crate::proto::StringStringEntryProto;

/// Tensors at least this large are aligned to [`LARGE_ALIGN`].
const LARGE_TENSOR: usize = 1 << 20;
/// The alignment of large tensors.
const LARGE_ALIGN: u64 = 64 << 10;
/// The alignment of every other tensor.
const SMALL_ALIGN: u64 = 64;

/// Writes tensor bytes into a temporary file that [`ExternalWriter::finish`] renames into place.
pub(crate) struct ExternalWriter {
    location: String,
    final_path: PathBuf,
    temp_path: PathBuf,
    file: Option<BufWriter<File>>,
    offset: u64,
    min_bytes: usize,
    written: usize,
}

impl ExternalWriter {
    /// A writer for the data file `location` (a bare file name) at `final_path`, going through
    /// `temp_path`; tensors of fewer than `min_bytes` bytes stay inline (empty ones always do).
    pub(crate) fn new(location: String, final_path: PathBuf, temp_path: PathBuf, min_bytes: usize) -> Self {
        ExternalWriter { location, final_path, temp_path, file: None, offset: 0, min_bytes, written: 0 }
    }

    /// Whether a tensor of `len` bytes goes to the file.
    pub(crate) fn takes(&self, len: usize) -> bool {
        len > 0 && len >= self.min_bytes
    }

    /// How many tensors were written.
    pub(crate) fn tensors_written(&self) -> usize {
        self.written
    }

    /// Appends `bytes` (the data of the tensor described by `what`) and returns its entries.
    pub(crate) fn write(&mut self, bytes: &[u8], what: &str) -> Result<Vec<StringStringEntryProto>> {
        let align = if bytes.len() >= LARGE_TENSOR { LARGE_ALIGN } else { SMALL_ALIGN };
        let start = self.offset.div_ceil(align) * align;
        let io = |source| Error::Io { path: format!("{} (writing {what})", self.temp_path.display()), source };
        let mut file = match self.file.take() {
            Some(f) => f,
            None => BufWriter::with_capacity(1 << 20, File::create(&self.temp_path).map_err(io)?),
        };
        let padding = (start - self.offset) as usize;
        file.write_all(&[0u8; LARGE_ALIGN as usize][..padding]).map_err(io)?;
        file.write_all(bytes).map_err(io)?;
        self.file = Some(file);
        self.offset = start + bytes.len() as u64;
        self.written += 1;
        Ok(vec![
            entry("location", &self.location),
            entry("offset", &start.to_string()),
            entry("length", &bytes.len().to_string()),
        ])
    }

    /// Flushes the temporary file to disk; returns it and the path it must be renamed to
    /// (`None` when no tensor was written).
    pub(crate) fn finish(self) -> Result<Option<(PathBuf, PathBuf)>> {
        let Some(file) = self.file else { return Ok(None) };
        let io = |source| Error::Io { path: self.temp_path.display().to_string(), source };
        let file = file.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(Some((self.temp_path, self.final_path)))
    }
}
