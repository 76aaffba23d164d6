//! oxidepm: a process manager that knows who is asking.
//!
//! Layer 1 (supervision) lives in [`supervise`], layer 2 (who is asking) in
//! [`access`], the sockets in [`server`], state in [`store`]; [`daemon`]
//! wires them together and [`cli`] is the command-line client.

pub mod access;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod lanes;
pub mod paths;
pub mod server;
pub mod store;
pub mod supervise;
pub mod timefmt;
