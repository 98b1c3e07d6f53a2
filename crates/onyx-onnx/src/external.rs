//! External tensor data: files beside the model, memory-mapped once per file per load and
//! shared by every tensor that points into them (no copy unless an offset is misaligned).
//!
//! Keys: `location` (required), `offset` (default 0), `length` (default: the tensor's byte size;
//! when given it must equal that size); `checksum` is not verified and other keys are ignored.
//!
//! Security: a location must be a relative path that stays inside the model's folder after
//! resolving `..` and symlinks; anything else is an error naming the tensor and the location.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use onyx_core::{ByteSource, DataType, Error, HostBuffer, Result};

use crate::proto::StringStringEntryProto;
use crate::tensor::{copy_aligned, element_align, normalize_bools};

/// A read-only memory map of an external data file, shared by the tensors inside it.
struct MappedFile(Mmap);

impl ByteSource for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Maps `file` read-only.
#[allow(unsafe_code)]
pub(crate) fn map_read_only(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: `Mmap::map` is unsafe because the mapped bytes may change, or vanish (SIGBUS), if
    // another process writes to or truncates the file while it is mapped (a data file for the
    // model's life, the model file while it is decoded). The file is opened
    // read-only and Onyx never writes to it; modifying or truncating a model's data files while a
    // model loaded from them is alive is documented as unsupported, as in every runtime that
    // maps weights (ONNX Runtime, llama.cpp).
    unsafe { Mmap::map(file) }
}

/// Resolves the external data of one load: the model's folder and the files mapped so far.
pub(crate) struct ExternalData {
    base_dir: Option<PathBuf>,
    canonical_base: Option<PathBuf>,
    maps: HashMap<PathBuf, Arc<MappedFile>>,
}

/// The parsed `external_data` entries of a tensor.
struct Entry<'a> {
    location: &'a str,
    offset: usize,
    length: Option<usize>,
}

impl ExternalData {
    /// A resolver for a model in `base_dir`; `None` rejects every external tensor.
    pub(crate) fn new(base_dir: Option<&Path>) -> Self {
        ExternalData { base_dir: base_dir.map(Path::to_path_buf), canonical_base: None, maps: HashMap::new() }
    }

    /// The bytes of the tensor described by `what` with `count` elements of `dtype`.
    pub(crate) fn tensor_bytes(
        &mut self,
        what: &str,
        dtype: DataType,
        count: usize,
        entries: &[StringStringEntryProto],
    ) -> Result<HostBuffer> {
        let entry = parse_entries(entries, what)?;
        let at = format!("{what}: external data '{}'", entry.location);
        if dtype == DataType::String {
            return Err(Error::InvalidModel(format!("{at}: string tensors cannot be stored externally")));
        }
        let expected = dtype
            .byte_len(count)
            .ok_or_else(|| Error::InvalidModel(format!("{at}: {count} elements do not fit in memory")))?;
        let length = entry.length.unwrap_or(expected);
        if length != expected {
            return Err(Error::InvalidModel(format!(
                "{at}: length {length} does not match the tensor's {expected} bytes"
            )));
        }
        let map = self.map(entry.location, &at)?;
        let file_len = map.bytes().len();
        if entry.offset.checked_add(length).is_none_or(|end| end > file_len) {
            return Err(Error::InvalidModel(format!(
                "{at}: bytes {}..{} are past the end of the file ({file_len} bytes)",
                entry.offset,
                entry.offset.saturating_add(length)
            )));
        }
        let bytes = &map.bytes()[entry.offset..entry.offset + length];
        if dtype == DataType::Bool && bytes.iter().any(|&b| b > 1) {
            let mut copy = bytes.to_vec();
            normalize_bools(&mut copy);
            return Ok(HostBuffer::from_vec(copy));
        }
        if bytes.as_ptr().align_offset(element_align(dtype)) != 0 {
            return copy_aligned(bytes);
        }
        HostBuffer::new(map, entry.offset, length)
    }

    /// The map of `location`, mapping the file on first use.
    fn map(&mut self, location: &str, at: &str) -> Result<Arc<MappedFile>> {
        let path = self.resolve(location, at)?;
        if let Some(map) = self.maps.get(&path) {
            return Ok(map.clone());
        }
        let io = |source| Error::Io { path: format!("{at} ({})", path.display()), source };
        let file = File::open(&path).map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(Error::InvalidModel(format!("{at}: {} is not a regular file", path.display())));
        }
        let map = Arc::new(MappedFile(map_read_only(&file).map_err(io)?));
        self.maps.insert(path, map.clone());
        Ok(map)
    }

    /// The canonical path of `location`, which must stay inside the model's folder.
    fn resolve(&mut self, location: &str, at: &str) -> Result<PathBuf> {
        check_relative(location, at)?;
        let base = self.canonical_base(at)?;
        let joined = base.join(location);
        let path = joined
            .canonicalize()
            .map_err(|source| Error::Io { path: format!("{at} ({})", joined.display()), source })?;
        if !path.starts_with(&base) {
            return Err(Error::InvalidModel(format!(
                "{at}: resolves to {}, outside the model's folder {}",
                path.display(),
                base.display()
            )));
        }
        Ok(path)
    }

    fn canonical_base(&mut self, at: &str) -> Result<PathBuf> {
        if let Some(base) = &self.canonical_base {
            return Ok(base.clone());
        }
        let Some(dir) = &self.base_dir else {
            return Err(Error::InvalidModel(format!(
                "{at}: the model was loaded from bytes without a folder to resolve external data in"
            )));
        };
        let base = dir
            .canonicalize()
            .map_err(|source| Error::Io { path: format!("{at}: model folder {}", dir.display()), source })?;
        self.canonical_base = Some(base.clone());
        Ok(base)
    }
}

fn parse_entries<'a>(entries: &'a [StringStringEntryProto], what: &str) -> Result<Entry<'a>> {
    let mut location = None;
    let mut offset = 0;
    let mut length = None;
    for e in entries {
        let value = e.value.as_deref().unwrap_or("");
        match e.key.as_deref().unwrap_or("") {
            "location" => location = Some(value),
            "offset" => offset = parse_size(value, "offset", what)?,
            "length" => length = Some(parse_size(value, "length", what)?),
            // The checksum is not verified; other keys are ignored.
            _ => {}
        }
    }
    match location {
        Some(location) if !location.is_empty() => Ok(Entry { location, offset, length }),
        _ => Err(Error::InvalidModel(format!("{what}: external data without a 'location'"))),
    }
}

fn parse_size(value: &str, key: &str, what: &str) -> Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| Error::InvalidModel(format!("{what}: external data '{key}' is '{value}', expected a byte count")))
}

/// Rejects absolute locations and `..` that climbs above the model's folder.
fn check_relative(location: &str, at: &str) -> Result<()> {
    let mut depth = 0usize;
    for c in Path::new(location).components() {
        match c {
            Component::Prefix(_) | Component::RootDir => {
                return Err(Error::InvalidModel(format!(
                    "{at}: an absolute location points outside the model's folder; expected a path relative to it"
                )))
            }
            Component::ParentDir if depth == 0 => {
                return Err(Error::InvalidModel(format!("{at}: '..' leads outside the model's folder")))
            }
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
