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

/// The apps a caller may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every app (tiers and protection still apply).
    All,
    /// Only these apps, by name or `@tag`: an adapter's grant.
    Only(Vec<String>),
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
    /// The apps it may touch.
    pub scope: Scope,
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
    /// Decides who the peer on socket `fd` is, once, at accept (`accepted`:
    /// clock ticks since boot), pinned as `pin` says.
    pub fn identify<P: ProcessIndex + ?Sized>(
        fd: std::os::fd::BorrowedFd<'_>,
        socket: SocketKind,
        index: &P,
        pin: peer::PinMode,
        accepted: u64,
    ) -> Peer {
        let info = peer::identify(fd, index, pin, accepted);
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
