//! Who is on the other end of a connection, decided once at accept from
//! the peer's credentials and where its process sits, never from what it
//! says.
//!
//! Where the process sits: first its cgroup (one per app, where cgroups
//! are in force: membership that no fork, `setsid`, re-parenting or daemon
//! restart escapes); then, for a process outside this home's cgroups, its
//! ancestors up to the daemon and the recorded sessions of the apps.
//!
//! Pinning: every fact is read through the pid, which names the peer only
//! while the peer lives. With a pidfd of the peer (`SO_PEERPIDFD`, taken
//! by the kernel at connect; Linux 6.5+), the peer being alive after the
//! reads proves they were of the peer. Without one, the peer's start time
//! must be no later than the accept (a process that started after it
//! cannot be the one that connected) and must be the same after the reads
//! as before them. Either way a peer that fails is `Unknown`, which is
//! treated as an AI (`ai:unverified`). The start-time rule still trusts a
//! pid reused between the peer's connect and the accept; only a pidfd
//! closes that window.

use oxidepm_proto::{Actor, AppKind};
use oxidepm_sys::procfs::{self, ProcStat};
use oxidepm_sys::{cgroup, peer, pidfd};
use std::os::fd::BorrowedFd;

/// The environment variable that forces the start-time pinning of kernels
/// without `SO_PEERPIDFD` (`OXIDEPM_PEER_PIN=starttime`): for testing
/// the path that older kernels take.
pub const PIN_ENV: &str = "OXIDEPM_PEER_PIN";

/// Where a peer's process sits, as far as the daemon can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The peer could not be looked at (gone, replaced, or not pinned).
    Unknown,
    /// Not a process of the daemon's: the claim table decides.
    Outside,
    /// A process of an app.
    App {
        /// The app's name.
        name: String,
        /// The app's kind.
        kind: AppKind,
        /// Who defined the app.
        defined_by: Actor,
    },
    /// A process of the daemon's that belongs to no app (fails closed).
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

/// Where a cgroup puts a process, as the daemon's index says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPlace {
    /// In this app's cgroup.
    App(AppOrigin),
    /// In this home's cgroup, in no app's: attribution fails closed.
    Home,
    /// Outside this home's cgroups, or cgroups are off.
    Elsewhere,
}

/// What deciding a peer's origin needs to know of the daemon's apps.
pub trait ProcessIndex {
    /// The app whose process (main process, or health probe) is `pid`
    /// started at `start_ticks`.
    fn app_of_process(&self, pid: u32, start_ticks: u64) -> Option<AppOrigin>;
    /// Where a process in cgroup `path` (its `0::` line of
    /// `/proc/<pid>/cgroup`) belongs.
    fn app_of_cgroup(&self, path: &str) -> CgroupPlace;
    /// The app that recorded session `sid`, led by a process that started
    /// at `leader_start` (`None`: the leader is gone).
    fn app_of_session(&self, sid: u32, leader_start: Option<u64>) -> Option<AppOrigin>;
}

/// How a peer is pinned while it is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// By the pidfd of `SO_PEERPIDFD` where the kernel offers one, else by
    /// start time.
    Pidfd,
    /// By start time only, as on kernels before 6.5.
    StartTime,
}

