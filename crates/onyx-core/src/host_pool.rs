//! A pool of host buffers, one per session: CPU kernels take their output buffers from it, and a
//! buffer comes back when the last tensor holding it is dropped (the executor drops each value
//! after its last reader), so that a warm plan allocates nothing per run.
//!
//! Buffers are keyed by exact byte length and alignment (a plan asks for the same sizes at every
//! run; size classes would waste up to half of each buffer for no extra hit). The pool keeps at
//! most its cap in idle buffers and frees what comes back beyond it, and what comes back in a
//! size no kernel has asked for (outputs of kernels that do not take their buffer from it). A buffer is only ever pooled
//! once nothing refers to it, so a caller's output, an initializer or a value still read later
//! can never be handed out: the pool sees a buffer only in the `Drop` of its last owner, or in
//! [`reclaim`], which takes a value by value and checks it is the only holder.
//!
//! Kernels reach the pool of the run they are part of through a thread-local that the executor
//! sets for the length of a run ([`enter`]); without one (kernels called directly, rayon
//! workers) [`take`] allocates and [`tensor`] makes an ordinary tensor.

use std::any::Any;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytemuck::Pod;

use crate::tensor::{ByteSource, Element, HostBuffer};
use crate::{DataType, Result, Tensor, TensorData, Value};

/// Counters of a [`HostPool`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers handed out from the pool.
    pub hits: u64,
    /// Buffers asked for that the pool did not have (allocated instead).
    pub misses: u64,
    /// Buffers given back and kept.
    pub returned: u64,
    /// Buffers given back but freed: the pool was at its cap, or no kernel asks for that size.
    pub freed: u64,
    /// Outputs written into the buffer of an input the run no longer needed.
    pub in_place: u64,
    /// Bytes of idle buffers the pool holds now.
    pub held_bytes: u64,
    /// The most bytes it may hold.
    pub cap_bytes: u64,
}

/// A session's pool of host buffers (see the module docs). Clones share the pool.
#[derive(Clone, Default)]
pub struct HostPool {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    returned: AtomicU64,
    freed: AtomicU64,
    in_place: AtomicU64,
}

#[derive(Default)]
struct State {
    free: HashMap<(usize, usize), Vec<Storage>>,
    /// Keys some kernel asked for: a buffer of another size (an output a kernel built without
    /// the pool) is freed when it comes back, since no one would take it.
    wanted: HashSet<(usize, usize)>,
    /// Addresses of the buffers handed out (or allocated on a miss) and not yet wrapped by
    /// [`buffer`]: only those are pooled, so that outputs of kernels that build their own
    /// vectors do not pile up in the pool.
    lent: HashSet<usize>,
    held: usize,
    cap: usize,
}

impl HostPool {
    /// An empty pool that keeps at most `cap_bytes` of idle buffers.
    pub fn new(cap_bytes: usize) -> Self {
        let pool = HostPool::default();
        pool.inner.lock().cap = cap_bytes;
        pool
    }

    /// Raises the cap to `cap_bytes` if it is lower (each plan asks for what its runs need).
    pub fn raise_cap(&self, cap_bytes: usize) {
        let mut state = self.inner.lock();
        state.cap = state.cap.max(cap_bytes);
    }

    /// The counters so far.
    pub fn stats(&self) -> PoolStats {
        let i = &self.inner;
        let state = i.lock();
        PoolStats {
            hits: i.hits.load(Ordering::Relaxed),
            misses: i.misses.load(Ordering::Relaxed),
            returned: i.returned.load(Ordering::Relaxed),
            freed: i.freed.load(Ordering::Relaxed),
            in_place: i.in_place.load(Ordering::Relaxed),
            held_bytes: state.held as u64,
            cap_bytes: state.cap as u64,
        }
    }

    /// Frees every idle buffer.
    pub fn clear(&self) {
        let mut state = self.inner.lock();
        state.free.clear();
        state.wanted.clear();
        state.held = 0;
    }
}

