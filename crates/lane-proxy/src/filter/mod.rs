//! What a lane may send, and how it is rewritten: pure functions from a
//! parsed command to a [`verdict::Verdict`], no I/O and no state. An
//! agent's lane is judged by [`agent`], a responder's by [`responder`];
//! the pieces both use (consumer names, group scope, the handshake) are
//! modules of their own.

pub mod agent;
pub mod consumer_arg;
pub mod group_scope;
pub mod handshake;
pub mod responder;
pub mod text;
pub mod verdict;

use crate::resp::Command;
use verdict::{Policy, Verdict};

/// Decides what to do with `cmd`, sent on `policy.agent`'s lane.
pub fn decide(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    if policy.responder {
        responder::decide(cmd, policy)
    } else {
        agent::decide(cmd, policy)
    }
}