impl PinMode {
    /// The mode `OXIDEPM_PEER_PIN` asks for (`starttime`), else `Pidfd`.
    /// Read once, at daemon start.
    pub fn from_env() -> PinMode {
        match std::env::var(PIN_ENV).as_deref() {
            Ok("starttime") => PinMode::StartTime,
            _ => PinMode::Pidfd,
        }
    }
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

/// Whether a peer without a pidfd is pinned: it started no later than the
/// accept (`accepted`, clock ticks since boot, as start times are), and
/// its start time read after the walk (`after`; `None` when it is gone)
/// is the one read before it.
pub fn start_time_pins(accepted: u64, before: u64, after: Option<u64>) -> bool {
    before <= accepted && after == Some(before)
}

/// The chain from `pid` up to the daemon (inclusive) or to init.
fn ancestry(first: ProcStat, daemon: u32) -> Vec<ProcStat> {
    let mut chain = vec![first];
    let mut cur = first;
    for _ in 0..4096 {
        if cur.pid == daemon || cur.ppid == 0 || cur.pid == 1 {
            break;
        }
        match procfs::stat(cur.ppid) {
            Some(st) => {
                chain.push(st);
                cur = st;
            }
            None => break,
        }
    }
    chain
}

/// Where the process `first` (the peer, read once) sits.
fn locate<P: ProcessIndex + ?Sized>(first: ProcStat, index: &P) -> Origin {
    let app = |a: AppOrigin| Origin::App {
        name: a.name,
        kind: a.kind,
        defined_by: a.defined_by,
    };
    match cgroup::path_of(first.pid).map(|p| index.app_of_cgroup(&p)) {
        Some(CgroupPlace::App(a)) => return app(a),
        Some(CgroupPlace::Home) => return Origin::Unattributed,
        Some(CgroupPlace::Elsewhere) | None => {}
    }
    let daemon = std::process::id();
    let chain = ancestry(first, daemon);
    let under_daemon = chain.last().is_some_and(|s| s.pid == daemon);
    // The peer's own ancestors first, then its session: a process that an
    // app double-forked kept the app's session, and the session was
    // recorded, so it is found after a daemon restart too.
    let by_chain = chain
        .iter()
        .filter(|s| s.pid != daemon)
        .find_map(|s| index.app_of_process(s.pid, s.start_ticks));
    let by_session = || {
        let leader = procfs::stat(first.session).map(|l| l.start_ticks);
        index.app_of_session(first.session, leader)
    };
    match by_chain.or_else(by_session) {
        Some(a) => app(a),
        None if under_daemon => Origin::Unattributed,
        None => Origin::Outside,
    }
}

/// Decides the origin of the peer on socket `fd`, accepted at `accepted`
/// (clock ticks since boot, see [`oxidepm_sys::clock::boot_ticks`]),
/// pinned as `pin` says.
pub fn identify<P: ProcessIndex + ?Sized>(
    fd: BorrowedFd<'_>,
    index: &P,
    pin: PinMode,
    accepted: u64,
) -> PeerInfo {
    let cred = peer::credentials(fd);
    let pid = cred.and_then(|c| c.pid);
    let uid = cred.map(|c| c.uid);
    let unknown = PeerInfo {
        pid,
        uid,
        origin: Origin::Unknown,
    };
    let Some(pid) = pid else { return unknown };
    let pidfd = match pin {
        PinMode::Pidfd => peer::pidfd(fd),
        PinMode::StartTime => None,
    };
    let Some(first) = procfs::stat(pid) else {
        return unknown;
    };
    let origin = locate(first, index);
    let pinned = match &pidfd {
        Some(p) => pidfd::is_alive(p),
        None => start_time_pins(
            accepted,
            first.start_ticks,
            procfs::stat(pid).map(|s| s.start_ticks),
        ),
    };
    if !pinned {
        return unknown;
    }
    PeerInfo {
        pid: Some(pid),
        uid,
        origin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    /// An index that knows no app.
    struct NoApps;

    impl ProcessIndex for NoApps {
        fn app_of_process(&self, _: u32, _: u64) -> Option<AppOrigin> {
            None
        }
        fn app_of_cgroup(&self, _: &str) -> CgroupPlace {
            CgroupPlace::Elsewhere
        }
        fn app_of_session(&self, _: u32, _: Option<u64>) -> Option<AppOrigin> {
            None
        }
    }

    #[test]
    fn the_start_time_rule() {
        // Started before the accept, the same after the walk.
        assert!(start_time_pins(100, 90, Some(90)));
        assert!(start_time_pins(100, 100, Some(100)));
        // Started after the accept: not the process that connected.
        assert!(!start_time_pins(100, 101, Some(101)));
        // Replaced during the walk, or gone.
        assert!(!start_time_pins(100, 90, Some(95)));
        assert!(!start_time_pins(100, 90, None));
    }

    #[test]
    fn a_peer_is_pinned_in_both_modes() {
        // The peer is this process, which is "the daemon" here: a
        // descendant-or-self of the daemon in no app is unattributed.
        let (a, _b) = UnixStream::pair().unwrap();
        let now = oxidepm_sys::clock::boot_ticks();
        for pin in [PinMode::Pidfd, PinMode::StartTime] {
            let p = identify(a.as_fd(), &NoApps, pin, now);
            assert_eq!(p.origin, Origin::Unattributed, "{pin:?}");
            assert_eq!(p.pid, Some(std::process::id()));
        }
        // An accept recorded before the peer started: without a pidfd, the
        // peer cannot be the process that connected.
        let p = identify(a.as_fd(), &NoApps, PinMode::StartTime, 0);
        assert_eq!(p.origin, Origin::Unknown);
    }
}
