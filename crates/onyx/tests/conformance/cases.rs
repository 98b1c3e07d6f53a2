//! The node-test cases: finding them on disk, the ones skipped on purpose, per-case tolerances,
//! and the status a case ends with.

use std::path::{Path, PathBuf};

use crate::compare::Tolerance;

/// ONNX's tolerances for node tests (`onnx/backend/test/runner`: rtol 1e-3, atol 1e-7).
pub const DEFAULT_TOLERANCE: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-7 };

/// Cases that are not run, by name prefix, with the reason. Random ops compare against another
/// implementation's random numbers; training ops are out of scope for an inference runtime.
const SKIPPED_PREFIXES: &[(&str, &str)] = &[
    ("test_bernoulli", "random: the expected output comes from NumPy's RNG"),
    ("test_randomnormal", "random: the expected output comes from NumPy's RNG"),
    ("test_randomuniform", "random: the expected output comes from NumPy's RNG"),
    ("test_multinomial", "random: the expected output comes from NumPy's RNG"),
    ("test_adagrad", "training-only op (ai.onnx.preview.training)"),
    ("test_adam", "training-only op (ai.onnx.preview.training)"),
    ("test_momentum", "training-only op (ai.onnx.preview.training)"),
    ("test_nesterov_momentum", "training-only op (ai.onnx.preview.training)"),
    ("test_gradient", "training-only op (ai.onnx.preview.training)"),
];

/// Cases that are not run, by exact name, with the reason.
const SKIPPED_NAMES: &[(&str, &str)] = &[
    // Dropout with training_mode=1 and a ratio above 0 draws its mask from NumPy's RNG (the
    // `_zero_ratio` variants keep every element, so they are deterministic and do run).
    ("test_training_dropout", "random: Dropout training mask comes from NumPy's RNG"),
    ("test_training_dropout_default", "random: Dropout training mask comes from NumPy's RNG"),
    ("test_training_dropout_default_mask", "random: Dropout training mask comes from NumPy's RNG"),
    ("test_training_dropout_mask", "random: Dropout training mask comes from NumPy's RNG"),
];

/// Looser tolerances for single cases: (case name, rtol, atol, why). Empty until a case needs
/// one; every entry must say why ONNX's default cannot hold for it.
const LOOSER_TOLERANCES: &[(&str, f64, f64, &str)] = &[
    // The expected imaginary parts are exactly 0 but hold 1.9e-7 of float32 round-off (NumPy's
    // float32 FFT on outputs up to 54 in magnitude); Onyx's DFT sums in f64 and gives ~1e-15.
    ("test_dft_inverse", 1e-3, 1e-6, "float32 round-off in ONNX's expected zeros (|y| up to 54)"),
    ("test_dft_inverse_opset19", 1e-3, 1e-6, "float32 round-off in ONNX's expected zeros (|y| up to 54)"),
];

/// How one case ended on one provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Every output matched in every data set.
    Pass,
    /// Wrong values, a panic or a time-out.
    Fail,
    /// The model, the data or the run gave an error.
    Error,
    /// An op (or an op on this dtype) that no kernel implements.
    Unsupported,
    /// Not run on purpose (see the skip lists above).
    Skipped,
}

impl Status {
    /// Every status, in report order.
    pub const ALL: [Status; 5] = [Status::Pass, Status::Fail, Status::Error, Status::Unsupported, Status::Skipped];

    /// The word used in the expected-status files and the report.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Error => "error",
            Status::Unsupported => "unsupported",
            Status::Skipped => "skipped",
        }
    }

    /// The status called `word`.
    pub fn parse(word: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == word)
    }
}

/// A status with its one-line reason (empty for passes).
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The status.
    pub status: Status,
    /// Why it did not pass, on one line.
    pub reason: String,
}

impl Outcome {
    /// A pass.
    pub fn pass() -> Self {
        Outcome { status: Status::Pass, reason: String::new() }
    }

    /// A status with a reason, flattened to one line.
    pub fn new(status: Status, reason: impl AsRef<str>) -> Self {
        Outcome { status, reason: one_line(reason.as_ref()) }
    }
}

/// Collapses whitespace runs (newlines included) to single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One node test: a folder with `model.onnx` and `test_data_set_*`.
#[derive(Clone, Debug)]
pub struct Case {
    /// The folder name, e.g. `test_abs`.
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
}

/// Every case folder under `root` (sorted by name) whose name contains `filter`, if given.
pub fn discover(root: &Path, filter: Option<&str>) -> Vec<Case> {
    let entries = std::fs::read_dir(root).unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()));
    let mut cases: Vec<Case> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display())).path())
        .filter(|dir| dir.join("model.onnx").is_file())
        .map(|dir| Case { name: dir.file_name().unwrap().to_string_lossy().into_owned(), dir })
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// Why `case` is skipped, or `None` when it runs.
pub fn skip_reason(case: &str) -> Option<&'static str> {
    let by_name = SKIPPED_NAMES.iter().find(|(n, _)| *n == case);
    let by_prefix = SKIPPED_PREFIXES.iter().find(|(p, _)| case.starts_with(p));
    by_name.or(by_prefix).map(|(_, reason)| *reason)
}

/// The tolerance `case`'s outputs are compared with.
pub fn tolerance(case: &str) -> Tolerance {
    LOOSER_TOLERANCES
        .iter()
        .find(|(n, ..)| *n == case)
        .map(|&(_, rtol, atol, _)| Tolerance { rtol, atol })
        .unwrap_or(DEFAULT_TOLERANCE)
}
