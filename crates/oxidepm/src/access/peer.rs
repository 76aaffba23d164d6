//! Who is on the other end of a connection, decided once at accept from
//! the peer's credentials and its process tree, never from what it says.

use oxidepm_proto::{Actor, AppKind};
use oxidepm_sys::procfs::{self, ProcStat};
use oxidepm_sys::{peer, pidfd};
use std::os::fd::BorrowedFd;

/// Where a peer's process sits, as far as the daemon can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The peer could not be looked at (gone, or no credentials).
    Unknown,
    /// Not a descendant of the daemon: the claim table decides.
    Outside,
    /// In the process tree of an app.
    App {
        /// The app's name.
        name: String,
        /// The app's kind.
        kind: AppKind,
        /// Who defined the app.
        defined_by: Actor,
    },
    /// A descendant of the daemon that belongs to no app (fails closed).
    Unattributed,
}

/// An app as the origin of a peer in its process tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppOrigin {
    /// The app's name.
    pub name: String,
    /// The app's kind.
    pub kind: AppKind,
    /// Who defined the app.
    pub defined_by: Actor,
}

/// What deciding a peer's origin needs to know of the daemon's apps.
pub trait ProcessIndex {
    /// The app whose process (main process, or health probe) is `pid`
    /// started at `start_ticks`.
    fn app_of_process(&self, pid: u32, start_ticks: u64) -> Option<AppOrigin>;
}

/// The peer of a connection.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// Its pid.
    pub pid: Option<u32>,
    /// Its uid.
    pub uid: Option<u32>,
    /// Where it sits.
    pub origin: Origin,
}

/// The chain from `pid` up to the daemon (inclusive) or to init.
fn ancestry(pid: u32, daemon: u32) -> Option<Vec<ProcStat>> {
    let mut chain = Vec::new();
    let mut cur = pid;
    for _ in 0..4096 {
        let st = procfs::stat(cur)?;
        chain.push(st);
        if cur == daemon || st.ppid == 0 || cur == 1 {
            break;
        }
        cur = st.ppid;
    }
    Some(chain)
}

/// Decides the origin of the peer on socket `fd`. The peer is pinned by a
/// pidfd where the kernel offers one (else by its start time): if the
/// process is gone or replaced by the end of the walk, the answer is
/// `Unknown`, which is treated as an AI.
pub fn identify<P: ProcessIndex + ?Sized>(fd: BorrowedFd<'_>, index: &P) -> PeerInfo {
    let cred = peer::credentials(fd);
    let pid = cred.and_then(|c| c.pid);
    let uid = cred.map(|c| c.uid);
    let unknown = PeerInfo {
        pid,
        uid,
        origin: Origin::Unknown,
    };
    let Some(pid) = pid else { return unknown };
    let pidfd = peer::pidfd(fd);
    let daemon = std::process::id();
    let Some(chain) = ancestry(pid, daemon) else {
        return unknown;
    };
    let pinned = match &pidfd {
        Some(p) => pidfd::is_alive(p),
        None => procfs::stat(pid).is_some_and(|s| s.start_ticks == chain[0].start_ticks),
    };
    if !pinned {
        return unknown;
    }
    let under_daemon = chain.last().is_some_and(|s| s.pid == daemon);
    let session = chain[0].session;
    // The peer's own ancestors first, then its session: a process that an
    // app double-forked was re-parented to the daemon but kept the app's
    // session.
    let by_chain = chain
        .iter()
        .filter(|s| s.pid != daemon)
        .find_map(|s| index.app_of_process(s.pid, s.start_ticks));
    let by_session = || {
        let leader = procfs::stat(session)?;
        index.app_of_process(session, leader.start_ticks)
    };
    let origin = match by_chain.or_else(|| under_daemon.then(by_session).flatten()) {
        Some(a) => Origin::App {
            name: a.name,
            kind: a.kind,
            defined_by: a.defined_by,
        },
        None if under_daemon => Origin::Unattributed,
        None => Origin::Outside,
    };
    PeerInfo {
        pid: Some(pid),
        uid,
        origin,
    }
}
