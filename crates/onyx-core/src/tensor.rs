//! Dense tensors: element storage on the host (owned, shared or memory-mapped) or on a device,
//! and borrowed views that kernels read.

use std::sync::Arc;

use half::{bf16, f16};

use crate::device::{Device, DeviceBuffer};
use crate::{DataType, Error, Result};

/// A Rust element type that maps to one ONNX data type and can be viewed from raw bytes.
pub trait Element: bytemuck::Pod + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The ONNX data type of this element type.
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DataType = DataType::$d; })* };
}
element!(f32 => Float, f64 => Double, f16 => Float16, bf16 => BFloat16, i8 => Int8, i16 => Int16,
    i32 => Int32, i64 => Int64, u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64);

/// Something that owns host bytes a tensor can point into: a `Vec`, a memory map, ...
pub trait ByteSource: std::any::Any + Send + Sync {
    /// The bytes.
    fn bytes(&self) -> &[u8];
}

impl<T: bytemuck::Pod + Send + Sync> ByteSource for Vec<T> {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

/// A cheaply clonable range of host bytes kept alive by its owner.
#[derive(Clone)]
pub struct HostBuffer {
    owner: Arc<dyn ByteSource>,
    offset: usize,
    len: usize,
}

impl HostBuffer {
    /// Shares `len` bytes of `owner` starting at `offset` without copying.
    pub fn new(owner: Arc<dyn ByteSource>, offset: usize, len: usize) -> Result<Self> {
        let total = owner.bytes().len();
        if offset.checked_add(len).is_none_or(|end| end > total) {
            return Err(Error::InvalidArgument(format!(
                "byte range {offset}..{} is outside a buffer of {total} bytes",
                offset.saturating_add(len)
            )));
        }
        Ok(HostBuffer { owner, offset, len })
    }

    /// Takes ownership of a vector of elements without copying.
    pub fn from_vec<T: bytemuck::Pod + Send + Sync>(v: Vec<T>) -> Self {
        let len = std::mem::size_of_val(v.as_slice());
        HostBuffer { owner: Arc::new(v), offset: 0, len }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.owner.bytes()[self.offset..self.offset + self.len]
    }

    /// The owner of the bytes and where this buffer starts in them (for reusing a buffer that
    /// nothing else holds: see `host_pool`).
    pub fn owner(&self) -> (&Arc<dyn ByteSource>, usize) {
        (&self.owner, self.offset)
    }
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.len)
    }
}

/// Where a tensor's elements are.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// Dense little-endian elements on the host (sub-byte types packed, low nibble first).
    Host(HostBuffer),
    /// String elements (host only).
    Strings(Arc<[String]>),
    /// Elements in a device buffer owned by an execution provider.
    Device(DeviceBuffer),
}

/// A dense tensor: data type, shape and elements. Clones share the elements.
#[derive(Clone, Debug)]
pub struct Tensor {
    dtype: DataType,
    shape: Vec<usize>,
    data: TensorData,
}

/// Number of elements of a shape, or an error when it overflows.
pub fn element_count(shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} has more elements than fit in memory")))
}

fn check_len(dtype: DataType, shape: &[usize], bytes: usize) -> Result<()> {
    let n = element_count(shape)?;
    let want = dtype.byte_len(n).ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} is too large")))?;
    if want != bytes {
        return Err(Error::InvalidArgument(format!(
            "a {dtype} tensor of shape {shape:?} needs {want} bytes, found {bytes}"
        )));
    }
    Ok(())
}

impl Tensor {
    /// A tensor owning `data`, which must hold exactly `shape`'s element count.
    pub fn from_vec<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Self> {
        let n = element_count(&shape)?;
        if n != data.len() {
            return Err(Error::InvalidArgument(format!(
                "shape {shape:?} has {n} elements but {} values were given",
                data.len()
            )));
        }
        Ok(Tensor { dtype: T::DTYPE, shape, data: TensorData::Host(HostBuffer::from_vec(data)) })
    }

    /// A tensor from raw little-endian bytes of `dtype` (any non-string type).
    pub fn from_bytes(dtype: DataType, shape: Vec<usize>, buffer: HostBuffer) -> Result<Self> {
        if dtype == DataType::String {
            return Err(Error::InvalidArgument("string tensors hold strings, not bytes".into()));
        }
        check_len(dtype, &shape, buffer.bytes().len())?;
        Ok(Tensor { dtype, shape, data: TensorData::Host(buffer) })
    }

