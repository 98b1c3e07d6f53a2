//! f32 buffers that start on a cache line, for the packed weights that register tiles load
//! as whole vectors: a 64-byte AVX-512 load that straddles two lines costs two, and the
//! allocator promises only 16-byte alignment (where a buffer lands then varies from one
//! process to the next, and so did the speed of resnet18's convolutions).

use std::ops::{Deref, DerefMut};

/// Bytes of a cache line, and of an AVX-512 vector.
const LINE: usize = 64;

/// Elements of slack that let the buffer start on a line.
const SLACK: usize = LINE / size_of::<f32>();

/// A zeroed f32 buffer of fixed length whose first element sits on a 64-byte boundary.
#[derive(Debug)]
pub(crate) struct AlignedBuf {
    /// The allocation, [`SLACK`] elements longer than needed. Its heap block never moves
    /// (the Vec never grows), so `start` stays valid when the buffer moves.
    storage: Vec<f32>,
    /// Index of the first aligned element in `storage`.
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zeros, or `None` when they cannot be allocated.
    pub fn try_zeros(len: usize) -> Option<Self> {
        let mut storage = Vec::new();
        storage.try_reserve_exact(len.checked_add(SLACK)?).ok()?;
        storage.resize(len + SLACK, 0.0);
        Some(Self::aligned(storage, len))
    }

    /// `len` zeros (allocation failure aborts, as for `vec![0.0; len]`).
    pub fn zeros(len: usize) -> Self {
        Self::aligned(vec![0.0; len + SLACK], len)
    }

    fn aligned(storage: Vec<f32>, len: usize) -> Self {
        let start = storage.as_ptr().align_offset(LINE).min(SLACK);
        AlignedBuf { storage, start, len }
    }
}

impl Clone for AlignedBuf {
    /// A copy in a new allocation, aligned on its own.
    fn clone(&self) -> Self {
        let mut copy = AlignedBuf::zeros(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl Deref for AlignedBuf {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_line_hold_their_length_and_survive_moves_and_clones() {
        for len in [0, 1, 15, 16, 17, 1000, 4099] {
            let mut buf = if len % 2 == 0 { AlignedBuf::zeros(len) } else { AlignedBuf::try_zeros(len).unwrap() };
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&v| v == 0.0));
            assert_eq!(buf.as_ptr() as usize % LINE, 0, "{len}");
            buf.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            for copy in [buf.clone(), *Box::new(buf)] {
                assert_eq!(copy.as_ptr() as usize % LINE, 0);
                assert!(copy.iter().enumerate().all(|(i, &v)| v == i as f32));
            }
        }
        assert!(AlignedBuf::try_zeros(usize::MAX).is_none());
    }
}
