//! Bind groups made once and reused by later runs.
//!
//! A plan's runs bind the same buffers at every run: intermediates come from the buffer pool in
//! the same order each time (see `recycle.rs`), weights never move, and each dispatch's
//! parameters sit at the same offset of the same parameter chunk. So a bind group is looked up
//! by exactly what it binds (layout, buffers, offsets, sizes) and made only on a miss. The key
//! is the resources themselves, so a reused group always binds what the dispatch asked for,
//! whichever run or thread asks; concurrent runs that draw other buffers just make (and cache)
//! other groups.
//!
//! A cached group keeps its buffers alive. Groups no run used during the last [`SWEEP`] runs
//! are dropped, which bounds what stale groups (of buffers the application dropped) hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Runs between sweeps; a group unused for this many runs is dropped at the next sweep.
const SWEEP: u64 = 64;

/// Groups kept at most; past this, a sweep also runs early.
const MAX_GROUPS: usize = 1 << 14;

/// One binding of a group: buffer, byte offset, byte size.
pub(crate) type Binding = (wgpu::Buffer, u64, u64);

/// What a bind group binds: its layout and, per binding number from 0, one buffer range.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct BindKey {
    layout: Option<wgpu::BindGroupLayout>,
    entries: Vec<Binding>,
}

impl BindKey {
    /// Starts describing a group of `layout` (clears what the key held).
    pub fn reset(&mut self, layout: &wgpu::BindGroupLayout) {
        self.layout = Some(layout.clone());
        self.entries.clear();
    }

    /// Adds the next binding.
    pub fn push(&mut self, buffer: &wgpu::Buffer, offset: u64, size: u64) {
        self.entries.push((buffer.clone(), offset, size));
    }
}

struct Cached {
    group: wgpu::BindGroup,
    /// The run count when a run last used the group.
    used: u64,
}

/// The bind groups of one device, by what they bind.
#[derive(Default)]
pub(crate) struct BindCache {
    groups: Mutex<HashMap<BindKey, Cached>>,
    /// Runs submitted so far (the clock of `Cached::used`).
    runs: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl BindCache {
    /// The group binding `key`, made on `device` on a miss.
    pub fn get(&self, device: &wgpu::Device, key: &BindKey) -> Option<wgpu::BindGroup> {
        let now = self.runs.load(Ordering::Relaxed);
        if let Some(c) = self.lock().get_mut(key) {
            c.used = now;
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Some(c.group.clone());
        }
        let layout = key.layout.as_ref()?;
        let entries: Vec<wgpu::BindGroupEntry<'_>> = key
            .entries
            .iter()
            .enumerate()
            .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    size: wgpu::BufferSize::new(*size),
                }),
            })
            .collect();
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries });
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key.clone(), Cached { group: group.clone(), used: now });
        Some(group)
    }

    /// Counts a submitted run; every [`SWEEP`] runs (or when too many groups are kept) drops
    /// the groups no run used during the last [`SWEEP`] runs.
    pub fn run_submitted(&self) {
        let now = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let mut groups = self.lock();
        if now.is_multiple_of(SWEEP) || groups.len() > MAX_GROUPS {
            groups.retain(|_, c| c.used + SWEEP >= now);
        }
    }

    /// Groups reused and groups made so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }

    /// Groups kept now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Drops every cached group (and so the buffers only they kept alive).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BindKey, Cached>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
