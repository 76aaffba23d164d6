//! Which processes are an app's: its cgroup where cgroups are in force
//! (see `supervise::cgroup`), and the recorded sessions of its runs, kept
//! in any case for attribution's fallback walk and for hosts without
//! cgroups. Signalling, killing and tidying up go through here.

use super::Supervisor;
use crate::store::SessionRow;
use crate::supervise::cgroup::{Containment, Run};
use crate::supervise::procfs::{self, Session};
use crate::supervise::snapshot;
use crate::supervise::spawn::{self, SpawnError};
use nix::sys::signal::Signal;
use oxidepm_sys::cgroup;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::timeout;

/// Recorded sessions of one app from which on a new run prunes them.
const PRUNE_AT: usize = 4;

/// How long the kernel is given to take the processes of a cgroup it was
/// told to kill, or of a session sent SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What holds an app's processes, for a stopper to watch.
#[derive(Debug, Clone)]
pub enum Members {
    /// Its cgroup's directory.
    Cgroup(PathBuf),
    /// Its recorded sessions.
    Sessions(Vec<Session>),
}

/// Where a process's cgroup puts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// In the cgroup of this app.
    App(u64),
    /// In this home's cgroup, but in no app's: fails closed.
    Home,
    /// Outside this home's cgroups (or cgroups are off).
    Elsewhere,
}

impl Members {
    /// Whether any process is left.
    pub fn alive(&self) -> bool {
        match self {
            Members::Cgroup(dir) => cgroup::populated(dir),
            Members::Sessions(s) => snapshot::sessions_alive(&snapshot::current(), s),
        }
    }

    /// Waits at most `within` until no process is left; true when none is.
    /// A cgroup is watched through `cgroup.events`; sessions, which the
    /// kernel does not report on, are looked at once per /proc snapshot.
    pub async fn emptied(&self, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        if let Members::Cgroup(dir) = self {
            match timeout(within, cgroup::emptied(dir)).await {
                Ok(Ok(())) => return true,
                Err(_) => return false,
                Ok(Err(e)) => {
                    log::debug!("cannot watch {}: {e}; looking instead", dir.display());
                }
            }
        }
        while self.alive() {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(snapshot::tick()).await;
        }
        true
    }

    /// Kills every process left: `cgroup.kill`, or SIGKILL to the members
    /// of the sessions.
    pub fn kill(&self) {
        match self {
            Members::Cgroup(dir) => {
                if let Err(e) = cgroup::kill(dir) {
                    log::warn!("cannot kill cgroup {}: {e}", dir.display());
                }
            }
            Members::Sessions(s) => {
                snapshot::signal_sessions(&snapshot::fresh(), s, Signal::SIGKILL);
            }
        }
    }

    /// Kills what is left and waits for it to be gone (bounded; a process
    /// stuck in the kernel is reported, not waited for forever).
    pub async fn kill_and_wait(&self) -> bool {
        if !self.alive() {
            return true;
        }
        self.kill();
        let gone = self.emptied(KILL_GRACE).await;
        if !gone {
            log::warn!("processes of {self:?} survived SIGKILL for {KILL_GRACE:?}");
        }
        gone
    }
}

impl Supervisor {
    /// Puts `c` in force and loads the recorded sessions (dropping those
    /// that are over). Called once at start, after `load` and before
    /// recovery; reports app cgroups of this home that no app owns.
    pub fn set_containment(&mut self, c: Containment) {
        log::info!("containment: {}", c.describe());
        if let Some(cg) = c.cgroups() {
            let known: Vec<u64> = self.apps.keys().copied().collect();
            for (dir, busy) in cg.strays(&known) {
                if busy {
                    // Left running: adopting or stopping processes of an
                    // unknown app is a decision for a person. Whatever they
                    // ask the daemon is ai:unattributed.
                    log::warn!(
                        "cgroup {} holds processes of no app of this home; they are left running and attributed to no app",
                        dir.display()
                    );
                    self.strays.push(dir);
                } else {
                    for d in cgroup::children(&dir) {
                        let _ = std::fs::remove_dir(d);
                    }
                    let _ = std::fs::remove_dir(&dir);
                }
            }
            for a in self.apps.values_mut() {
                a.cgroup = Some(cg.app(a.id));
                cg.tidy(&cg.app(a.id), false);
            }
        }
        self.containment = c;
        let rows = match self.store.sessions(&self.boot_id) {
            Ok(r) => r,
            Err(e) => {
                log::error!("cannot read the recorded sessions: {e}");
                Vec::new()
            }
        };
        let procs = procfs::all();
        for r in rows {
            let s = (r.sid, r.leader_start);
            let live = procfs::session_current(&procs, s)
                && procs.iter().any(|p| p.session == r.sid && p.state != b'Z');
            if live && self.apps.contains_key(&r.app_id) {
                self.sessions.insert(r.sid, (r.app_id, r.leader_start));
            } else if let Err(e) = self.store.remove_session(r.app_id, r.sid) {
                log::error!("cannot forget session {}: {e}", r.sid);
            }
        }
    }

