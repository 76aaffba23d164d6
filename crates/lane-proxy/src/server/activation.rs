//! Socket activation: listening sockets inherited from systemd (or
//! `systemd-socket-activate --fdname=alice …`), one per agent, named by
//! their `FileDescriptorName`.
//!
//! The protocol (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`) is read, and
//! the variables cleared so that no child inherits them, by oxidepm-sys,
//! which alone takes ownership of inherited descriptors.

pub use oxidepm_sys::activation::{into_listener, take_from_env, ActivatedSocket};
