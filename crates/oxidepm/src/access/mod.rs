//! Layer 2: who is asking. The identity of a connection's peer, the
//! permission tiers and the audit trail.

pub mod claim;
pub mod gate;
pub mod identity;
pub mod peer;
pub mod policy;
pub mod reach;

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
    /// Only these apps, by name or `@tag`: an adapter's grant, or an
    /// agent's (itself and what `[agents.<name>]` grants it).
    Only(Vec<String>),
}

impl Scope {
    /// Whether the app `name` with `tags` is inside the scope. The one
    /// test of a grant: the gate and the operations that act on "the apps
    /// in my grant" both use it.
    pub fn covers(&self, name: &str, tags: &[String]) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(grant) => grant.iter().any(|g| match g.strip_prefix('@') {
                Some(tag) => tags.iter().any(|t| t == tag),
                None => g == name,
            }),
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
    /// The apps it may touch.
    pub scope: Scope,
    /// The uid a non-human is: its own apps run as this uid and no other
    /// (a defined agent's or adapter's, the peer's otherwise); `None` for
    /// a human, or when it is not known (a non-human then defines none).
    pub uid: Option<u32>,
    /// The front end the request came through, as its sender named it
    /// (`mcp:restart`): written in the audit row, never a source of rights.
    pub via: Option<String>,
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
