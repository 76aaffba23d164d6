//! Integration tests: the real binaries, real processes, real sockets.
//! Each test gets its own OXIDEPM_HOME and stops everything it started.

mod access;
mod bridge;
mod containment;
mod harness;
mod lanes;
mod lifecycle;
mod ops;
mod supervision;
