//! One read of /proc per tick for everything the sessions fallback looks
//! up, and processes pinned by pidfd before they are signalled.
//!
//! Reading /proc costs a file per process; a stop of many apps that read it
//! once per app per wait step grew with the square of the apps. A snapshot
//! serves every reader in its tick instead. A snapshot may be a tick old,
//! so whatever is signalled from it is pinned by a pidfd and checked to be
//! the process of the snapshot first: a pid reused since is never touched.

use super::procfs::{self, ProcStat, Session};
use nix::sys::signal::Signal;
use oxidepm_sys::pidfd;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shortest time one snapshot serves.
pub const TICK: Duration = Duration::from_millis(20);

/// A snapshot serves at least this many times as long as it took to read,
/// so reading /proc takes at most a fifth of the daemon's time however
/// many processes there are.
const TICKS_PER_READ: u32 = 4;

/// The processes of /proc at one moment, indexed by pid, session and
/// parent, so that finding an app's members costs its members, not /proc.
#[derive(Debug, Default)]
pub struct Snapshot {
    procs: Vec<ProcStat>,
    by_pid: HashMap<u32, usize>,
    by_session: HashMap<u32, Vec<usize>>,
    by_parent: HashMap<u32, Vec<usize>>,
}

impl Snapshot {
    /// Indexes `procs`.
    pub fn new(procs: Vec<ProcStat>) -> Snapshot {
        let mut s = Snapshot {
            by_pid: HashMap::with_capacity(procs.len()),
            ..Snapshot::default()
        };
        for (i, p) in procs.iter().enumerate() {
            s.by_pid.insert(p.pid, i);
            s.by_session.entry(p.session).or_default().push(i);
            s.by_parent.entry(p.ppid).or_default().push(i);
        }
        s.procs = procs;
        s
    }

    /// The process `pid` of the snapshot.
    pub fn get(&self, pid: u32) -> Option<&ProcStat> {
        self.by_pid.get(&pid).map(|i| &self.procs[*i])
    }

    /// Every process of the snapshot.
    pub fn procs(&self) -> &[ProcStat] {
        &self.procs
    }

    /// What `procfs::members` gives (the live members of the recorded
    /// `sessions` that are still current, and their descendants; never the
    /// daemon), through the indexes.
    pub fn members(&self, sessions: &[Session]) -> Vec<u32> {
        let me = std::process::id();
        let mut seen: Vec<usize> = Vec::new();
        let mut mark = std::collections::HashSet::new();
        for &(sid, start) in sessions {
            let current = self.get(sid).is_none_or(|l| l.start_ticks == start);
            if !current {
                continue;
            }
            for &i in self.by_session.get(&sid).into_iter().flatten() {
                if self.procs[i].pid != me && mark.insert(i) {
                    seen.push(i);
                }
            }
        }
        let mut k = 0;
        while k < seen.len() {
            let parent = self.procs[seen[k]].pid;
            for &i in self.by_parent.get(&parent).into_iter().flatten() {
                if self.procs[i].pid != me && mark.insert(i) {
                    seen.push(i);
                }
            }
            k += 1;
        }
        seen.into_iter()
            .filter(|i| self.procs[*i].state != b'Z')
            .map(|i| self.procs[i].pid)
            .collect()
    }
}

struct Cached {
    at: Instant,
    serves: Duration,
    snap: Arc<Snapshot>,
}

static LAST: Mutex<Option<Cached>> = Mutex::new(None);

/// A snapshot of /proc taken no earlier than `since` (a new one when the
/// last is older).
pub fn since(since: Instant) -> Arc<Snapshot> {
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = last.as_ref() {
        if c.at >= since {
            return c.snap.clone();
        }
    }
    let at = Instant::now();
    let snap = Arc::new(Snapshot::new(procfs::all()));
    let serves = (at.elapsed() * TICKS_PER_READ).max(TICK);
    *last = Some(Cached {
        at,
        serves,
        snap: snap.clone(),
    });
    snap
}

/// How long a snapshot serves now (longer when /proc is slow to read):
/// polling more often than this sees nothing new.
pub fn tick() -> Duration {
    LAST.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(TICK, |c| c.serves)
}

/// A snapshot of this tick.
pub fn current() -> Arc<Snapshot> {
    since(
        Instant::now()
            .checked_sub(tick())
            .unwrap_or_else(Instant::now),
    )
}

/// A snapshot taken now.
pub fn fresh() -> Arc<Snapshot> {
    since(Instant::now())
}

/// Pins `pids` of snapshot `snap`: a pidfd for each that still is the
/// process of the snapshot (same start time), none for the others.
pub fn pin(snap: &Snapshot, pids: &[u32]) -> Vec<OwnedFd> {
    pids.iter()
        .filter_map(|pid| {
            let then = snap.get(*pid)?.start_ticks;
            let fd = pidfd::open(*pid).ok()?;
            (procfs::stat(*pid).map(|s| s.start_ticks) == Some(then)).then_some(fd)
        })
        .collect()
}

