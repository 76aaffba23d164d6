//! The log writer's interface as the daemon sees it; the writer itself is
//! the `oxidepm-logwriter` crate (one copy of its logic, run either as the
//! `oxidepm-logwriter` program or as `oxidepmd __logshim`).

#[cfg(test)]
pub use oxidepm_logwriter::copy_stream;
pub use oxidepm_logwriter::{WriterConfig as ShimConfig, ERR_INPUT_FD, MARKER};