    /// A boolean tensor (stored as one byte per element, 0 or 1).
    pub fn from_bools(shape: Vec<usize>, data: Vec<bool>) -> Result<Self> {
        let bytes: Vec<u8> = data.into_iter().map(u8::from).collect();
        Self::from_bytes(DataType::Bool, shape, HostBuffer::from_vec(bytes))
    }

    /// A string tensor.
    pub fn from_strings(shape: Vec<usize>, data: Vec<String>) -> Result<Self> {
        let n = element_count(&shape)?;
        if n != data.len() {
            return Err(Error::InvalidArgument(format!(
                "shape {shape:?} has {n} elements but {} strings were given",
                data.len()
            )));
        }
        Ok(Tensor { dtype: DataType::String, shape, data: TensorData::Strings(data.into()) })
    }

    /// A scalar (rank 0) tensor.
    pub fn scalar<T: Element>(value: T) -> Self {
        Tensor { dtype: T::DTYPE, shape: vec![], data: TensorData::Host(HostBuffer::from_vec(vec![value])) }
    }

    /// A tensor of `dtype` and `shape` with every byte zero (empty strings for strings).
    pub fn zeros(dtype: DataType, shape: Vec<usize>) -> Result<Self> {
        let n = element_count(&shape)?;
        if dtype == DataType::String {
            return Self::from_strings(shape, vec![String::new(); n]);
        }
        let bytes = dtype.byte_len(n).ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} is too large")))?;
        // u64 words keep every element type aligned.
        let words = vec![0u64; bytes.div_ceil(8)];
        let buffer = HostBuffer::new(Arc::new(words), 0, bytes)?;
        Ok(Tensor { dtype, shape, data: TensorData::Host(buffer) })
    }

    /// A tensor whose elements live in a device buffer.
    pub fn from_device(dtype: DataType, shape: Vec<usize>, buffer: DeviceBuffer) -> Result<Self> {
        check_len(dtype, &shape, buffer.byte_len())?;
        Ok(Tensor { dtype, shape, data: TensorData::Device(buffer) })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements (shapes are checked at construction, so this cannot overflow).
    pub fn len(&self) -> usize {
        element_count(&self.shape).unwrap_or(usize::MAX)
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the elements live.
    pub fn device(&self) -> Device {
        match &self.data {
            TensorData::Device(b) => b.device(),
            _ => Device::Cpu,
        }
    }

    /// The storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The same elements with another shape of equal element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor> {
        if element_count(&shape)? != self.len() {
            return Err(Error::InvalidArgument(format!(
                "cannot reshape {:?} ({} elements) to {shape:?}",
                self.shape,
                self.len()
            )));
        }
        Ok(Tensor { dtype: self.dtype, shape, data: self.data.clone() })
    }

    /// A borrowed host view; an error for device tensors.
    pub fn view(&self) -> Result<TensorView<'_>> {
        let data = match &self.data {
            TensorData::Host(b) => ViewData::Bytes(b.bytes()),
            TensorData::Strings(s) => ViewData::Strings(s),
            TensorData::Device(b) => {
                return Err(Error::Device(format!("tensor is on {}; download it to the host first", b.device())))
            }
        };
        Ok(TensorView { dtype: self.dtype, shape: &self.shape, data })
    }

    /// The elements as a slice of `T` (host tensors of type `T` only).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        match &self.data {
            TensorData::Host(b) => cast::<T>(self.dtype, b.bytes()),
            _ => Err(Error::DType { expected: T::DTYPE, found: self.dtype }),
        }
    }
}

fn cast<T: Element>(dtype: DataType, bytes: &[u8]) -> Result<&[T]> {
    if dtype != T::DTYPE {
        return Err(Error::DType { expected: T::DTYPE, found: dtype });
    }
    bytemuck::try_cast_slice(bytes)
        .map_err(|e| Error::InvalidArgument(format!("{dtype} data cannot be viewed in place: {e:?}")))
}

