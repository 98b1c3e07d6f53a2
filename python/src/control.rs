//! Stopping runs: `RunOptions.terminate` (set from any thread) and Ctrl-C. A run made on the
//! interpreter's main thread checks for pending signals every few milliseconds while it works
//! (Onyx's `RunOptions::with_interrupt_check`); a Ctrl-C stops it at its next node and raises
//! KeyboardInterrupt.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::ThreadId;

use pyo3::prelude::*;

use crate::errors::{to_py, Fail, Phase};

/// The thread that imported the module: the interpreter's main thread, the only one that
/// receives signals.
static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Notes the main thread (called when the module is imported).
pub fn init() {
    MAIN_THREAD.get_or_init(|| std::thread::current().id());
}

/// The terminate flag of a Python `RunOptions`: setting it stops the runs using it.
#[pyclass(frozen, module = "onyx._onyx", name = "RunFlag")]
#[derive(Default)]
pub struct RunFlag {
    options: onyx::RunOptions,
}

#[pymethods]
impl RunFlag {
    #[new]
    fn new() -> Self {
        RunFlag::default()
    }

    /// Asks the runs using this flag to stop (true) or lets later runs go (false).
    fn set(&self, terminate: bool) {
        self.options.set_terminate(terminate);
    }

    /// Whether runs are asked to stop.
    fn get(&self) -> bool {
        self.options.is_terminated()
    }
}

/// A run's options, and where a signal's exception is kept when one stops it.
pub struct Control {
    pub options: onyx::RunOptions,
    pending: Arc<Mutex<Option<PyErr>>>,
}

impl Control {
    /// The options of a run under `flag` (none: a fresh one), with the signal check on the
    /// main thread.
    pub fn new(flag: Option<&RunFlag>) -> Control {
        Control::with_options(flag.map(|f| f.options.clone()).unwrap_or_default())
    }

    /// `options` (their terminate flag kept), with the signal check on the main thread.
    pub fn with_options(options: onyx::RunOptions) -> Control {
        let pending: Arc<Mutex<Option<PyErr>>> = Arc::default();
        if MAIN_THREAD.get() != Some(&std::thread::current().id()) {
            return Control { options, pending };
        }
        let seen = pending.clone();
        let options = options.with_interrupt_check(move || {
            Python::attach(|py| match py.check_signals() {
                Ok(()) => false,
                Err(e) => {
                    *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    true
                }
            })
        });
        Control { options, pending }
    }

    /// The run's result as Python sees it: a signal's exception (KeyboardInterrupt) when one
    /// stopped it, ONNX Runtime's Fail for a terminate flag, else the error's class.
    pub fn finish<T>(&self, result: onyx::Result<T>) -> PyResult<T> {
        match result {
            Ok(v) => Ok(v),
            Err(onyx::Error::Terminated) => Err(self.stopped()),
            Err(e) => Err(to_py(e, Phase::Run)),
        }
    }

    /// The exception of a run that was stopped: the signal's (KeyboardInterrupt) when one
    /// stopped it, else ONNX Runtime's Fail for the terminate flag.
    pub fn stopped(&self) -> PyErr {
        self.signal().unwrap_or_else(|| Fail::new_err("Exiting due to terminate flag being set to true."))
    }

    /// The exception of the signal that stopped the run, if one did.
    pub fn signal(&self) -> Option<PyErr> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}