    /// The mechanism in force as `whoami` says it, with the cgroups of no
    /// app that still hold processes (found at start; left running).
    pub fn containment_report(&self) -> String {
        let busy: Vec<String> = self
            .strays
            .iter()
            .filter(|d| cgroup::populated(d))
            .map(|d| d.display().to_string())
            .collect();
        let mut text = self.containment.describe();
        if !busy.is_empty() {
            text.push_str(&format!(
                "; processes of no app, left running: {}",
                busy.join(", ")
            ));
        }
        text
    }

    /// What holds app `id`'s processes, as `show` says it.
    pub fn containment_of(&self, id: u64) -> Option<String> {
        let a = self.apps.get(&id)?;
        Some(match (self.containment.cgroups(), &a.cgroup) {
            (Some(cg), Some(path)) => format!("cgroup2 {}", cg.dir(path).display()),
            _ => {
                let mut sids: Vec<u32> = self.sessions_of(id).iter().map(|s| s.0).collect();
                sids.sort_unstable();
                let list: Vec<String> = sids.iter().map(u32::to_string).collect();
                format!("sessions [{}]", list.join(", "))
            }
        })
    }

    /// The directory of the cgroup at hierarchy path `path`, where cgroups
    /// are in force.
    pub fn cgroup_dir(&self, path: &str) -> Option<std::path::PathBuf> {
        Some(self.containment.cgroups()?.dir(path))
    }

    /// The recorded sessions of app `id`.
    pub fn sessions_of(&self, id: u64) -> Vec<Session> {
        self.sessions
            .iter()
            .filter(|(_, (app, _))| *app == id)
            .map(|(sid, (_, start))| (*sid, *start))
            .collect()
    }

    /// The app whose recorded session is `sid`, led by a process that
    /// started at `leader_start` (`None`: the leader is gone).
    pub fn app_of_session(&self, sid: u32, leader_start: Option<u64>) -> Option<u64> {
        let (app, start) = self.sessions.get(&sid)?;
        leader_start.is_none_or(|s| s == *start).then_some(*app)
    }

    /// Where cgroup path `path` (of `/proc/<pid>/cgroup`) puts a process.
    pub fn app_of_cgroup(&self, path: &str) -> Membership {
        let Some(cg) = self.containment.cgroups() else {
            return Membership::Elsewhere;
        };
        for a in self.apps.values() {
            if a.cgroup
                .as_deref()
                .is_some_and(|c| cgroup::is_within(path, c))
            {
                return Membership::App(a.id);
            }
        }
        let in_home = cgroup::is_within(path, cg.home())
            || self.apps.values().any(|a| {
                a.cgroup
                    .as_deref()
                    .and_then(|c| c.rsplit_once('/'))
                    .is_some_and(|(home, _)| cgroup::is_within(path, home))
            });
        if in_home {
            Membership::Home
        } else {
            Membership::Elsewhere
        }
    }

    /// Whether app `id`'s processes are held by a cgroup.
    fn contained(&self, id: u64) -> bool {
        self.containment.cgroups().is_some()
            && self.apps.get(&id).is_some_and(|a| a.cgroup.is_some())
    }

    /// What holds app `id`'s processes, for a stopper.
    pub(super) fn members(&self, id: u64) -> Members {
        let cg = self.containment.cgroups();
        match (cg, self.apps.get(&id).and_then(|a| a.cgroup.as_deref())) {
            (Some(cg), Some(path)) => Members::Cgroup(cg.dir(path)),
            _ => Members::Sessions(self.sessions_of(id)),
        }
    }

    /// Makes the cgroup leaf of a new run of app `id`; `None` where cgroups
    /// are off.
    pub(super) fn new_run(&mut self, id: u64) -> Result<Option<Run>, SpawnError> {
        let Some(cg) = self.containment.cgroups() else {
            return Ok(None);
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return Err(SpawnError::AppGone);
        };
        let path = app.cgroup.get_or_insert_with(|| cg.app(id)).clone();
        cg.new_run(&path)
            .map(Some)
            .map_err(|source| SpawnError::Cgroup {
                app: app.spec.name.clone(),
                dir: cg.dir(&path),
                source,
            })
    }

