//! oxidepm: a process manager that knows who is asking.
//!
//! Layer 1 (supervision) lives in `supervise`, layer 2 (who is asking) in
//! `access`, the sockets in `server`, state in `store`, layer 3's daemon
//! side in `lanes`; `daemon` wires them together and `cli` is the
//! command-line client. The two binaries are thin: everything is private to
//! this crate but their entry points, so unused code shows.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod access;
mod bus;
mod cli;
mod client;
mod daemon;
mod lanes;
mod mcp;
mod paths;
mod server;
mod store;
mod supervise;
mod timefmt;

pub use cli::main as cli_main;
pub use daemon::entry::main as daemon_main;
/// The name of the cgroup v2 directory that holds a home's apps (for tools
/// and tests that tidy after a daemon killed with SIGKILL).
pub use supervise::cgroup::home_name as home_cgroup_name;
