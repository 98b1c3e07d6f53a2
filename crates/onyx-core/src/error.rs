//! The one error type of Onyx.

use crate::DataType;

/// Where in a model an error happened: the node's name and op type, and which input or
/// attribute. Empty fields are left out of the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// Name of the node (may be empty in ONNX files).
    pub node: String,
    /// Op type of the node, e.g. `Conv`.
    pub op: String,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.node.is_empty(), self.op.is_empty()) {
            (true, true) => write!(f, "graph"),
            (true, false) => write!(f, "{} node", self.op),
            (false, true) => write!(f, "node '{}'", self.node),
            (false, false) => write!(f, "{} node '{}'", self.op, self.node),
        }
    }
}

/// Every error Onyx returns. Variants carry where (`at`: node and op), what was expected and
/// what was found.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields named for what they hold: at, index, expected, found
pub enum Error {
    /// The model file could not be read or decoded.
    #[error("cannot load model: {0}")]
    Load(String),
    /// The model is structurally invalid (cycle, dangling input, duplicate output, ...).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// A model IR version or opset version newer than this build knows.
    #[error("unsupported version: {0}")]
    Version(String),
    /// An op, domain or opset version that Onyx does not know.
    #[error("{at}: unknown operator {domain}::{op} (opset {version}): {reason}")]
    UnknownOp { at: Location, domain: String, op: String, version: i64, reason: String },
    /// A node's attribute is missing, of the wrong type or has an invalid value.
    #[error("{at}: attribute '{name}': expected {expected}, found {found}")]
    Attribute { at: Location, name: String, expected: String, found: String },
    /// A node input has the wrong dtype, rank or shape.
    #[error("{at}: input {index}: expected {expected}, found {found}")]
    NodeInput { at: Location, index: usize, expected: String, found: String },
    /// A kernel failed for a reason other than its inputs' types or shapes.
    #[error("{at}: {message}")]
    Node { at: Location, message: String },
    /// A run-time graph input is missing, unknown, or has the wrong dtype or shape.
    #[error("input '{name}': expected {expected}, found {found}")]
    Input { name: String, expected: String, found: String },
    /// A requested output name does not exist.
    #[error("unknown output '{name}': the model's outputs are {available}")]
    UnknownOutput { name: String, available: String },
    /// Nothing can run a node (no EP takes it, or CPU fallback is disabled).
    #[error("no execution provider can run {0}")]
    Unsupported(String),
    /// A tensor's element type is not what the caller asked for.
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DType { expected: DataType, found: DataType },
    /// A value is not of the kind asked for (tensor, sequence, map, optional).
    #[error("value kind mismatch: expected {expected}, found {found}")]
    ValueKind { expected: String, found: String },
    /// A device (GPU) error: lost device, out of memory, wrong device.
    #[error("device error: {0}")]
    Device(String),
    /// A bad argument to a library call (session options, tensor construction, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A resource limit of the session (see `session::limits::Limits`) would be exceeded:
    /// raised before the allocation.
    #[error("{what}: {size} {unit}, over the limit {option} = {limit}")]
    Limit { what: String, size: u64, unit: String, option: String, limit: u64 },
    /// The run was asked to stop ([`crate::session::RunOptions`]: terminate, or an interrupt).
    #[error("the run was terminated: its RunOptions asked it to stop")]
    Terminated,
    /// I/O on a model or data file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A node-level error for `at` with a free-form message.
    pub fn node(at: &Location, message: impl Into<String>) -> Self {
        Error::Node { at: at.clone(), message: message.into() }
    }

    /// A node-input error: input `index` of the node at `at`.
    pub fn input(at: &Location, index: usize, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Error::NodeInput { at: at.clone(), index, expected: expected.into(), found: found.into() }
    }

    /// An attribute error on the node at `at`.
    pub fn attribute(at: &Location, name: &str, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Error::Attribute { at: at.clone(), name: name.to_string(), expected: expected.into(), found: found.into() }
    }

    /// Prefixes a node location to errors raised by kernels that did not know it.
    pub fn at(self, loc: &Location) -> Self {
        match self {
            Error::DType { expected, found } => {
                Error::Node { at: loc.clone(), message: format!("dtype mismatch: expected {expected}, found {found}") }
            }
            Error::InvalidArgument(m) => Error::Node { at: loc.clone(), message: m },
            Error::ValueKind { expected, found } => {
                Error::Node { at: loc.clone(), message: format!("expected a {expected}, found a {found}") }
            }
            other => other,
        }
    }
}
