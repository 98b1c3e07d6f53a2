//! Tensors in wgpu buffers: allocation, wrapping an application's buffer without a copy, and the
//! two host copies (upload, download).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, Weak};

use onyx_core::device::DeviceStorage;
use onyx_core::{element_count, DataType, Device, Error, HostBuffer, Result, Tensor, TensorData, TensorView};

use crate::context::GpuContext;

/// Usage every buffer Onyx allocates has: read and written by shaders, copied both ways.
pub(crate) const TENSOR_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// A tensor's elements in (a range of) a wgpu buffer.
#[derive(Debug)]
pub struct GpuBuffer {
    buffer: wgpu::Buffer,
    offset: u64,
    byte_len: usize,
    device: Device,
    /// Whether (and when) the buffer goes back to the pool once its tensor is done with.
    reuse: Reuse,
    /// Set when a run took the buffer back ([`GpuContext::reclaim`]): dropping it then does
    /// nothing more.
    reclaimed: AtomicBool,
}

/// What becomes of a tensor's buffer once the tensor is done with.
#[derive(Debug)]
enum Reuse {
    /// Freed when dropped: the application's buffers and those of [`GpuContext::alloc`].
    Never,
    /// Back to the pool when a run releases the tensor, freed when it is dropped: uploads (a
    /// session's weights free their memory with the session).
    OnRelease,
    /// Back to the pool when released or dropped: the tensors runs allocate, outputs included,
    /// so that the next run finds the same buffers.
    Always(Weak<GpuContext>),
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if let Reuse::Always(home) = &self.reuse {
            if !*self.reclaimed.get_mut() {
                if let Some(ctx) = home.upgrade() {
                    ctx.dropped(self.buffer.clone());
                }
            }
        }
    }
}

impl GpuBuffer {
    /// The wgpu buffer holding the elements. A buffer Onyx allocated for a run's output goes
    /// back to Onyx's pool when the last handle of its tensor is dropped: keep the tensor
    /// while you use the buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Byte offset of the first element in [`GpuBuffer::buffer`].
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl DeviceStorage for GpuBuffer {
    fn device(&self) -> Device {
        self.device
    }

    fn byte_len(&self) -> usize {
        self.byte_len
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Bytes a tensor of `byte_len` bytes occupies on the GPU: whole words, at least one (wgpu binds
/// no empty ranges).
pub(crate) fn padded(byte_len: usize) -> u64 {
    (byte_len.max(1) as u64).div_ceil(4) * 4
}

/// The size of pooled buffer that holds `bytes`: small sizes rounded up to 256 bytes, larger
/// ones to a quarter of their power of two, so that one buffer serves many nearby sizes and no
/// more than a fifth of it is wasted.
pub(crate) fn size_class(bytes: u64) -> u64 {
    if bytes <= 4096 {
        return bytes.max(1).next_multiple_of(256);
    }
    let step = 1u64 << (63 - (bytes - 1).leading_zeros() - 2);
    bytes.next_multiple_of(step)
}

/// The GPU buffer of a tensor, if it lives on a wgpu device.
pub fn gpu_buffer(tensor: &Tensor) -> Option<&GpuBuffer> {
    match tensor.data() {
        TensorData::Device(d) => d.as_any().downcast_ref::<GpuBuffer>(),
        _ => None,
    }
}

fn byte_len(dtype: DataType, shape: &[usize]) -> Result<usize> {
    if dtype == DataType::String {
        return Err(Error::Unsupported("wgpu: string tensors cannot live on the GPU".into()));
    }
    dtype
        .byte_len(element_count(shape)?)
        .ok_or_else(|| Error::InvalidArgument(format!("a {dtype:?} tensor of shape {shape:?} is too large")))
}

impl GpuContext {
    fn check_size(&self, bytes: u64) -> Result<()> {
        let max = self.device.limits().max_buffer_size.min(self.device.limits().max_storage_buffer_binding_size as u64);
        if bytes > max {
            return Err(Error::Device(format!(
                "wgpu: a tensor of {bytes} bytes exceeds this GPU's buffer limit ({max})"
            )));
        }
        Ok(())
    }

    /// A new, uninitialised tensor on this GPU.
    pub fn alloc(&self, dtype: DataType, shape: Vec<usize>) -> Result<Tensor> {
        let len = byte_len(dtype, &shape)?;
        self.check_size(padded(len))?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: padded(len),
            usage: TENSOR_USAGE,
            mapped_at_creation: false,
        });
        self.tensor(dtype, shape, buffer, 0, len)
    }

    fn tensor(
        &self,
        dtype: DataType,
        shape: Vec<usize>,
        buffer: wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<Tensor> {
        self.tensor_in(dtype, shape, buffer, offset, len, Reuse::Never)
    }

    fn tensor_in(
        &self,
        dtype: DataType,
        shape: Vec<usize>,
        buffer: wgpu::Buffer,
        offset: u64,
        len: usize,
        reuse: Reuse,
    ) -> Result<Tensor> {
        let storage = GpuBuffer {
            buffer,
            offset,
            byte_len: len,
            device: self.onyx_device(),
            reuse,
            reclaimed: AtomicBool::new(false),
        };
        Tensor::from_device(dtype, shape, Arc::new(storage))
    }

    /// A tensor in a pooled buffer (`buffer` from [`GpuContext::pooled_buffer`]), which returns
    /// to the pool when released or dropped.
    pub(crate) fn pooled_tensor(
        self: &Arc<Self>,
        dtype: DataType,
        shape: Vec<usize>,
        buffer: wgpu::Buffer,
    ) -> Result<Tensor> {
        let len = byte_len(dtype, &shape)?;
        self.tensor_in(dtype, shape, buffer, 0, len, Reuse::Always(Arc::downgrade(self)))
    }

    /// An idle buffer of `class` bytes (a [`size_class`]) from the pool, or a new one.
    pub(crate) fn pooled_buffer(&self, class: u64) -> Result<wgpu::Buffer> {
        if let Some(b) = self.idle_buffer(class) {
            return Ok(b);
        }
        self.check_size(class)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: class,
            usage: TENSOR_USAGE,
            mapped_at_creation: false,
        }))
    }

