//! Compiled pipelines kept on disk between processes (the `pipeline_cache_dir` option, or
//! [`GpuContext::from_device_with_pipeline_cache`](crate::GpuContext::from_device_with_pipeline_cache)).
//!
//! Drivers keep a disk cache of their own, but it may be off (`__GL_SHADER_DISK_CACHE=0`), in
//! a HOME a container cannot write, or evicted; then every start compiles every shader again.
//! With a directory given, Onyx hands the driver a `wgpu::PipelineCache` filled from a file of
//! that directory, one file per adapter, and writes the cache back whenever the compiler
//! threads run out of work. Vulkan only (wgpu's `PIPELINE_CACHE` feature): elsewhere the
//! option does nothing.
//!
//! The file is the data `PipelineCache::get_data` returned, behind a header of Onyx's own:
//! magic, length and CRC-32. A file that is truncated, altered or made by another driver is
//! ignored (and replaced at the next write); its pipelines compile as without a cache. Like the
//! driver's own cache, the directory must be private to the user running Onyx: the bytes go
//! to the driver's compiler, and neither wgpu nor Onyx defends against a deliberate forgery.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// The first bytes of an Onyx pipeline cache file (the last one is the format's version).
const MAGIC: [u8; 8] = *b"ONYXPLC\x01";
/// Magic, payload length (u64 LE) and payload CRC-32 (u32 LE).
const HEADER_BYTES: usize = 8 + 8 + 4;
/// An aside file (see [`write`]) this old was left by a process that stopped while writing.
const STALE_ASIDE: std::time::Duration = std::time::Duration::from_secs(600);

/// A device's pipeline cache and the file it is kept in.
pub(crate) struct DiskCache {
    cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Pipelines compiled through the cache since it was last written.
    unsaved: AtomicUsize,
    /// Length and CRC-32 of the data in the file, to write only data that changed.
    on_disk: Mutex<Option<(usize, u32)>>,
    /// What was loaded and written, for reports.
    status: Mutex<PipelineCacheStatus>,
}

/// What a device's pipeline cache file gave and got (see
/// [`GpuContext::pipeline_cache`](crate::GpuContext::pipeline_cache)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineCacheStatus {
    /// The cache file of this device's adapter.
    pub path: PathBuf,
    /// Bytes of the file handed to the driver when the device opened (0: none). A driver
    /// updated since the file was written ignores them.
    pub loaded_bytes: usize,
    /// Why the file was not used, when it existed but was not.
    pub rejected: Option<String>,
    /// Bytes written at the last write (0: none, e.g. the file already held every pipeline).
    pub saved_bytes: usize,
    /// The last write's error, if it failed (runs are not affected).
    pub save_error: Option<String>,
}

