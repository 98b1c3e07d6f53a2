//! Cache prefetch hints for kernels that stream packed weights which the hardware
//! prefetchers do not see coming (a tile rereading its block from L1 makes no misses for them
//! to run ahead of). A hint never faults: any address is fine, and it is a no-op off x86_64.

/// Floats in a cache line, what one prefetch brings in.
pub(crate) const LINE_FLOATS: usize = 64 / size_of::<f32>();

/// Asks for the cache line at `p` in L1.
#[inline(always)]
pub(crate) fn to_l1(p: *const f32) {
    fetch::<false>(p);
}

/// Asks for the cache line at `p` in L2 (not L1, where the current block's data stays).
#[inline(always)]
pub(crate) fn to_l2(p: *const f32) {
    fetch::<true>(p);
}

#[inline(always)]
fn fetch<const L2_ONLY: bool>(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address; SSE is part of x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        if L2_ONLY {
            _mm_prefetch::<_MM_HINT_T1>(p.cast())
        } else {
            _mm_prefetch::<_MM_HINT_T0>(p.cast())
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A run of floats prefetched into L2 a few lines at a time, spread over the steps of the work
/// that comes before it is read.
pub(crate) struct Stream {
    next: *const f32,
    end: *const f32,
    lines_per_step: usize,
}

impl Stream {
    /// The floats `run`, to be prefetched over `steps` calls of [`Stream::step`].
    pub fn new(run: &[f32], steps: usize) -> Self {
        let lines = run.len().div_ceil(LINE_FLOATS);
        Stream { next: run.as_ptr(), end: run.as_ptr_range().end, lines_per_step: lines.div_ceil(steps.max(1)) }
    }

    /// Nothing to prefetch.
    pub fn none() -> Self {
        Stream { next: std::ptr::null(), end: std::ptr::null(), lines_per_step: 0 }
    }

    /// Prefetches the next few lines of the run.
    #[inline(always)]
    pub fn step(&mut self) {
        for _ in 0..self.lines_per_step {
            if self.next >= self.end {
                return;
            }
            to_l2(self.next);
            self.next = self.next.wrapping_add(LINE_FLOATS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_covers_its_run_in_the_steps_given_and_then_stops() {
        let run = vec![1.0f32; 1000];
        let mut s = Stream::new(&run, 7);
        assert_eq!(s.lines_per_step, 1000usize.div_ceil(16).div_ceil(7));
        for _ in 0..7 {
            s.step();
        }
        assert!(s.next >= s.end);
        let stopped = s.next;
        s.step();
        assert_eq!(s.next, stopped);
        let mut none = Stream::none();
        none.step();
        assert!(none.next.is_null());
    }
}