/// Sends `sig` to every pinned process; returns how many took it.
pub fn signal_pinned(fds: &[OwnedFd], sig: Signal) -> usize {
    fds.iter()
        .filter(|fd| pidfd::signal(fd, sig as i32).is_ok())
        .count()
}

/// Sends `sig` to the live members of the recorded `sessions` (and their
/// descendants) in snapshot `snap`, each pinned first; returns how many.
pub fn signal_sessions(snap: &Snapshot, sessions: &[Session], sig: Signal) -> usize {
    signal_pinned(&pin(snap, &snap.members(sessions)), sig)
}

/// Whether a live member of the recorded `sessions` is in snapshot `snap`.
pub fn sessions_alive(snap: &Snapshot, sessions: &[Session]) -> bool {
    !snap.members(sessions).is_empty()
}

/// The processes a run whose main process `leader` (started at
/// `leader_start`) has exited left behind, in snapshot `snap`: the
/// members of its process group that started before the leader was
/// reaped (`reaped_ticks`, in start-time ticks), unless pid `leader` now
/// names another process; and the members of the recorded `sessions`.
pub fn leftovers(
    snap: &Snapshot,
    leader: u32,
    leader_start: Option<u64>,
    reaped_ticks: u64,
    sessions: &[Session],
) -> Vec<u32> {
    let me = std::process::id();
    let reused = snap
        .get(leader)
        .is_some_and(|p| Some(p.start_ticks) != leader_start);
    let mut out = snap.members(sessions);
    if !reused {
        // A group whose id was freed by the reap and taken by a new
        // process's group started at or after the reap: never those.
        for p in snap.procs() {
            if p.pgrp == leader
                && p.pid != me
                && p.state != b'Z'
                && p.start_ticks < reaped_ticks
                && !out.contains(&p.pid)
            {
                out.push(p.pid);
            }
        }
    }
    out
}

/// `at` in the ticks of process start times (the boot clock).
pub fn ticks_at(at: Instant) -> u64 {
    let hz = procfs::ticks_per_second().max(1);
    let ago = Instant::now().saturating_duration_since(at);
    let ago_ticks = (ago.as_nanos() * u128::from(hz) / 1_000_000_000) as u64;
    oxidepm_sys::clock::boot_ticks().saturating_sub(ago_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, pgrp: u32, session: u32, start: u64) -> ProcStat {
        ProcStat::sleeping(pid, 1, pgrp, session, start)
    }

    #[test]
    fn leftovers_never_include_a_group_that_reused_the_id() {
        // Leader 10 (started at 100) exited and was reaped at tick 500;
        // 11 stayed in its group.
        let procs = Snapshot::new(vec![p(11, 10, 11, 200), p(20, 20, 20, 50)]);
        assert_eq!(leftovers(&procs, 10, Some(100), 500, &[]), vec![11]);
        // After the reap, pid 10 was given to a new process that leads a
        // group of its own: neither it nor its group is the app's.
        let reused = Snapshot::new(vec![p(10, 10, 10, 600), p(12, 10, 10, 601)]);
        assert!(leftovers(&reused, 10, Some(100), 500, &[]).is_empty());
        // Its leader already gone too: the start times still tell.
        let reused = Snapshot::new(vec![p(12, 10, 10, 601)]);
        assert!(leftovers(&reused, 10, Some(100), 500, &[]).is_empty());
    }

    #[test]
    fn indexed_members_are_procfs_members() {
        let mut procs = vec![
            p(10, 10, 10, 100),
            p(11, 10, 10, 101),
            p(12, 12, 12, 102),
            p(20, 20, 20, 50),
            p(21, 21, 21, 51),
        ];
        procs[1].ppid = 10;
        procs[2].ppid = 11;
        procs[4].ppid = 20;
        procs[4].state = b'Z';
        let snap = Snapshot::new(procs.clone());
        for sessions in [
            vec![(10, 100)],
            vec![(10, 999)],
            vec![(20, 50)],
            vec![(10, 100), (20, 50)],
            vec![(30, 1)],
        ] {
            let mut a = snap.members(&sessions);
            let mut b = procfs::members(&procs, &sessions);
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "{sessions:?}");
        }
    }

    #[test]
    fn snapshots_are_shared_within_a_tick_and_pin_checks_the_start() {
        let a = current();
        let b = current();
        assert!(!a.procs().is_empty() && !b.procs().is_empty());
        let me = std::process::id();
        assert!(a.get(me).is_some());
        assert_eq!(pin(&a, &[me]).len(), 1);
        let mut wrong = *a.get(me).unwrap();
        wrong.start_ticks += 1;
        assert!(pin(&Snapshot::new(vec![wrong]), &[me]).is_empty());
        assert!(ticks_at(Instant::now()) >= wrong.start_ticks - 1);
    }
}
