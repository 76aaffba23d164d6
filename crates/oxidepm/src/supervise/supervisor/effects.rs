//! The executor of the lifecycle: runs an event through
//! `lifecycle::on`, writes the app's next state, and carries out the
//! effects in the order the transition gave them (signals, timers, the
//! store, events). The decisions are all in `supervise::lifecycle`.

use super::{StopTicket, Supervisor};
use crate::supervise::app::WaitFor;
use crate::supervise::lifecycle::{self, Effect, Event, Limit, View};
use crate::supervise::spawn;
use nix::sys::signal::Signal;
use oxidepm_proto::Actor;
use std::time::{Duration, Instant};

/// The run whose exit is being handled, for the effects that act on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct EndedRun {
    /// Its main process.
    pub pid: u32,
    /// That process's start time.
    pub pid_start: Option<u64>,
    /// When its death was seen.
    pub seen: Instant,
}

/// What carrying out effects hands back to the caller.
#[derive(Debug, Default)]
pub struct Applied {
    /// What to wait on, when a stop is under way.
    pub ticket: Option<StopTicket>,
    /// Whether the app is to be started (recovery starts them together).
    pub spawn: bool,
}

impl Supervisor {
    /// Runs `event` through the lifecycle of app `id` and writes its next
    /// state; returns the effects still to carry out.
    pub(super) fn step(&mut self, id: u64, event: Event) -> Vec<Effect> {
        let shutting_down = self.shutting_down;
        let Some(app) = self.apps.get_mut(&id) else {
            return Vec::new();
        };
        let (life, effects) = lifecycle::on(&View::of(app, shutting_down), event);
        lifecycle::write(app, life);
        effects
    }

    /// [`Self::step`], then every effect carried out.
    pub fn transition(&mut self, id: u64, event: Event) -> Applied {
        let effects = self.step(id, event);
        self.apply(id, effects, None)
    }

    /// Carries out `effects` of app `id` in order; `run` is the run whose
    /// exit caused them, if one did.
    pub(super) fn apply(
        &mut self,
        id: u64,
        effects: Vec<Effect>,
        run: Option<EndedRun>,
    ) -> Applied {
        let mut out = Applied::default();
        for effect in effects {
            match effect {
                Effect::Persist => self.persist(id),
                Effect::Record {
                    kind,
                    actor,
                    detail,
                } => self.event(id, kind, &actor, &detail),
                Effect::AwaitStop => out.ticket = self.stop_ticket(id),
                Effect::Signal { actor } => self.signal_stop(id, actor),
                Effect::EndStop { killed } => self.end_stop(id, killed),
                Effect::EndRuns => {
                    if let (Some(r), Some(a)) = (run, self.apps.get(&id)) {
                        let t = Duration::from_millis(a.spec.kill_timeout_ms);
                        self.end_runs(id, r.pid, r.pid_start, t, r.seen);
                    }
                }
                Effect::AdmitRestart {
                    delay_ms,
                    why,
                    actor,
                } => {
                    let at = run.map_or_else(Instant::now, |r| r.seen);
                    let next = match self.admit_restart(id, at) {
                        Ok(()) => Event::RestartAdmitted { delay_ms, why },
                        Err((max, window_ms)) => Event::LimitHit {
                            limit: Limit::StartLimit { max, window_ms },
                            actor,
                        },
                    };
                    let effects = self.step(id, next);
                    self.apply(id, effects, run);
                }
                Effect::AdoptMembers => self.adopted_members(id),
                Effect::ArmRestart {
                    delay_ms,
                    actor,
                    why,
                } => self.arm_restart(id, delay_ms, &actor, why),
                Effect::QueueByDaemon { actor, counts } => {
                    self.queue_restart_by_daemon(id, &actor, counts)
                }
                Effect::ForgetStartLimit => self.restarts.forget(id),
                Effect::ExitUnknown => {
                    if let Some(pid) = self.apps.get(&id).and_then(|a| a.rt.pid) {
                        self.handle_exit_unowned(id, pid);
                    }
                }
                Effect::ForgetPid => {
                    if let Some(a) = self.apps.get_mut(&id) {
                        a.rt.pid = None;
                    }
                }
                Effect::Spawn => out.spawn = true,
            }
        }
        out
    }

    /// What a stopper of app `id` waits on.
    fn stop_ticket(&self, id: u64) -> Option<StopTicket> {
        let app = self.apps.get(&id)?;
        app.rt.pid?;
        Some(StopTicket {
            id,
            kill_timeout: Duration::from_millis(app.spec.kill_timeout_ms),
            exits: app.exits.subscribe(),
            members: self.members(id),
        })
    }

    /// Sends app `id`'s stop signal to every process of it, for `actor`.
    fn signal_stop(&mut self, id: u64, actor: Actor) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        app.stopping_actor = Some(actor);
        let sig = spawn::parse_signal(&app.spec.stop_signal).unwrap_or(Signal::SIGTERM);
        if let Some(pid) = app.rt.pid {
            self.signal_app(id, pid, sig);
        }
    }

    /// Forgets the process of a stop that is over.
    fn end_stop(&mut self, id: u64, killed: bool) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        if app.rt.pid.is_some() && killed {
            // Its exit is not handled yet (and will not be, once stopped):
            // the run ended by the SIGKILL, not as the last one did.
            app.rt.last_exit = None;
            app.last_signal = Some(Signal::SIGKILL as i32);
        }
        if let Some(pid) = app.rt.pid.take() {
            // Stopped but never reaped here (adopted, or the exit is still
            // queued): forget the pid so it is never signalled again.
            self.by_pid.remove(&pid);
        }
        self.stopped_members(id);
        if let Some(app) = self.apps.get_mut(&id) {
            app.stopping_actor = None;
        }
    }

    /// Counts a restart of app `id` credited to `actor` and arms its timer
    /// for the app's generation: the restart task spawns it when due.
    fn arm_restart(&mut self, id: u64, delay_ms: u64, actor: &Actor, why: String) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        app.count_restart(actor);
        let generation = app.generation;
        let at = Instant::now() + Duration::from_millis(delay_ms);
        app.wait = Some(WaitFor {
            at,
            reason: why,
            generation,
        });
        self.persist(id);
        self.restarts.push(at, id, generation, actor.clone());
    }
}
