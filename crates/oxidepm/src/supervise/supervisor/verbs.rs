//! The locked steps of the daily verbs: `signal`, `reset`, a start that
//! cuts a restart's wait short, and the two runs of a `reload` (the one
//! replaced and the new one) while they coexist. The waiting parts are in
//! `supervise::verbs`.

use super::{Members, Supervisor};
use crate::supervise::app::OldRun;
use crate::supervise::lifecycle::Event;
use crate::supervise::policy::Exit;
use crate::supervise::verbs::VerbError;
use crate::supervise::{procfs, snapshot, spawn};
use nix::sys::signal::Signal;
use oxidepm_proto::{Actor, EventKind, ResetDone, Status};
use std::time::Duration;

/// The event kind of a reload's steps.
pub const RELOAD_KIND: &str = "reload";

impl Supervisor {
    /// Sends `sig` to app `id`'s main process only (as pm2's `sendSignal`
    /// and `systemctl kill --kill-whom=main`): the process is pinned by a
    /// pidfd and checked against its recorded start time first, so a pid
    /// reused by another process is never signalled. What the signal does
    /// (an exit included) is handled as any other exit.
    pub fn signal_main(&self, id: u64, sig: Signal, actor: &Actor) -> Result<u32, VerbError> {
        let app = self.apps.get(&id).ok_or(VerbError::Gone { id })?;
        let name = app.spec.name.clone();
        let (Status::Online, Some(pid)) = (app.rt.status, app.rt.pid) else {
            return Err(VerbError::NotRunning {
                apps: vec![(name, app.rt.status)],
            });
        };
        let failed = |source: std::io::Error| VerbError::SignalFailed {
            app: name.clone(),
            pid,
            signal: sig.as_str(),
            source,
        };
        let fd = oxidepm_sys::pidfd::open(pid).map_err(failed)?;
        if let Some(start) = app.rt.pid_start {
            if !procfs::is_same_process(pid, start) {
                return Err(failed(std::io::Error::from(nix::errno::Errno::ESRCH)));
            }
        }
        oxidepm_sys::pidfd::signal(&fd, sig as i32).map_err(failed)?;
        self.event(
            id,
            EventKind::Other("signal".into()),
            actor,
            &format!("{} to pid {pid}", sig.as_str()),
        );
        Ok(pid)
    }

    /// Zeroes app `id`'s restart counters (the count, the unstable run and
    /// the start limit) and turns `errored` into `stopped`.
    pub fn reset(&mut self, id: u64, actor: &Actor) -> Option<ResetDone> {
        let app = self.apps.get_mut(&id)?;
        let before = app.rt.restarts;
        app.rt.restarts = 0;
        app.restart_reasons.clear();
        let effects = self.step(id, Event::Reset);
        let app = self.apps.get(&id)?;
        let done = ResetDone {
            id,
            name: app.spec.name.clone(),
            restarts_before: before,
            status: app.rt.status,
        };
        self.apply(id, effects, None);
        self.event(
            id,
            EventKind::Other("reset".into()),
            actor,
            &format!("{before} restarts forgotten"),
        );
        Some(done)
    }

    /// Whether app `id` waits for a queued restart, which a start by
    /// request replaces: the queued one is then stale (the spawn bumps the
    /// generation).
    pub fn waits_for_restart(&self, id: u64) -> bool {
        self.apps.get(&id).is_some_and(|a| a.waiting().is_some())
    }

    /// First step of a reload: takes app `id`'s running process out of its
    /// slot (it keeps running, and its exit is recorded as that run's) so
    /// that a new one can be spawned beside it.
    pub fn reload_aside(&mut self, id: u64, actor: &Actor) -> Result<OldRun, VerbError> {
        let app = self.apps.get_mut(&id).ok_or(VerbError::Gone { id })?;
        if app.reloading {
            return Err(VerbError::ReloadBusy {
                app: app.spec.name.clone(),
            });
        }
        let (Status::Online, Some(pid)) = (app.rt.status, app.rt.pid) else {
            return Err(VerbError::NotRunning {
                apps: vec![(app.spec.name.clone(), app.rt.status)],
            });
        };
        let old = OldRun {
            pid,
            pid_start: app.rt.pid_start,
            run_id: app.rt.run_id,
            started_at_ms: app.rt.started_at_ms,
            started: app.started,
            run_cgroup: app.run_cgroup.take(),
        };
        app.reloading = true;
        app.retiring.push(old.clone());
        app.rt.pid = None;
        app.rt.pid_start = None;
        app.rt.run_id = None;
        self.transition(id, Event::ReloadAside);
        self.event(
            id,
            EventKind::Other(RELOAD_KIND.into()),
            actor,
            &format!("pid {pid} keeps serving until a new process is healthy"),
        );
        Ok(old)
    }

