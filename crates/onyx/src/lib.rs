//! Onyx facade.
pub use onyx_core::*;
