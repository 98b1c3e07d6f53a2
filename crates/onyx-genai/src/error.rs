//! Errors of model folders, tokenizers and generation.

use std::path::PathBuf;

/// What went wrong, naming the file and key, or the argument, at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the model folder is missing or malformed.
    #[error("{}: {message}", file.display())]
    File {
        /// The file (genai_config.json, tokenizer.json, ...).
        file: PathBuf,
        /// What is wrong, with the key where there is one.
        message: String,
    },
    /// A caller's argument is out of range or contradicts the model.
    #[error("{0}")]
    InvalidArgument(String),
    /// The runtime failed to load or run the model.
    #[error(transparent)]
    Runtime(#[from] onyx_runtime::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}