    /// The directory of app `id`'s current run, for a probe to start in;
    /// `None` where the app is in no cgroup. A probe is never started
    /// outside a cgroup that the app is in.
    pub(super) fn run_dir(&self, id: u64) -> Result<Option<std::os::fd::OwnedFd>, SpawnError> {
        let (Some(cg), Some(app)) = (self.containment.cgroups(), self.apps.get(&id)) else {
            return Ok(None);
        };
        if app.cgroup.is_none() {
            return Ok(None);
        }
        let Some(run) = app.run_cgroup.as_deref() else {
            return Err(SpawnError::AppGone);
        };
        let dir = cg.dir(run);
        cgroup::open_dir(&dir)
            .map(Some)
            .map_err(|source| SpawnError::Cgroup {
                app: app.spec.name.clone(),
                dir,
                source,
            })
    }

    /// Records that a run of app `id` started: its cgroup leaf and its
    /// session (led by `pid`, started at `start`).
    pub(super) fn record_run(&mut self, id: u64, run: Option<String>, pid: u32, start: u64) {
        if let Some(a) = self.apps.get_mut(&id) {
            a.run_cgroup = run;
        }
        // Pruning reads all of /proc: not on every respawn, only once a
        // crash loop has left a few sessions behind (stops and daemon starts
        // prune too).
        if self.sessions_of(id).len() >= PRUNE_AT {
            self.prune_sessions(id);
        }
        self.sessions.insert(pid, (id, start));
        let row = SessionRow {
            app_id: id,
            sid: pid,
            leader_start: start,
        };
        if let Err(e) = self.store.add_session(row, &self.boot_id) {
            log::error!("cannot record the session of pid {pid}: {e}");
        }
    }

    /// Forgets the sessions of app `id` that no process is in any more.
    fn prune_sessions(&mut self, id: u64) {
        let procs = snapshot::current();
        for (sid, start) in self.sessions_of(id) {
            if procs.members(&[(sid, start)]).is_empty() {
                self.forget_session(id, sid);
            }
        }
    }

    pub(super) fn forget_session(&mut self, id: u64, sid: u32) {
        self.sessions.remove(&sid);
        if let Err(e) = self.store.remove_session(id, sid) {
            log::error!("cannot forget session {sid}: {e}");
        }
    }

    /// Sends the stop signal to every process of app `id`: its cgroup (each
    /// process pinned by a pidfd), else the group of its main process `pid`
    /// (our child, or adopted and checked by start time) and the members of
    /// its recorded sessions.
    pub(super) fn signal_app(&self, id: u64, pid: u32, sig: Signal) {
        let cg = self.containment.cgroups();
        match (cg, self.apps.get(&id).and_then(|a| a.cgroup.as_deref())) {
            (Some(cg), Some(path)) => {
                cg.signal(path, sig as i32);
            }
            _ => {
                let start = self.apps.get(&id).and_then(|a| a.rt.pid_start);
                match start {
                    Some(s) => spawn::signal_group_of(pid, s, sig),
                    None => spawn::signal_group(pid, sig),
                };
                // And whatever stayed in a session of the app but left the
                // main process's group.
                snapshot::signal_sessions(&snapshot::current(), &self.sessions_of(id), sig);
            }
        }
    }

