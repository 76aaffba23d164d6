//! Layer 2: who is asking. The identity of a connection's peer, the
//! permission tiers and the audit trail.

pub mod claim;
pub mod identity;
pub mod peer;
pub mod policy;

use oxidepm_proto::{Actor, Tier};

/// Which socket a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// `daemon.sock`, the main socket.
    Daemon,
    /// `agent.sock`, where everyone is class `ai`.
    Agent,
    /// An agent's lane, through the `ops` responder.
    Lane,
}

impl SocketKind {
    /// `daemon` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketKind::Daemon => "daemon",
            SocketKind::Agent => "agent",
            SocketKind::Lane => "lane",
        }
    }
}

/// What the daemon decided about a request's sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who is asking.
    pub actor: Actor,
    /// The socket the request came in on.
    pub socket: SocketKind,
    /// What the actor may do.
    pub tier: Tier,
    /// For adapters: the apps (names and `@tags`) the grant covers.
    pub scope: Option<Vec<String>>,
}
