//! Integration tests: the real binaries, real processes, real sockets.
//! Each test gets its own OXIDEPM_HOME and stops everything it started.

mod access;
mod bridge;
mod harness;
mod lane_budgets;
mod lanes;
mod lifecycle;
mod ops;
mod supervision;