/// Borrowed elements of a host tensor.
#[derive(Clone, Copy, Debug)]
pub enum ViewData<'a> {
    /// Dense little-endian elements.
    Bytes(&'a [u8]),
    /// String elements.
    Strings(&'a [String]),
}

/// A borrowed host tensor: what kernels read, and how callers pass their own memory without copying.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    dtype: DataType,
    shape: &'a [usize],
    data: ViewData<'a>,
}

impl<'a> TensorView<'a> {
    /// Borrows `data` as a tensor of `shape` without copying.
    pub fn from_slice<T: Element>(shape: &'a [usize], data: &'a [T]) -> Result<Self> {
        check_len(T::DTYPE, shape, std::mem::size_of_val(data))?;
        Ok(TensorView { dtype: T::DTYPE, shape, data: ViewData::Bytes(bytemuck::cast_slice(data)) })
    }

    /// Borrows raw little-endian bytes as a tensor of `dtype` and `shape`.
    pub fn from_bytes(dtype: DataType, shape: &'a [usize], bytes: &'a [u8]) -> Result<Self> {
        if dtype == DataType::String {
            return Err(Error::InvalidArgument("string tensors hold strings, not bytes".into()));
        }
        check_len(dtype, shape, bytes.len())?;
        Ok(TensorView { dtype, shape, data: ViewData::Bytes(bytes) })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The dimensions.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (shapes are checked at construction, so this cannot overflow).
    pub fn len(&self) -> usize {
        element_count(self.shape).unwrap_or(usize::MAX)
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw bytes (an error for strings).
    pub fn bytes(&self) -> Result<&'a [u8]> {
        match self.data {
            ViewData::Bytes(b) => Ok(b),
            ViewData::Strings(_) => Err(Error::DType { expected: DataType::Uint8, found: DataType::String }),
        }
    }

    /// The elements as `T` (the view's dtype must be `T`'s).
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T]> {
        cast::<T>(self.dtype, self.bytes()?)
    }

    /// The string elements (string tensors only).
    pub fn strings(&self) -> Result<&'a [String]> {
        match self.data {
            ViewData::Strings(s) => Ok(s),
            ViewData::Bytes(_) => Err(Error::DType { expected: DataType::String, found: self.dtype }),
        }
    }

    /// Copies the view into an owned tensor.
    pub fn to_tensor(&self) -> Tensor {
        let data = match self.data {
            ViewData::Bytes(b) => {
                let mut words = vec![0u64; b.len().div_ceil(8)];
                bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..b.len()].copy_from_slice(b);
                let len = b.len();
                TensorData::Host(HostBuffer { owner: Arc::new(words), offset: 0, len })
            }
            ViewData::Strings(s) => TensorData::Strings(s.into()),
        };
        Tensor { dtype: self.dtype, shape: self.shape.to_vec(), data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_borrowed_agree() {
        let data = vec![1.5f32, -2.0, 3.25, 4.0, 5.0, 6.0];
        let t = Tensor::from_vec(vec![2, 3], data.clone()).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &data[..]);
        let shape = [3, 2];
        let v = TensorView::from_slice(&shape, &data).unwrap();
        assert_eq!(v.as_slice::<f32>().unwrap().as_ptr(), data.as_ptr(), "a view must not copy");
        assert_eq!(v.to_tensor().as_slice::<f32>().unwrap(), &data[..]);
    }

    #[test]
    fn wrong_sizes_and_types_are_errors() {
        assert!(Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3]).is_err());
        let t = Tensor::from_vec(vec![3], vec![1i64, 2, 3]).unwrap();
        assert!(matches!(t.as_slice::<f32>(), Err(Error::DType { .. })));
        assert!(Tensor::zeros(DataType::Float, vec![usize::MAX, 4]).is_err());
        let buf = HostBuffer::from_vec(vec![0u8; 3]);
        assert!(Tensor::from_bytes(DataType::Int4, vec![5], buf.clone()).is_ok());
        assert!(Tensor::from_bytes(DataType::Int4, vec![7], buf).is_err());
    }

    #[test]
    fn host_buffer_range_is_checked() {
        let owner: Arc<dyn ByteSource> = Arc::new(vec![0u8; 10]);
        assert!(HostBuffer::new(owner.clone(), 4, 6).is_ok());
        assert!(HostBuffer::new(owner.clone(), 5, 6).is_err());
        assert!(HostBuffer::new(owner, usize::MAX, 2).is_err());
    }
}
