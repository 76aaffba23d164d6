//! What to do when an app's process exits: the restart policy, backoff and
//! the crash-loop limits, as pure functions.

use oxidepm_proto::{AppSpec, RestartPolicy, Status};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Longest delay exponential backoff grows to.
pub const MAX_BACKOFF_MS: u64 = 15_000;

/// How a process ended, as far as the daemon knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when it was killed by one.
    pub signal: Option<i32>,
    /// Killed by the kernel's OOM killer (see [`super::oom`]).
    pub oom_killed: bool,
}

impl Exit {
    /// An exit seen only through a pidfd (an adopted process whose status
    /// went to its real parent): unknown, and counted as a failure.
    pub const UNKNOWN: Exit = Exit {
        code: None,
        signal: None,
        oom_killed: false,
    };

    /// An exit with `code`.
    pub const fn code(code: i32) -> Exit {
        Exit {
            code: Some(code),
            signal: None,
            oom_killed: false,
        }
    }

    /// A death by `signal`.
    pub const fn signal(signal: i32) -> Exit {
        Exit {
            code: None,
            signal: Some(signal),
            oom_killed: false,
        }
    }

    /// A successful exit.
    pub fn success(self) -> bool {
        self.code == Some(0)
    }

    /// Human description: `exit code 3`, `signal 9 (SIGKILL)`, ...
    pub fn describe(self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => {
                let name = nix::sys::signal::Signal::try_from(s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| "?".into());
                let by = if self.oom_killed {
                    ", by the kernel's OOM killer: out of memory"
                } else {
                    ""
                };
                format!("killed by signal {s} ({name}){by}")
            }
            (None, None) => "exit status unknown (the process was adopted)".into(),
        }
    }
}

/// The decision after an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start again after `delay_ms`.
    Restart {
        /// Delay before the new process.
        delay_ms: u64,
    },
    /// Leave the app in this status.
    Rest(Status),
}

/// Decides what follows an exit. `unstable` is the number of restarts in a
/// row whose run lasted less than `min_uptime`; the new count is returned
/// with the decision. A run that lasted at least `min_uptime` resets it, so a
/// long-running app that crashes once a day is never marked errored, while
/// one that crashes at once ends `errored` after `max_restarts` tries.
pub fn decide(spec: &AppSpec, exit: Exit, uptime_ms: u64, unstable: u32) -> (Decision, u32) {
    let failed = !exit.success();
    let wanted = match spec.restart {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => failed,
        RestartPolicy::Never => false,
    };
    if !wanted {
        let st = if failed {
            Status::Errored
        } else {
            Status::Stopped
        };
        return (Decision::Rest(st), 0);
    }
    let unstable = if uptime_ms >= spec.min_uptime_ms {
        0
    } else {
        unstable + 1
    };
    if unstable > spec.max_restarts {
        return (Decision::Rest(Status::Errored), unstable);
    }
    let backoff = if unstable <= 1 {
        0
    } else {
        let shift = (unstable - 2).min(20);
        spec.exp_backoff_ms
            .saturating_mul(1 << shift)
            .min(MAX_BACKOFF_MS)
    };
    (
        Decision::Restart {
            delay_ms: spec.restart_delay_ms + backoff,
        },
        unstable,
    )
}

/// Shortest time one restart takes up in the start-limit window, so an app
/// with `min_uptime` 0 still has a window.
pub const MIN_SLOT_MS: u64 = 1000;

/// The start-limit window of an app: `max_restarts + 1` slots of
/// `min_uptime + restart_delay` (at least [`MIN_SLOT_MS`]) each. More than
/// `max_restarts` automatic restarts in it means that the runs came back
/// faster than stable runs would, however long each one was measured to be.
pub fn start_limit_window(spec: &AppSpec) -> Duration {
    let slot = spec
        .min_uptime_ms
        .saturating_add(spec.restart_delay_ms)
        .max(MIN_SLOT_MS);
    Duration::from_millis(slot.saturating_mul(u64::from(spec.max_restarts) + 1))
}

/// The automatic restarts of one app within its start-limit window (as
/// systemd's StartLimitIntervalSec/StartLimitBurst): a rule that counts
/// restarts in time and measures no uptime, so a daemon too busy to notice
/// exits promptly still stops a crash loop.
#[derive(Debug, Default, Clone)]
pub struct StartLimit {
    times: VecDeque<Instant>,
}

