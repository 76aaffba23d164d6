//! Layer 2: who is asking. The identity of a connection's peer, the
//! permission tiers and the audit trail.

pub mod claim;
pub mod gate;
pub mod identity;
pub mod peer;
pub mod policy;

pub use gate::Gate;

use oxidepm_proto::{Actor, Tier};
use peer::{PeerInfo, ProcessIndex};

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

/// What the daemon decided about a connection when it was accepted.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The socket it came in on.
    pub socket: SocketKind,
    /// Its credentials and place in the process tree.
    pub info: PeerInfo,
}

impl Peer {
    /// Decides who the peer on socket `fd` is, once, at accept.
    pub fn identify<P: ProcessIndex + ?Sized>(
        fd: libc::c_int,
        socket: SocketKind,
        index: &P,
    ) -> Peer {
        let info = peer::identify(fd, index);
        log::debug!(
            "{} socket: peer pid {:?} uid {:?} origin {:?}",
            socket.as_str(),
            info.pid,
            info.uid,
            info.origin
        );
        Peer { socket, info }
    }
}
