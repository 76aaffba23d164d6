//! What a lane may send, and how it is rewritten: pure functions from a
//! parsed command to a verdict, no I/O and no state.

pub mod agent;
pub mod consumer_arg;
pub mod group_scope;
pub mod handshake;
pub mod responder;