    /// An idle buffer of exactly `size` bytes from the pool, if there is one.
    fn idle_buffer(&self, size: u64) -> Option<wgpu::Buffer> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&size).and_then(Vec::pop)
    }

    /// Returns buffers to the pool: only buffers whose last use has been submitted, so that
    /// whatever later takes them is ordered after that use on the queue. Each size's idle
    /// buffers are kept in one fixed order (wgpu's resource order), so that runs making the same
    /// requests from the same idle buffers get the same buffers (and reuse their bind groups).
    pub(crate) fn recycle(&self, buffers: impl IntoIterator<Item = wgpu::Buffer>) {
        let mut buffers = buffers.into_iter().peekable();
        if buffers.peek().is_none() {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let mut touched = vec![];
        for b in buffers {
            touched.push(b.size());
            pool.entry(b.size()).or_default().push(b);
        }
        touched.sort_unstable();
        touched.dedup();
        for size in touched {
            if let Some(stack) = pool.get_mut(&size) {
                stack.sort_unstable();
            }
        }
    }

    /// The buffer of a dropped tensor that returns to the pool once no open run can name it.
    fn dropped(&self, buffer: wgpu::Buffer) {
        let ready = self.recycler.dropped(buffer);
        self.recycle(ready);
    }

    /// Copies a host tensor into a buffer of this GPU (written before the next submission).
    pub fn upload(&self, view: TensorView<'_>) -> Result<Tensor> {
        let bytes = view.bytes()?;
        let size = padded(bytes.len());
        self.check_size(size)?;
        self.uploads.fetch_add(1, Ordering::Relaxed);
        // Not `mapped_at_creation`: wgpu zero-fills that staging memory before handing it out,
        // which cost resnet50's weights ~10 ms more than writing them through the queue.
        let buffer = self.idle_buffer(size).unwrap_or_else(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: TENSOR_USAGE,
                mapped_at_creation: false,
            })
        });
        self.write_padded(&buffer, bytes)?;
        self.tensor_in(view.dtype(), view.shape().to_vec(), buffer, 0, bytes.len(), Reuse::OnRelease)
    }

    /// Writes `bytes` to the start of `buffer` (new, or idle in the pool) through the queue
    /// (ordered after the submitted work that used it last, before the next submission),
    /// zero-padded to a whole word.
    fn write_padded(&self, buffer: &wgpu::Buffer, bytes: &[u8]) -> Result<()> {
        let Some(size) = wgpu::BufferSize::new(padded(bytes.len())) else { return Ok(()) };
        let mut view = self
            .queue
            .write_buffer_with(buffer, 0, size)
            .ok_or_else(|| self.device_error("wgpu: cannot stage an upload".to_string()))?;
        let tail = size.get() as usize - bytes.len();
        view.slice(..bytes.len()).copy_from_slice(bytes);
        view.slice(bytes.len()..).copy_from_slice(&[0u8; 4][..tail]);
        drop(view);
        if self.staged.fetch_add(size.get(), Ordering::Relaxed) + size.get() >= self.submit_after_staged {
            self.staged.store(0, Ordering::Relaxed);
            self.queue.submit([]);
        }
        Ok(())
    }

    /// Wraps `len` bytes of the application's `buffer` from `offset` as a tensor, without a
    /// copy. The buffer must belong to this device, have STORAGE usage (and COPY_SRC to be read
    /// back), hold the whole tensor, and `offset` must meet the storage-binding alignment.
    /// A buffer of another device of the same wgpu instance is an error here; wgpu cannot tell
    /// apart buffers of another `wgpu::Instance`, so an application sharing buffers with Onyx
    /// must give Onyx its own device ([`GpuContext::from_device`]).
    pub fn wrap_buffer(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        dtype: DataType,
        shape: Vec<usize>,
    ) -> Result<Tensor> {
        let len = byte_len(dtype, &shape)?;
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::InvalidArgument(format!(
                "wgpu: the buffer has usage {:?}, not STORAGE",
                buffer.usage()
            )));
        }
        let align = self.device.limits().min_storage_buffer_offset_alignment as u64;
        if !offset.is_multiple_of(align) {
            return Err(Error::InvalidArgument(format!(
                "wgpu: byte offset {offset} is not a multiple of this device's storage alignment {align}"
            )));
        }
        let need = offset.checked_add(padded(len)).unwrap_or(u64::MAX);
        if need > buffer.size() {
            return Err(Error::InvalidArgument(format!(
                "wgpu: a {dtype:?} tensor of shape {shape:?} needs {need} bytes from the buffer's start \
                 (offset {offset}, padded to 4 bytes), but the buffer has {}",
                buffer.size()
            )));
        }
        self.check_buffer_device(buffer, offset)?;
        self.tensor(dtype, shape, buffer.clone(), offset, len)
    }

    /// Copies a tensor of this GPU to the host. Waits for the GPU work that writes it, which
    /// must have been submitted.
    pub fn download(&self, tensor: &Tensor) -> Result<Tensor> {
        let src = self.own_buffer(tensor)?;
        self.downloads.fetch_add(1, Ordering::Relaxed);
        let size = padded(src.byte_len);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("onyx download"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&src.buffer, src.offset, &staging, 0, size);
        let index = self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
            .map_err(|e| self.device_error(format!("wgpu: waiting for a download failed: {e}")))?;
        self.check_fault()?;
        rx.recv()
            .map_err(|_| Error::Device("wgpu: the download's mapping was dropped".into()))?
            .map_err(|e| self.device_error(format!("wgpu: cannot map a download buffer: {e}")))?;
        // 8-byte words, so that every element type can be viewed in place.
        let mut words = vec![0u64; src.byte_len.div_ceil(8)];
        {
            let view = staging.get_mapped_range(..).map_err(|e| self.device_error(format!("wgpu: {e}")))?;
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..src.byte_len].copy_from_slice(&view[..src.byte_len]);
        }
        staging.unmap();
        let host = HostBuffer::new(std::sync::Arc::new(words), 0, src.byte_len)?;
        Tensor::from_bytes(tensor.dtype(), tensor.shape().to_vec(), host)
    }

    /// The tensor's buffer, if it is a pooled buffer of this GPU that nothing else references
    /// (`storage` is the tensor's only handle); the tensor's drop then leaves the buffer alone.
    pub(crate) fn reclaim(&self, storage: &Arc<dyn DeviceStorage>) -> Option<wgpu::Buffer> {
        let b = storage.as_any().downcast_ref::<GpuBuffer>()?;
        let reusable = !matches!(b.reuse, Reuse::Never) && b.device == self.onyx_device();
        if Arc::strong_count(storage) != 1 || !reusable || b.reclaimed.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(b.buffer.clone())
    }

    /// The buffer of a tensor that lives on this GPU, or an error naming where it lives.
    pub(crate) fn own_buffer<'t>(&self, tensor: &'t Tensor) -> Result<&'t GpuBuffer> {
        match gpu_buffer(tensor) {
            Some(b) if b.device == self.onyx_device() => Ok(b),
            _ => Err(Error::Device(format!(
                "wgpu: expected a tensor on {}, found one on {}",
                self.onyx_device(),
                tensor.device()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::testkit;

    #[test]
    fn uploads_past_the_staging_limit_are_submitted_and_read_back_intact() {
        let Some(mut ctx) = testkit::private_context() else { return };
        Arc::get_mut(&mut ctx).expect("a new context has one owner").submit_after_staged = 4096;
        let tensors: Vec<_> = (0..24).map(|i| testkit::rand(&[3, 97 + i], -1.0, 1.0, i as u64)).collect();
        let uploaded: Vec<_> = tensors.iter().map(|t| ctx.upload(t.view().unwrap()).unwrap()).collect();
        let staged_bytes: u64 = uploaded.iter().map(|t| super::padded(t.len() * 4)).sum();
        assert!(
            ctx.staged.load(Ordering::Relaxed) < 4096,
            "the queue was never submitted ({staged_bytes} bytes staged)"
        );
        for (host, device) in tensors.iter().zip(&uploaded) {
            let back = ctx.download(device).unwrap();
            assert_eq!(back.view().unwrap().bytes().unwrap(), host.view().unwrap().bytes().unwrap());
        }
    }
}