    /// The new process of a reload is healthy: the reload is over, and the
    /// old run is signalled to stop. Returns what to wait on.
    pub fn reload_done(&mut self, id: u64, old: &OldRun, actor: &Actor) -> Option<Members> {
        let app = self.apps.get_mut(&id)?;
        app.reloading = false;
        let new = app.rt.pid;
        let sig = spawn::parse_signal(&app.spec.stop_signal).unwrap_or(Signal::SIGTERM);
        self.event(
            id,
            EventKind::Other(RELOAD_KIND.into()),
            actor,
            &format!(
                "pid {} is healthy; stopping pid {}",
                new.map_or("-".into(), |p| p.to_string()),
                old.pid
            ),
        );
        Some(self.signal_run(old, sig))
    }

    /// The new process of a reload did not get healthy (`why`): it is
    /// signalled to stop and the old run takes the app's slot again.
    /// Returns the new run and what to wait on, or `None` when the reload
    /// was already undone (the new process exited), the new process never
    /// ran, or the old run is gone too.
    pub fn reload_undo(
        &mut self,
        id: u64,
        old: &OldRun,
        actor: &Actor,
        why: &str,
    ) -> Option<(OldRun, Members)> {
        let app = self.apps.get_mut(&id)?;
        if !app.reloading {
            return None;
        }
        let new = match (app.rt.pid, app.rt.status) {
            (Some(pid), Status::Online) => Some(OldRun {
                pid,
                pid_start: app.rt.pid_start,
                run_id: app.rt.run_id,
                started_at_ms: app.rt.started_at_ms,
                started: app.started,
                run_cgroup: app.run_cgroup.clone(),
            }),
            _ => None,
        };
        if !self.restore(id, old) {
            // The old run is gone as well: the new one keeps the slot.
            if let Some(a) = self.apps.get_mut(&id) {
                a.reloading = false;
            }
            return None;
        }
        let new = new?;
        let sig = {
            let app = self.apps.get_mut(&id)?;
            app.retiring.push(new.clone());
            spawn::parse_signal(&app.spec.stop_signal).unwrap_or(Signal::SIGTERM)
        };
        self.event(
            id,
            EventKind::Other(RELOAD_KIND.into()),
            actor,
            &format!(
                "failed: {why}; stopping the new pid {}, pid {} kept",
                new.pid, old.pid
            ),
        );
        let members = self.signal_run(&new, sig);
        Some((new, members))
    }

    /// Puts `old` back in app `id`'s slot, if its process still lives;
    /// false (and nothing changed) when it does not.
    fn restore(&mut self, id: u64, old: &OldRun) -> bool {
        let Some(app) = self.apps.get_mut(&id) else {
            return false;
        };
        let Some(pos) = app.retiring.iter().position(|r| r.pid == old.pid) else {
            return false;
        };
        app.retiring.remove(pos);
        app.reloading = false;
        app.rt.pid = Some(old.pid);
        app.rt.pid_start = old.pid_start;
        app.rt.run_id = old.run_id;
        app.rt.started_at_ms = old.started_at_ms;
        app.started = old.started;
        app.run_cgroup = old.run_cgroup.clone();
        app.health = app
            .spec
            .health
            .as_ref()
            .map(|_| oxidepm_proto::HealthState::Unknown);
        self.by_pid.insert(old.pid, id);
        self.transition(id, Event::Restored);
        true
    }