impl DiskCache {
    /// The cache of `device` kept in `dir`, filled from the adapter's file there if it holds a
    /// valid one; `None` where the device has no pipeline cache (not Vulkan).
    pub fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo, dir: &Path) -> Option<DiskCache> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let path = dir.join(format!("onyx_{}.bin", wgpu::util::pipeline_cache_key(info)?));
        let (file, mut rejected) = match std::fs::read(&path) {
            Ok(bytes) => (Some(bytes), None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(e) => (None, Some(format!("cannot read it: {e}"))),
        };
        let data = file.as_deref().and_then(|f| payload(f).map_err(|why| rejected = Some(why)).ok());
        let cache = match data.map(|data| create(device, Some(data))) {
            Some(Ok(cache)) => cache,
            Some(Err(why)) => {
                rejected = Some(why);
                create(device, None).ok()?
            }
            None => create(device, None).ok()?,
        };
        let on_disk = match rejected {
            None => data.map(|d| (d.len(), crc32fast::hash(d))),
            Some(_) => None,
        };
        let loaded_bytes = if on_disk.is_some() { file.as_ref().map_or(0, Vec::len) } else { 0 };
        let status = PipelineCacheStatus { path: path.clone(), loaded_bytes, rejected, ..Default::default() };
        let (unsaved, on_disk, status) = (AtomicUsize::new(0), Mutex::new(on_disk), Mutex::new(status));
        Some(DiskCache { cache, path, unsaved, on_disk, status })
    }

    /// The cache to compile pipelines through; call [`DiskCache::compiled`] after each.
    pub fn cache(&self) -> &wgpu::PipelineCache {
        &self.cache
    }

    /// Counts a pipeline compiled through the cache.
    pub fn compiled(&self) {
        self.unsaved.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the cache to its file if pipelines were compiled since the last write and the
    /// driver's data changed (a start that found every pipeline in the file writes nothing).
    /// The file is replaced whole (written aside, then renamed): a reader never sees half of one.
    pub fn save(&self) {
        if self.unsaved.swap(0, Ordering::Relaxed) == 0 {
            return;
        }
        let mut on_disk = self.on_disk.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(data) = self.cache.get_data() else { return };
        let summary = (data.len(), crc32fast::hash(&data));
        if *on_disk == Some(summary) {
            return;
        }
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        match write(&self.path, &data) {
            Ok(bytes) => {
                (status.saved_bytes, status.save_error) = (bytes, None);
                *on_disk = Some(summary);
            }
            Err(e) => status.save_error = Some(format!("cannot write {}: {e}", self.path.display())),
        }
    }

    /// What was loaded and written so far.
    pub fn status(&self) -> PipelineCacheStatus {
        self.status.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A pipeline cache holding `data`, or why the device refused it.
#[allow(unsafe_code)]
fn create(device: &wgpu::Device, data: Option<&[u8]>) -> Result<wgpu::PipelineCache, String> {
    let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let desc = wgpu::PipelineCacheDescriptor { label: Some("onyx pipelines"), data, fallback: true };
    // SAFETY: wgpu asks that `data` be what `PipelineCache::get_data` returned. It is: the file
    // holds those bytes behind Onyx's header, and `payload` checked their length and CRC-32,
    // so they are unchanged since a process wrote them. Data made elsewhere is turned away
    // before the driver compiles with it: wgpu checks its own header (backend, vendor and
    // device ids, driver version, pointer size, length) and either drops the data or raises
    // the error this scope catches (then the cache is made empty), and the Vulkan driver checks
    // its header (vendor, device, pipelineCacheUUID) and ignores data that is not its own, as
    // the Vulkan specification requires. A deliberate forgery is out of reach of any check
    // here: the directory must be private, as the module documentation says.
    let cache = unsafe { device.create_pipeline_cache(&desc) };
    let refused = pollster::block_on(scope.pop());
    match pollster::block_on(out_of_memory.pop()).or(refused) {
        Some(e) => Err(format!("wgpu refused it: {e}")),
        None => Ok(cache),
    }
}

/// The pipeline data of a cache file's bytes, or why there is none.
fn payload(file: &[u8]) -> Result<&[u8], String> {
    let (header, data) = file.split_at_checked(HEADER_BYTES).ok_or("shorter than its header")?;
    if header[..8] != MAGIC {
        return Err("not an Onyx pipeline cache of this version".into());
    }
    let length = u64::from_le_bytes(header[8..16].try_into().map_err(|_| "bad header")?);
    let crc = u32::from_le_bytes(header[16..20].try_into().map_err(|_| "bad header")?);
    if length != data.len() as u64 {
        return Err(format!("{} bytes of data where the header says {length}", data.len()));
    }
    if crc32fast::hash(data) != crc {
        return Err("its checksum does not match: the file was altered".into());
    }
    Ok(data)
}

/// The file bytes that hold `data`.
fn file_bytes(data: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_BYTES + data.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// Replaces `path` with a cache file holding `data`; the bytes written.
fn write(path: &Path, data: &[u8]) -> std::io::Result<usize> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    remove_stale_asides(path);
    let bytes = file_bytes(data);
    // Contexts of one process may write at once: each write has its own aside file.
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let aside = path.with_extension(format!("{}-{}.tmp", std::process::id(), WRITES.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&aside, &bytes)
        .and_then(|()| std::fs::rename(&aside, path))
        .inspect_err(|_| drop(std::fs::remove_file(&aside)))?;
    Ok(bytes.len())
}

/// Removes the aside files of `path` (`STEM.PID-N.tmp`) older than [`STALE_ASIDE`]: those of a
/// process that crashed or was killed mid-write, which nothing else would ever remove.
fn remove_stale_asides(path: &Path) {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem().and_then(|s| s.to_str())) else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = format!("{stem}.");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let ours = name.to_str().is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".tmp"));
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if ours && age.is_some_and(|age| age > STALE_ASIDE) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuContext, WgpuOptions};

    #[test]
    fn cache_files_round_trip_and_damaged_ones_are_refused() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let file = file_bytes(&data);
        assert_eq!(payload(&file).unwrap(), &data[..]);
        let mut flipped = file.clone();
        flipped[HEADER_BYTES + 500] ^= 1;
        assert!(payload(&flipped).unwrap_err().contains("checksum"));
        assert!(payload(&file[..file.len() - 1]).unwrap_err().contains("header says"));
        assert!(payload(&file[..10]).unwrap_err().contains("shorter"));
        let mut other = file.clone();
        other[7] = 2;
        assert!(payload(&other).unwrap_err().contains("version"));
        assert_eq!(payload(&file_bytes(&[])).unwrap(), &[] as &[u8]);
    }

    const SHADER: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;\n\
        @group(0) @binding(1) var<storage, read_write> y: array<u32>;\n\
        @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if g.x < p[0] { y[g.x] = g.x * 3u; } }\n";

    /// A context on `dir` that compiles [`SHADER`] and waits for it (and the cache's write).
    fn compile_in(dir: &Path) -> std::sync::Arc<GpuContext> {
        let options = WgpuOptions { pipeline_cache_dir: Some(dir.to_path_buf()), ..Default::default() };
        let ctx = GpuContext::new(&options).unwrap();
        let pipeline = ctx.pipeline("test/cached", || SHADER.to_string()).unwrap();
        assert!(pipeline.compiled().is_ok());
        ctx.wait_for_pipelines();
        assert!(ctx.check_fault().is_ok());
        ctx
    }

    #[test]
    fn the_application_device_keeps_its_pipelines_too() {
        if crate::testkit::provider().is_none() {
            return;
        }
        let Some(adapter) = crate::adapters(&WgpuOptions::default()).into_iter().next() else { return };
        let features = adapter.features() & wgpu::Features::PIPELINE_CACHE;
        let desc = wgpu::DeviceDescriptor { required_features: features, ..Default::default() };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).unwrap();
        let dir = std::env::temp_dir().join(format!("onyx-app-pipeline-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ctx = GpuContext::from_device_with_pipeline_cache(device, queue, adapter.get_info(), Some(&dir));
        assert!(ctx.pipeline("test/app-cached", || SHADER.to_string()).unwrap().compiled().is_ok());
        ctx.wait_for_pipelines();
        match ctx.pipeline_cache() {
            Some(cache) => assert!(cache.saved_bytes > 0 && cache.path.starts_with(&dir), "{cache:?}"),
            None => assert!(features.is_empty(), "the device has the feature but no cache was made"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stale_aside_files_are_removed_and_others_kept() {
        let dir = std::env::temp_dir().join(format!("onyx-pipeline-asides-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let make = |name: &str, old: bool| {
            let file = std::fs::File::create(dir.join(name)).unwrap();
            if old {
                file.set_modified(hour_ago).unwrap();
            }
        };
        make("onyx_a.12-0.tmp", true);
        make("onyx_a.13-4.tmp", false);
        make("onyx_b.12-0.tmp", true);
        make("notes.tmp", true);
        let path = dir.join("onyx_a.bin");
        assert_eq!(write(&path, b"data").unwrap(), HEADER_BYTES + 4);
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["notes.tmp", "onyx_a.13-4.tmp", "onyx_a.bin", "onyx_b.12-0.tmp"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pipelines_are_written_read_back_and_a_damaged_file_is_replaced() {
        if crate::testkit::provider().is_none() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("onyx-pipeline-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = compile_in(&dir);
        let Some(written) = first.pipeline_cache() else {
            assert!(!first.device.features().contains(wgpu::Features::PIPELINE_CACHE));
            return;
        };
        assert_eq!((written.loaded_bytes, &written.rejected, &written.save_error), (0, &None, &None));
        let file = std::fs::read(&written.path).unwrap();
        assert_eq!(file.len(), written.saved_bytes);
        assert!(payload(&file).is_ok());
        drop(first);

        let second = compile_in(&dir).pipeline_cache().unwrap();
        assert_eq!((second.loaded_bytes, second.rejected), (file.len(), None));

        // Onyx's header intact around wgpu data of another adapter (its vendor id altered).
        let mut data = payload(&file).unwrap().to_vec();
        data[20] ^= 0x55;
        std::fs::write(&written.path, file_bytes(&data)).unwrap();
        let foreign = compile_in(&dir).pipeline_cache().unwrap();
        assert_eq!(foreign.loaded_bytes, 0);
        assert!(foreign.rejected.unwrap().contains("wgpu refused it"));

        let mut damaged = file.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x55;
        std::fs::write(&written.path, &damaged).unwrap();
        let third = compile_in(&dir).pipeline_cache().unwrap();
        assert_eq!(third.loaded_bytes, 0);
        assert!(third.rejected.unwrap().contains("checksum"));
        assert!(payload(&std::fs::read(&written.path).unwrap()).is_ok(), "the damaged file was not replaced");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
