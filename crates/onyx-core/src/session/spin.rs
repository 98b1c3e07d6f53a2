//! Intra-op threads kept awake through a run, as ONNX Runtime's are (its
//! `session.intra_op.allow_spinning`, on by default). A rayon worker that finds no work
//! sleeps after a few dozen yields, and waking it costs tens of microseconds: a BERT-style
//! encoder, whose parallel kernels alternate with small sequential ones, put its second
//! thread to sleep about 70 times per run (4 ms of 15 on a 2-core VM).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::Device;

/// How long a worker looks for work without finding any before it gives up spinning for the
/// rest of the run (and sleeps as rayon's workers do): bounds the CPU time burnt while a run
/// waits on something else, a GPU for one.
const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// Idle rounds between two looks at the clock.
const ROUNDS_PER_CLOCK: u32 = 64;

/// Whether a session spins: when the option is on and every provider runs on the host. A
/// session with a GPU provider leaves the CPU to the application while its runs wait on
/// the GPU.
pub(super) fn wanted(enabled: bool, mut devices: impl Iterator<Item = Device>) -> bool {
    enabled && devices.all(|d| d == Device::Cpu)
}

/// Runs `run` on the current thread of `pool` (call it inside `pool.install`) while the
/// pool's other threads run its parallel work as it comes instead of sleeping between, until
/// `run` returns (or unwinds) or they find nothing for [`IDLE_LIMIT`].
pub(super) fn with_workers_awake<R>(pool: &rayon::ThreadPool, run: impl FnOnce() -> R) -> R {
    let runner = rayon::current_thread_index();
    if pool.current_num_threads() < 2 || runner.is_none() {
        return run();
    }
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    // One job per thread, each bound to its thread: none can land on the runner's stack and
    // spin there while the run waits for it.
    pool.spawn_broadcast(move |ctx| {
        if Some(ctx.index()) != runner {
            keep_busy(&flag);
        }
    });
    let _stop = StopOnDrop(done);
    run()
}

/// Runs the pool's pending jobs until `done` or [`IDLE_LIMIT`] without any.
fn keep_busy(done: &AtomicBool) {
    let mut idle_since = Instant::now();
    let mut rounds = 0u32;
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {
                rounds = 0;
                idle_since = Instant::now();
            }
            _ => {
                std::hint::spin_loop();
                rounds += 1;
                if rounds.is_multiple_of(ROUNDS_PER_CLOCK) && idle_since.elapsed() > IDLE_LIMIT {
                    return;
                }
            }
        }
    }
}

/// Sets the flag when the run ends, however it ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn parallel_work_inside_runs_everywhere_and_the_workers_stop_after() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for _ in 0..20 {
            let sum = AtomicUsize::new(0);
            let got = pool.install(|| {
                with_workers_awake(&pool, || {
                    use rayon::prelude::*;
                    (0..1000usize).into_par_iter().for_each(|i| {
                        sum.fetch_add(i, Ordering::Relaxed);
                    });
                    7
                })
            });
            assert_eq!((got, sum.into_inner()), (7, 499_500));
        }
        // A run that ends by unwinding stops the workers too: the pool still serves
        // work afterwards (a spinning job would hold its thread for IDLE_LIMIT at most anyway).
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| with_workers_awake(&pool, || panic!("kernel failed")))
        }));
        assert!(unwound.is_err());
        assert_eq!(pool.install(|| rayon::join(|| 1, || 2)), (1, 2));
    }

    #[test]
    fn a_worker_that_finds_no_work_stops_spinning() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let never = AtomicBool::new(false);
        let start = Instant::now();
        pool.install(|| keep_busy(&never));
        assert!(start.elapsed() >= IDLE_LIMIT);
    }

    #[test]
    fn only_host_sessions_spin() {
        assert!(wanted(true, [Device::Cpu, Device::Cpu].into_iter()));
        assert!(!wanted(false, [Device::Cpu].into_iter()));
        assert!(!wanted(true, [Device::Wgpu(0), Device::Cpu].into_iter()));
        assert!(!wanted(true, [Device::Cpu, Device::Cuda(1)].into_iter()));
    }

    #[test]
    fn outside_a_pool_or_with_one_thread_the_run_just_runs() {
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        assert_eq!(one.install(|| with_workers_awake(&one, || 5)), 5);
        assert_eq!(with_workers_awake(&one, || 6), 6);
    }
}
