//! Stopping a run early: ONNX Runtime's `RunOptions.terminate`, set from any thread, and an
//! interrupt check (Ctrl-C in a Python process) made on the calling thread while a run works.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Options of a run. A run checks them before each node and stops with [`crate::Error::Terminated`]
/// once [`RunOptions::set_terminate`] was called (on these options or a clone of them) or the
/// interrupt check answers true.
#[derive(Clone, Default)]
pub struct RunOptions {
    terminate: Arc<AtomicBool>,
    interrupt: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("terminate", &self.is_terminated())
            .field("interrupt_check", &self.interrupt.is_some())
            .finish()
    }
}

impl RunOptions {
    /// Options that never stop a run until told to.
    pub fn new() -> Self {
        RunOptions::default()
    }

    /// Asks the runs using these options (or a clone) to stop at their next node; `false` lets
    /// later runs go again.
    pub fn set_terminate(&self, terminate: bool) {
        self.terminate.store(terminate, Ordering::Relaxed);
    }

    /// Whether runs are asked to stop.
    pub fn is_terminated(&self) -> bool {
        self.terminate.load(Ordering::Relaxed)
    }

    /// A check made on the thread that called the run, every [`RunOptions::INTERRUPT_PERIOD`]
    /// while the run works on the session's threads: answering true stops that run (not the
    /// other runs sharing these options, and the terminate flag stays as it was). For what only the calling thread can see, such as a
    /// Python interpreter's pending Ctrl-C. A session whose last run was shorter than half the
    /// period runs the next one unwatched (watching costs thread hand-offs a short run would
    /// feel): the check is then not made during it.
    pub fn with_interrupt_check(mut self, check: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.interrupt = Some(Arc::new(check));
        self
    }

    /// How often the interrupt check is made.
    pub const INTERRUPT_PERIOD: Duration = Duration::from_millis(20);

    pub(crate) fn interrupt_check(&self) -> Option<&(dyn Fn() -> bool + Send + Sync)> {
        self.interrupt.as_deref()
    }
}