/// Records `address` as lent (bounded: a forgotten entry only means a buffer is pooled that
/// need not be, which is harmless).
fn lend(state: &mut State, address: usize) {
    if state.lent.len() >= 1 << 16 {
        state.lent.clear();
    }
    state.lent.insert(address);
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The map stays consistent if a holder panicked: every update is a single push or pop.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, key: (usize, usize)) -> Option<Storage> {
        let mut state = self.lock();
        if !state.wanted.contains(&key) {
            state.wanted.insert(key);
        }
        let storage = state.free.get_mut(&key).and_then(Vec::pop);
        if let Some(s) = &storage {
            state.held -= s.capacity_bytes();
            lend(&mut state, s.bytes().as_ptr() as usize);
        }
        storage
    }

    fn give(&self, storage: Storage) {
        let bytes = storage.capacity_bytes();
        if bytes == 0 {
            return;
        }
        let mut state = self.lock();
        if state.held + bytes > state.cap || !state.wanted.contains(&storage.key()) {
            drop(state);
            self.freed.fetch_add(1, Ordering::Relaxed);
            return; // `storage` is freed here, outside the lock
        }
        state.held += bytes;
        state.free.entry(storage.key()).or_default().push(storage);
        drop(state);
        self.returned.fetch_add(1, Ordering::Relaxed);
    }
}

/// Pooled memory, stored as the unsigned integer of its alignment so that any plain element
/// type of that alignment can reuse it.
enum Storage {
    A1(Vec<u8>),
    A2(Vec<u16>),
    A4(Vec<u32>),
    A8(Vec<u64>),
}

impl Storage {
    /// Takes a vector's memory; `None` for alignments over 8 or capacities that do not convert.
    fn from_vec<T: Pod>(v: Vec<T>) -> std::result::Result<Storage, Vec<T>> {
        use bytemuck::allocation::try_cast_vec;
        match std::mem::align_of::<T>() {
            1 => try_cast_vec(v).map(Storage::A1).map_err(|(_, v)| v),
            2 => try_cast_vec(v).map(Storage::A2).map_err(|(_, v)| v),
            4 => try_cast_vec(v).map(Storage::A4).map_err(|(_, v)| v),
            8 => try_cast_vec(v).map(Storage::A8).map_err(|(_, v)| v),
            _ => Err(v),
        }
    }

    /// The memory as a vector of `T` (whose alignment must be the storage's).
    fn into_vec<T: Pod>(self) -> std::result::Result<Vec<T>, Storage> {
        use bytemuck::allocation::try_cast_vec;
        match self {
            Storage::A1(v) => try_cast_vec(v).map_err(|(_, v)| Storage::A1(v)),
            Storage::A2(v) => try_cast_vec(v).map_err(|(_, v)| Storage::A2(v)),
            Storage::A4(v) => try_cast_vec(v).map_err(|(_, v)| Storage::A4(v)),
            Storage::A8(v) => try_cast_vec(v).map_err(|(_, v)| Storage::A8(v)),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Storage::A1(v) => v,
            Storage::A2(v) => bytemuck::cast_slice(v),
            Storage::A4(v) => bytemuck::cast_slice(v),
            Storage::A8(v) => bytemuck::cast_slice(v),
        }
    }

    /// (alignment, length in bytes): the pool's key.
    fn key(&self) -> (usize, usize) {
        match self {
            Storage::A1(v) => (1, v.len()),
            Storage::A2(v) => (2, v.len() * 2),
            Storage::A4(v) => (4, v.len() * 4),
            Storage::A8(v) => (8, v.len() * 8),
        }
    }

    fn capacity_bytes(&self) -> usize {
        match self {
            Storage::A1(v) => v.capacity(),
            Storage::A2(v) => v.capacity() * 2,
            Storage::A4(v) => v.capacity() * 4,
            Storage::A8(v) => v.capacity() * 8,
        }
    }
}

