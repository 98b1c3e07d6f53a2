//! When a dropped tensor's buffer may serve again.
//!
//! A run hands back the buffers it no longer reads (`RunState::release`) and they return to the
//! pool once its work is submitted. A tensor that leaves the run (an output) is dropped later,
//! by the executor after copying it to the host or by the application: its buffer may then still
//! be named by work some open run recorded but has not submitted yet. So a dropped buffer waits
//! here until every run that was open when it was dropped has ended (submitted or abandoned its
//! recording); runs begun later cannot name it, as nothing holds its tensor any more. Returning
//! outputs to the pool keeps the buffers of a plan's runs the same run after run, which lets
//! their bind groups be reused (see `bind_cache.rs`).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// Open runs and the dropped buffers waiting for them.
#[derive(Default)]
pub(crate) struct Recycler {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The number the next run gets.
    next_run: u64,
    /// Runs begun and not yet ended.
    open: BTreeSet<u64>,
    /// Dropped buffers, each with the number of the first run begun after its drop.
    waiting: Vec<(u64, wgpu::Buffer)>,
}

impl State {
    /// The waiting buffers no open run can still name, taken out.
    fn ready(&mut self) -> Vec<wgpu::Buffer> {
        let oldest = self.open.first().copied().unwrap_or(u64::MAX);
        let (ready, wait): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(|(after, _)| oldest >= *after);
        self.waiting = wait;
        ready.into_iter().map(|(_, b)| b).collect()
    }
}

impl Recycler {
    /// Registers a run that begins now; returns its number and the buffers ready for the pool.
    pub fn begin(&self) -> (u64, Vec<wgpu::Buffer>) {
        let mut s = self.lock();
        let id = s.next_run;
        s.next_run += 1;
        s.open.insert(id);
        (id, s.ready())
    }

    /// Marks run `id` ended; returns the buffers now ready for the pool.
    pub fn end(&self, id: u64) -> Vec<wgpu::Buffer> {
        let mut s = self.lock();
        s.open.remove(&id);
        s.ready()
    }

    /// Takes the buffer of a dropped tensor; returns the buffers ready for the pool (this one
    /// included when no run is open).
    pub fn dropped(&self, buffer: wgpu::Buffer) -> Vec<wgpu::Buffer> {
        let mut s = self.lock();
        let after = s.next_run;
        s.waiting.push((after, buffer));
        s.ready()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(device: &wgpu::Device) -> wgpu::Buffer {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 256,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    }

    #[test]
    fn a_dropped_buffer_waits_for_the_runs_open_at_its_drop() {
        let Ok(ctx) = crate::GpuContext::new(&crate::WgpuOptions::default()) else { return };
        let r = Recycler::default();
        let (a, _) = r.begin();
        let (b, _) = r.begin();
        assert!(r.dropped(buffer(&ctx.device)).is_empty(), "runs a and b may still name it");
        let (c, ready) = r.begin();
        assert!(ready.is_empty());
        assert!(r.end(b).is_empty(), "run a is still open");
        assert_eq!(r.end(a).len(), 1, "c began after the drop, so it cannot name the buffer");
        assert!(r.end(c).is_empty());
        assert_eq!(r.dropped(buffer(&ctx.device)).len(), 1, "no run open: ready at once");
    }
}
