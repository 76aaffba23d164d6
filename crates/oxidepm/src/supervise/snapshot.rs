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
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one snapshot serves.
pub const TICK: Duration = Duration::from_millis(20);

type Cached = Option<(Instant, Arc<Vec<ProcStat>>)>;

static LAST: Mutex<Cached> = Mutex::new(None);

/// A snapshot of /proc taken no earlier than `since` (a new one when the
/// last is older).
pub fn since(since: Instant) -> Arc<Vec<ProcStat>> {
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, procs)) = last.as_ref() {
        if *at >= since {
            return procs.clone();
        }
    }
    let at = Instant::now();
    let procs = Arc::new(procfs::all());
    *last = Some((at, procs.clone()));
    procs
}

/// A snapshot of this tick.
pub fn current() -> Arc<Vec<ProcStat>> {
    since(
        Instant::now()
            .checked_sub(TICK)
            .unwrap_or_else(Instant::now),
    )
}

/// A snapshot taken now.
pub fn fresh() -> Arc<Vec<ProcStat>> {
    since(Instant::now())
}

/// Pins `pids` of snapshot `procs`: a pidfd for each that still is the
/// process of the snapshot (same start time), none for the others.
pub fn pin(procs: &[ProcStat], pids: &[u32]) -> Vec<OwnedFd> {
    pids.iter()
        .filter_map(|pid| {
            let then = procs.iter().find(|p| p.pid == *pid)?.start_ticks;
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
/// descendants) in snapshot `procs`, each pinned first; returns how many.
pub fn signal_sessions(procs: &[ProcStat], sessions: &[Session], sig: Signal) -> usize {
    let pids = procfs::members(procs, sessions);
    signal_pinned(&pin(procs, &pids), sig)
}

/// Whether a live member of the recorded `sessions` is in snapshot `procs`.
pub fn sessions_alive(procs: &[ProcStat], sessions: &[Session]) -> bool {
    !procfs::members(procs, sessions).is_empty()
}

/// The processes a run whose main process `leader` (started at
/// `leader_start`) has exited left behind, in snapshot `procs`: the
/// members of its process group that started before the leader was
/// reaped (`reaped_ticks`, in start-time ticks), unless pid `leader` now
/// names another process; and the members of the recorded `sessions`.
pub fn leftovers(
    procs: &[ProcStat],
    leader: u32,
    leader_start: Option<u64>,
    reaped_ticks: u64,
    sessions: &[Session],
) -> Vec<u32> {
    let me = std::process::id();
    let reused = procs
        .iter()
        .any(|p| p.pid == leader && Some(p.start_ticks) != leader_start);
    let mut out = procfs::members(procs, sessions);
    if !reused {
        // A group whose id was freed by the reap and taken by a new
        // process's group started at or after the reap: never those.
        for p in procs {
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
        ProcStat {
            pid,
            state: b'S',
            ppid: 1,
            pgrp,
            session,
            utime: 0,
            stime: 0,
            cutime: 0,
            cstime: 0,
            start_ticks: start,
            rss_pages: 0,
        }
    }

    #[test]
    fn leftovers_never_include_a_group_that_reused_the_id() {
        // Leader 10 (started at 100) exited and was reaped at tick 500;
        // 11 stayed in its group.
        let procs = [p(11, 10, 11, 200), p(20, 20, 20, 50)];
        assert_eq!(leftovers(&procs, 10, Some(100), 500, &[]), vec![11]);
        // After the reap, pid 10 was given to a new process that leads a
        // group of its own: neither it nor its group is the app's.
        let reused = [p(10, 10, 10, 600), p(12, 10, 10, 601)];
        assert!(leftovers(&reused, 10, Some(100), 500, &[]).is_empty());
        // Its leader already gone too: the start times still tell.
        let reused = [p(12, 10, 10, 601)];
        assert!(leftovers(&reused, 10, Some(100), 500, &[]).is_empty());
    }

    #[test]
    fn snapshots_are_shared_within_a_tick_and_pin_checks_the_start() {
        let a = current();
        let b = current();
        assert!(!a.is_empty() && !b.is_empty());
        let me = std::process::id();
        assert!(a.iter().any(|p| p.pid == me));
        assert_eq!(pin(&a, &[me]).len(), 1);
        let mut wrong = a.iter().find(|p| p.pid == me).copied().unwrap();
        wrong.start_ticks += 1;
        assert!(pin(&[wrong], &[me]).is_empty());
        assert!(ticks_at(Instant::now()) >= wrong.start_ticks - 1);
    }
}