/// The owner of a pooled tensor's bytes: gives them back to its pool when the last tensor
/// sharing them is dropped.
struct Pooled {
    storage: Storage,
    pool: Weak<Inner>,
}

impl ByteSource for Pooled {
    fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let storage = std::mem::replace(&mut self.storage, Storage::A1(Vec::new()));
        if let Some(pool) = self.pool.upgrade() {
            pool.give(storage);
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Inner>>> = const { RefCell::new(None) };
}

/// While alive, kernels on this thread take buffers from a pool (see [`enter`]).
pub struct Entered {
    previous: Option<Arc<Inner>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Makes `pool` the pool of this thread until the returned guard is dropped (runs nest).
pub fn enter(pool: &HostPool) -> Entered {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(pool.inner.clone()));
    Entered { previous }
}

fn with_current<R>(f: impl FnOnce(Option<&Arc<Inner>>) -> R) -> R {
    CURRENT.with(|c| f(c.borrow().as_ref()))
}

/// A vector of `len` elements for a kernel to overwrite entirely: from this thread's pool when it
/// has a buffer of that size (its elements are then whatever the last user left), else newly
/// allocated (zeroed).
pub fn take<T: Pod>(len: usize) -> Vec<T> {
    reuse::<T>(len).unwrap_or_else(|| {
        let v = vec![T::zeroed(); len];
        track(&v);
        v
    })
}

/// Marks a vector allocated after a [`reuse`] miss as the pool's, so that it returns to the
/// pool once the tensor made of it (by [`buffer`]) is dropped.
pub fn track<T>(v: &[T]) {
    if !v.is_empty() {
        with_current(|pool| pool.map(|p| lend(&mut p.lock(), v.as_ptr() as usize)));
    }
}

/// A pooled vector of `len` elements (holding whatever its last user left), or `None` (a miss,
/// counted) when this thread's pool has none of that size or no pool is set.
pub fn reuse<T: Pod>(len: usize) -> Option<Vec<T>> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    with_current(|pool| {
        let pool = pool?;
        if bytes == 0 {
            return None;
        }
        match pool.take((std::mem::align_of::<T>(), bytes)) {
            Some(s) => match s.into_vec::<T>() {
                Ok(v) => {
                    pool.hits.fetch_add(1, Ordering::Relaxed);
                    Some(v)
                }
                Err(s) => {
                    pool.give(s);
                    None
                }
            },
            None => {
                pool.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    })
}

/// Like [`take`], with every element zero.
pub fn take_zeroed<T: Pod>(len: usize) -> Vec<T> {
    let mut v = take::<T>(len);
    v.fill(T::zeroed());
    v
}

/// A vector of `len` elements filled from `items` (which must yield at least `len`), from the
/// pool like [`take`]: the pooled form of `items.collect()`.
pub fn collect<T: Pod>(len: usize, items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v = take::<T>(len);
    let mut n = 0;
    for (o, x) in v.iter_mut().zip(items) {
        *o = x;
        n += 1;
    }
    v.truncate(n);
    v
}

/// A host buffer holding `data`: one that returns to this thread's pool when its last holder
/// drops it if `data` came from the pool ([`take`], [`reuse`], [`track`]), else a plain one.
pub fn buffer<T: Pod + Send + Sync>(data: Vec<T>) -> HostBuffer {
    let len = std::mem::size_of_val(data.as_slice());
    let address = data.as_ptr() as usize;
    let pool = with_current(|p| p.filter(|p| p.lock().lent.remove(&address)).map(Arc::downgrade));
    let Some(pool) = pool.filter(|_| len > 0) else {
        return HostBuffer::from_vec(data);
    };
    match Storage::from_vec(data) {
        Ok(storage) => {
            let owner: Arc<dyn ByteSource> = Arc::new(Pooled { storage, pool });
            // The storage holds exactly `len` bytes: the range is in bounds.
            HostBuffer::new(owner, 0, len).expect("a pooled buffer covers its own bytes")
        }
        Err(data) => HostBuffer::from_vec(data),
    }
}

/// Gives a kernel's scratch vector from [`take`] back to this thread's pool (a vector that did
/// not come from the pool is freed).
pub fn give_back<T: Pod + Send + Sync>(scratch: Vec<T>) {
    drop(buffer(scratch));
}

/// A tensor of `shape` owning `data`, whose buffer returns to the pool (see [`buffer`]).
pub fn tensor<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Tensor> {
    let n = crate::element_count(&shape)?;
    if n != data.len() {
        return Tensor::from_vec(shape, data); // the same error as an unpooled tensor
    }
    Tensor::from_bytes(T::DTYPE, shape, buffer(data))
}

/// A tensor of `dtype` from elements of a plain type of the same width (bool as `u8`, f16 as
/// `u16`, ...), whose buffer returns to the pool (see [`buffer`]).
pub fn tensor_of<T: Pod + Send + Sync>(dtype: DataType, shape: Vec<usize>, data: Vec<T>) -> Result<Tensor> {
    Tensor::from_bytes(dtype, shape, buffer(data))
}

/// Takes the elements of `value` for a kernel to overwrite with its output (in place), when
/// `value` is a host tensor of `T`'s type whose buffer came from a pool and that nothing else
/// holds; else gives `value` back unchanged. Returns the shape and the elements.
pub fn reclaim<T: Element>(value: Value) -> std::result::Result<(Vec<usize>, Vec<T>), Value> {
    reclaim_as::<T>(value, T::DTYPE)
}

/// Like [`reclaim`] for a tensor of `dtype` whose elements are read as the plain type `T` of
/// the same width (e.g. to write a Cast's output over its input).
pub fn reclaim_as<T: Pod>(value: Value, dtype: DataType) -> std::result::Result<(Vec<usize>, Vec<T>), Value> {
    let owner = match unique_pooled(&value, dtype, std::mem::size_of::<T>()) {
        Some(owner) => owner.clone(),
        None => return Err(value),
    };
    let shape = match value {
        Value::Tensor(t) => t.shape().to_vec(), // dropping the tensor leaves `owner` the only holder
        other => return Err(other),
    };
    let any: Arc<dyn Any + Send + Sync> = owner;
    let pooled = any.downcast::<Pooled>().ok().and_then(|p| Arc::try_unwrap(p).ok());
    // unique_pooled checked both; a failure here could only lose the value, never alias it.
    let mut pooled = pooled.expect("a unique pooled buffer");
    let pool = pooled.pool.upgrade();
    let storage = std::mem::replace(&mut pooled.storage, Storage::A1(Vec::new()));
    match storage.into_vec::<T>() {
        Ok(v) => {
            if let Some(pool) = pool {
                pool.in_place.fetch_add(1, Ordering::Relaxed);
                lend(&mut pool.lock(), v.as_ptr() as usize); // the output made of it is the pool's too
            }
            Ok((shape, v))
        }
        Err(s) => {
            pooled.storage = s;
            let owner: Arc<dyn ByteSource> = Arc::new(pooled);
            let len = owner.bytes().len();
            let buffer = HostBuffer::new(owner, 0, len).expect("a pooled buffer covers its own bytes");
            Err(Value::Tensor(Tensor::from_bytes(dtype, shape, buffer).expect("the tensor's own bytes")))
        }
    }
}

/// The owner of `value`'s bytes when it is a pooled buffer of exactly the tensor's bytes, of
/// elements `width` bytes wide, that nothing but `value` holds.
fn unique_pooled(value: &Value, dtype: DataType, width: usize) -> Option<&Arc<dyn ByteSource>> {
    let Value::Tensor(t) = value else { return None };
    let TensorData::Host(h) = t.data() else { return None };
    let (owner, offset) = h.owner();
    let whole = offset == 0 && owner.bytes().len() == h.bytes().len();
    let pooled = (&**owner as &dyn Any).is::<Pooled>();
    let fits = t.dtype() == dtype && dtype.bit_width() as usize == 8 * width;
    (whole && pooled && fits && Arc::strong_count(owner) == 1).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_holder_drops_them() {
        let pool = HostPool::new(1 << 20);
        let _in = enter(&pool);
        let a = tensor(vec![3, 5], take::<f32>(15)).unwrap();
        let shared = a.clone();
        let ptr = a.as_slice::<f32>().unwrap().as_ptr();
        drop(a);
        assert_eq!(pool.stats().returned, 0, "a clone still holds the buffer");
        // While held, the same size is a miss (a new buffer), never the held one.
        let other = take::<f32>(15);
        assert_ne!(other.as_ptr(), ptr);
        drop(shared);
        assert_eq!(pool.stats().returned, 1);
        let again = take::<i32>(15); // same width and alignment: reused
        assert_eq!(again.as_ptr() as usize, ptr as usize);
        let s = pool.stats();
        assert_eq!((s.hits, s.misses), (1, 2));
    }

    #[test]
    fn the_cap_bounds_what_the_pool_keeps() {
        let pool = HostPool::new(100);
        let _in = enter(&pool);
        let a = tensor(vec![20], take::<f32>(20)).unwrap(); // 80 bytes: kept
        let b = tensor(vec![20], take::<f32>(20)).unwrap(); // 80 more: over the cap, freed
        drop((a, b));
        let s = pool.stats();
        assert_eq!((s.returned, s.freed, s.held_bytes), (1, 1, 80));
        // A vector the pool did not hand out is not kept, whatever room is left.
        pool.raise_cap(1 << 20);
        drop(tensor(vec![20], vec![1f32; 20]).unwrap());
        let s = pool.stats();
        assert_eq!((s.returned, s.freed, s.held_bytes), (1, 1, 80));
        pool.clear();
        assert_eq!(pool.stats().held_bytes, 0);
    }

    #[test]
    fn reclaim_takes_only_unique_pooled_buffers() {
        let pool = HostPool::new(1 << 20);
        let _in = enter(&pool);
        let data: Vec<f32> = (0..7).map(|i| i as f32 * 0.5 - 1.0).collect();
        let t = Value::Tensor(tensor(vec![7], collect(7, data.iter().copied())).unwrap());
        let held = t.clone();
        let t = reclaim::<f32>(t).expect_err("a clone holds it");
        drop(held);
        let t = reclaim::<i32>(t).expect_err("wrong element type");
        let (shape, v) = reclaim::<f32>(t).unwrap();
        assert_eq!((shape, v), (vec![7], data.clone()));
        assert_eq!(pool.stats().in_place, 1);
        // Same width through reclaim_as: a Cast from float to int32 may overwrite its input.
        let t = Value::Tensor(tensor(vec![7], collect(7, data.iter().copied())).unwrap());
        let (_, bits) = reclaim_as::<u32>(t, DataType::Float).unwrap();
        assert_eq!(bits[2], data[2].to_bits());
        // Not pooled (made without a pool), or a borrowed part of a buffer: never taken.
        let plain = Value::Tensor(Tensor::from_vec(vec![7], data.clone()).unwrap());
        assert!(reclaim::<f32>(plain).is_err());
        let whole = tensor(vec![7], collect(7, data.iter().copied())).unwrap();
        let TensorData::Host(h) = whole.data() else { unreachable!() };
        let part = HostBuffer::new(h.owner().0.clone(), 4, 8).unwrap();
        drop(whole);
        let part = Value::Tensor(Tensor::from_bytes(DataType::Float, vec![2], part).unwrap());
        assert!(reclaim::<f32>(part).is_err());
    }

    #[test]
    fn without_a_pool_nothing_is_pooled() {
        let v = take::<u8>(5);
        assert_eq!(v, vec![0; 5]);
        let t = tensor(vec![5], v).unwrap();
        assert!(reclaim::<u8>(Value::Tensor(t)).is_err());
    }
}