impl StartLimit {
    /// Records a restart at `now` and returns true, or returns false (and
    /// records nothing) when it would be more than `max` within `window`.
    pub fn admit(&mut self, now: Instant, window: Duration, max: u32) -> bool {
        while let Some(&t) = self.times.front() {
            if now.saturating_duration_since(t) >= window {
                self.times.pop_front();
            } else {
                break;
            }
        }
        if self.times.len() >= max as usize {
            return false;
        }
        self.times.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AppSpec {
        let mut s = AppSpec::new("a", "x", vec![]);
        s.max_restarts = 3;
        s.min_uptime_ms = 1000;
        s.exp_backoff_ms = 100;
        s
    }

    const CRASH: Exit = Exit::code(1);

    #[test]
    fn crash_loop_ends_errored_with_backoff() {
        let s = spec();
        let (d, u) = decide(&s, CRASH, 10, 0);
        assert_eq!(d, Decision::Restart { delay_ms: 0 });
        let (d, u) = decide(&s, CRASH, 10, u);
        assert_eq!(d, Decision::Restart { delay_ms: 100 });
        let (d, u) = decide(&s, CRASH, 10, u);
        assert_eq!(d, Decision::Restart { delay_ms: 200 });
        let (d, _) = decide(&s, CRASH, 10, u);
        assert_eq!(d, Decision::Rest(Status::Errored));
    }

    #[test]
    fn stable_run_resets_and_backoff_is_capped() {
        let s = spec();
        let (d, u) = decide(&s, CRASH, 5000, 3);
        assert_eq!((d, u), (Decision::Restart { delay_ms: 0 }, 0));
        let mut s = spec();
        s.max_restarts = 100;
        let (d, _) = decide(&s, CRASH, 0, 60);
        assert_eq!(
            d,
            Decision::Restart {
                delay_ms: MAX_BACKOFF_MS
            }
        );
    }

    #[test]
    fn policies() {
        let mut s = spec();
        let ok = Exit::code(0);
        s.restart = RestartPolicy::OnFailure;
        assert_eq!(decide(&s, ok, 0, 0).0, Decision::Rest(Status::Stopped));
        assert!(matches!(
            decide(&s, CRASH, 0, 0).0,
            Decision::Restart { .. }
        ));
        assert!(matches!(
            decide(&s, Exit::UNKNOWN, 0, 0).0,
            Decision::Restart { .. }
        ));
        s.restart = RestartPolicy::Never;
        assert_eq!(decide(&s, CRASH, 0, 0).0, Decision::Rest(Status::Errored));
        s.restart = RestartPolicy::Always;
        s.restart_delay_ms = 250;
        assert_eq!(
            decide(&s, ok, 5000, 0).0,
            Decision::Restart { delay_ms: 250 }
        );
    }

    #[test]
    fn start_limit_counts_restarts_in_the_window_not_uptime() {
        let s = spec();
        let w = start_limit_window(&s);
        // 3 restarts of 1000 ms min_uptime + 0 delay: 4 slots.
        assert_eq!(w, Duration::from_millis(4000));
        let t0 = Instant::now();
        let mut l = StartLimit::default();
        for i in 0..3 {
            assert!(l.admit(t0 + Duration::from_millis(i * 10), w, s.max_restarts));
        }
        // A fourth within the window is refused, and not recorded.
        assert!(!l.admit(t0 + Duration::from_millis(50), w, s.max_restarts));
        // Once the first has left the window, one more is allowed.
        assert!(l.admit(t0 + w, w, s.max_restarts));
        assert!(!l.admit(t0 + w + Duration::from_millis(5), w, s.max_restarts));
        // Restarts spaced wider than a slot never hit the limit.
        let mut l = StartLimit::default();
        for i in 0..100 {
            assert!(l.admit(t0 + Duration::from_millis(i * 1500), w, s.max_restarts));
        }
    }

    #[test]
    fn start_limit_window_has_a_floor_and_counts_the_delay() {
        let mut s = spec();
        s.min_uptime_ms = 0;
        s.max_restarts = 0;
        assert_eq!(start_limit_window(&s), Duration::from_millis(MIN_SLOT_MS));
        let mut l = StartLimit::default();
        assert!(!l.admit(Instant::now(), start_limit_window(&s), 0));
        s.min_uptime_ms = 1000;
        s.restart_delay_ms = 500;
        s.max_restarts = 9;
        assert_eq!(start_limit_window(&s), Duration::from_millis(15_000));
    }
}