    /// The new process of a reload exited before it was healthy: the old
    /// run takes the slot again and nothing is restarted. False when app
    /// `id` is not reloading (the restart policy applies).
    pub(super) fn reload_new_exited(&mut self, id: u64, exit: Exit) -> bool {
        let Some(app) = self.apps.get(&id).filter(|a| a.reloading) else {
            return false;
        };
        let Some(old) = app.retiring.last().cloned() else {
            return false;
        };
        if let Some(leaf) = self.apps.get_mut(&id).and_then(|a| a.run_cgroup.take()) {
            // What the new run left in its leaf goes with it; the old run's
            // leaf is not touched.
            let members = self.leaf_members(&leaf);
            if let Some(m) = members {
                tokio::spawn(async move {
                    if !m.emptied(Duration::from_secs(5)).await {
                        m.kill_and_wait().await;
                    }
                });
            }
        }
        if !self.restore(id, &old) {
            if let Some(a) = self.apps.get_mut(&id) {
                a.reloading = false;
            }
            return false;
        }
        self.event(
            id,
            EventKind::Other(RELOAD_KIND.into()),
            &Actor::system("reload"),
            &format!(
                "failed: the new process {}; pid {} kept",
                exit.describe(),
                old.pid
            ),
        );
        true
    }

    /// An exit of a process that is no longer app `id`'s current one: the
    /// end of a run a reload took aside is recorded as that run's.
    pub(super) fn retired_exit(&mut self, e: &super::SeenExit) {
        let Some(app) = self.apps.get_mut(&e.id) else {
            return;
        };
        let Some(pos) = app.retiring.iter().position(|r| r.pid == e.pid) else {
            return;
        };
        let run = app.retiring.remove(pos);
        if let Some(run_id) = run.run_id {
            if let Err(err) = self.store.end_run(run_id, e.exit.code, e.exit.signal) {
                log::error!("cannot record the end of a run: {err}");
            }
        }
        self.event(
            e.id,
            EventKind::Exited,
            &Actor::system("reload"),
            &format!(
                "pid {} (taken aside by a reload): {}",
                e.pid,
                e.exit.describe()
            ),
        );
    }

    /// After a retired run's processes are all gone: its session and its
    /// empty leaf are forgotten. A run whose exit was never seen (not our
    /// child) has its end recorded here.
    pub fn retired_gone(&mut self, id: u64, run: &OldRun) {
        if let Some(app) = self.apps.get_mut(&id) {
            if let Some(pos) = app.retiring.iter().position(|r| r.pid == run.pid) {
                app.retiring.remove(pos);
                if let Some(run_id) = run.run_id {
                    if let Err(e) = self.store.end_run(run_id, None, None) {
                        log::error!("cannot record the end of a run: {e}");
                    }
                }
            }
        }
        self.by_pid.remove(&run.pid);
        if self.sessions.get(&run.pid).is_some_and(|(a, _)| *a == id) {
            self.forget_session(id, run.pid);
        }
        if let (Some(cg), Some(leaf)) = (self.containment.cgroups(), &run.run_cgroup) {
            let _ = std::fs::remove_dir(cg.dir(leaf));
        }
    }

    /// Signals every process of one run (its cgroup leaf, else its
    /// process group and session) and returns what holds them.
    fn signal_run(&self, run: &OldRun, sig: Signal) -> Members {
        if let (Some(cg), Some(leaf)) = (self.containment.cgroups(), &run.run_cgroup) {
            cg.signal(leaf, sig as i32);
            return Members::Cgroup(cg.dir(leaf));
        }
        match run.pid_start {
            Some(s) => spawn::signal_group_of(run.pid, s, sig),
            None => spawn::signal_group(run.pid, sig),
        };
        let session = run.pid_start.map(|s| (run.pid, s));
        let sessions: Vec<procfs::Session> = session.into_iter().collect();
        snapshot::signal_sessions(&snapshot::current(), &sessions, sig);
        Members::Sessions(sessions)
    }

    /// What holds the processes of the run leaf `leaf`, where cgroups are
    /// in force.
    fn leaf_members(&self, leaf: &str) -> Option<Members> {
        let cg = self.containment.cgroups()?;
        cg.signal(leaf, Signal::SIGTERM as i32);
        Some(Members::Cgroup(cg.dir(leaf)))
    }
}