    /// After the main process `pid` of app `id` exited: whatever its run
    /// left goes too, as with systemd's control-group kill, so a restart
    /// never duplicates workers. SIGTERM now; SIGKILL (`cgroup.kill` of the
    /// run's leaves) after `kill_timeout`. The leaves are the runs that
    /// exist now: the next run gets a new one, which this never touches.
    /// `seen` is when the main process's death was seen: what started
    /// after it is not the run's.
    pub(super) fn end_runs(
        &mut self,
        id: u64,
        pid: u32,
        start: Option<u64>,
        t: Duration,
        seen: std::time::Instant,
    ) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        app.run_cgroup = None;
        let (Some(cg), Some(path)) = (self.containment.cgroups(), app.cgroup.clone()) else {
            // The group of the main process and whatever else stayed in
            // the app's sessions, from one snapshot taken after the reap
            // (shared by the exits handled in its tick), each pinned by a
            // pidfd: the SIGKILL after `kill_timeout` goes to exactly these
            // processes, never to a group id a new process may have taken.
            // Probing the group is one syscall; reading /proc after every
            // exit of a crash storm is what would take the daemon's time.
            // Without a group left, a snapshot of this tick serves for the
            // stragglers of earlier sessions.
            let group_left =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), None).is_ok();
            let procs = if group_left {
                snapshot::since(seen)
            } else {
                snapshot::current()
            };
            let reaped = snapshot::ticks_at(seen);
            let pids = snapshot::leftovers(&procs, pid, start, reaped, &self.sessions_of(id));
            let pinned = snapshot::pin(&procs, &pids);
            if snapshot::signal_pinned(&pinned, Signal::SIGTERM) == 0 {
                return;
            }
            tokio::spawn(async move {
                tokio::time::sleep(t).await;
                snapshot::signal_pinned(&pinned, Signal::SIGKILL);
            });
            return;
        };
        let mut left = Vec::new();
        for run in cg.runs(&path) {
            let dir = cg.dir(&run);
            if cg.signal(&run, Signal::SIGTERM as i32) > 0 || cgroup::populated(&dir) {
                left.push(dir);
            } else {
                let _ = std::fs::remove_dir(&dir);
            }
        }
        if left.is_empty() {
            // Nothing of the app lives (its restart is only queued, never
            // spawned before this): every recorded session is over, and a
            // crash loop does not pile them up for a /proc scan to prune.
            for (sid, _) in self.sessions_of(id) {
                self.forget_session(id, sid);
            }
            return;
        }
        tokio::spawn(async move {
            for dir in left {
                let m = Members::Cgroup(dir.clone());
                if !m.emptied(t).await {
                    m.kill_and_wait().await;
                }
                let _ = std::fs::remove_dir(&dir);
            }
        });
    }

    /// Once app `id`'s processes are all gone (a stop completed): forgets
    /// its sessions and removes its empty run leaves.
    pub(super) fn stopped_members(&mut self, id: u64) {
        if self.contained(id) && !self.members(id).alive() {
            // The app's cgroup is empty: every process its runs started is
            // gone, so all its sessions are over; no /proc scan needed.
            for (sid, _) in self.sessions_of(id) {
                self.forget_session(id, sid);
            }
        } else {
            self.prune_sessions(id);
        }
        if let Some(a) = self.apps.get_mut(&id) {
            a.run_cgroup = None;
        }
        if let (Some(cg), Some(path)) = (
            self.containment.cgroups(),
            self.apps.get(&id).and_then(|a| a.cgroup.clone()),
        ) {
            cg.tidy(&path, false);
        }
    }

    /// App `id` is being forgotten: its sessions go, and its cgroup is
    /// killed (a stop already emptied it, unless something was left) and
    /// removed.
    pub(super) fn discard_members(&mut self, id: u64) {
        let sessions = self.sessions_of(id);
        if self.apps.get(&id).is_some_and(|a| a.cgroup.is_none()) {
            // Whatever is left in its sessions has no app to belong to.
            snapshot::signal_sessions(&snapshot::fresh(), &sessions, Signal::SIGKILL);
        }
        for (sid, _) in sessions {
            self.forget_session(id, sid);
        }
        if let Err(e) = self.store.remove_sessions(id) {
            log::error!("cannot forget the sessions of app {id}: {e}");
        }
        let (Some(cg), Some(path)) = (
            self.containment.cgroups(),
            self.apps.get(&id).and_then(|a| a.cgroup.clone()),
        ) else {
            return;
        };
        let cg = cg.clone();
        let dir = cg.dir(&path);
        if !cgroup::populated(&dir) {
            cg.tidy(&path, true);
            return;
        }
        tokio::spawn(async move {
            Members::Cgroup(dir).kill_and_wait().await;
            cg.tidy(&path, true);
        });
    }

    /// App `id` was adopted with main process `pid`: finds the cgroup that
    /// holds it (the daemon that started it may have had another base).
    pub(super) fn adopt_members(&mut self, id: u64, pid: u32) {
        let Some(cg) = self.containment.cgroups().cloned() else {
            return;
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        match cgroup::path_of(pid).and_then(|p| Some((cg.app_of_path(&p, id)?, p))) {
            Some((app_path, run)) => {
                app.cgroup = Some(app_path);
                app.run_cgroup = Some(run);
            }
            None => {
                // Started where no cgroup held it: its sessions are all
                // there is until its next run.
                log::warn!(
                    "{}: adopted pid {pid} is in no cgroup of this home; its sessions are used",
                    app.spec.name
                );
                app.cgroup = None;
            }
        }
    }

    /// Removes every empty cgroup of this home (at shutdown, once every app
    /// is stopped).
    pub fn tidy_cgroups(&self) {
        let Some(cg) = self.containment.cgroups() else {
            return;
        };
        for a in self.apps.values() {
            if let Some(path) = &a.cgroup {
                cg.tidy(path, true);
            }
        }
        let _ = std::fs::remove_dir(cg.dir(cg.home()));
    }
}
