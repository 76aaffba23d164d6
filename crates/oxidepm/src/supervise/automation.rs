//! What the daemon does on its own while an app runs: scheduled (cron)
//! restarts (and starts of a periodic job that ended by itself), health
//! checks and the memory limit. Each is a task tied to the
//! app's automation epoch, which changes whenever the spec does, so a task
//! armed for an older spec ends by itself.

use super::supervisor::{lock, Shared};
use chrono::Local;
use croner::parser::{CronParser, Seconds, Year};
use oxidepm_proto::{Actor, EventKind, RestartPolicy, Status};
use std::time::Duration;

/// Why a cron expression was refused.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    /// Neither 5 nor 6 fields.
    #[error("cron expression {expr:?} has {fields} fields; use 5 (minute hour day month weekday) or 6 (with seconds first)")]
    Fields {
        /// The expression.
        expr: String,
        /// How many fields it has.
        fields: usize,
    },
    /// A field that croner cannot read.
    #[error("cron expression {expr:?}: {source}")]
    Parse {
        /// The expression.
        expr: String,
        /// croner's reason.
        source: croner::errors::CronError,
    },
}

/// Parses a cron expression: 5 fields, or 6 with seconds first.
pub fn parse_cron(expr: &str) -> Result<croner::Cron, CronError> {
    let fields = expr.split_whitespace().count();
    if !(5..=6).contains(&fields) {
        return Err(CronError::Fields {
            expr: expr.to_string(),
            fields,
        });
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|source| CronError::Parse {
            expr: expr.to_string(),
            source,
        })
}

/// What one tick of an app's cron schedule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronTick {
    /// Restart the running app.
    Restart,
    /// Start a periodic job that ended by itself.
    Start,
    /// Leave it as it is.
    Nothing,
}

/// Decides a cron tick for an app in `status` under `restart`;
/// `stopped_by_request` when a request stopped it.
pub fn on_cron_tick(
    status: Status,
    restart: RestartPolicy,
    stopped_by_request: bool,
    shutting_down: bool,
) -> CronTick {
    if status == Status::Online {
        return CronTick::Restart;
    }
    // A periodic job (not restarted when it exits) that ended by itself
    // runs again, as in pm2. One a request stopped stays stopped until a
    // start.
    let ended_by_itself =
        matches!(status, Status::Stopped | Status::Errored) && !stopped_by_request;
    if restart != RestartPolicy::Always && ended_by_itself && !shutting_down {
        CronTick::Start
    } else {
        CronTick::Nothing
    }
}

/// How long from `now` until the next tick of `cron`, or `None` when the
/// schedule has no next time.
pub fn until_next_tick<Tz: chrono::TimeZone>(
    cron: &croner::Cron,
    now: &chrono::DateTime<Tz>,
) -> Option<Duration> {
    let next = cron.find_next_occurrence(now, false).ok()?;
    Some((next - now.clone()).to_std().unwrap_or(Duration::ZERO))
}

/// Restarts app `id` on its cron schedule (local time) while `epoch` holds.
pub async fn cron_loop(shared: Shared, id: u64, epoch: u64, cron: croner::Cron, expr: String) {
    loop {
        let Some(wait) = until_next_tick(&cron, &Local::now()) else {
            log::warn!("app {id}: cron schedule has no next time; cron restarts end");
            return;
        };
        tokio::time::sleep(wait).await;
        let tick = {
            let s = lock(&shared);
            match s.app(id) {
                Some(a) if a.auto_epoch == epoch => on_cron_tick(
                    a.rt.status,
                    a.spec.restart,
                    a.rt.stopped_by.is_some(),
                    s.shutting_down,
                ),
                _ => return,
            }
        };
        let detail = format!("scheduled by {expr:?}");
        if tick == CronTick::Restart {
            let shared = shared.clone();
            let reason = super::lifecycle::DaemonRestart::Cron { expr: expr.clone() };
            tokio::spawn(async move {
                super::control::restart_by_daemon(&shared, id, reason).await;
            });
        } else if tick == CronTick::Start {
            let shared = shared.clone();
            tokio::spawn(async move {
                let actor = Actor::system("cron");
                lock(&shared).event(id, EventKind::Cron, &actor, &detail);
                if let Err(e) = super::control::start(&shared, &[id], &actor).await {
                    log::warn!("app {id}: the scheduled start failed: {e}");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_tick_restarts_a_running_app_whatever_its_policy() {
        for p in [
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ] {
            assert_eq!(
                on_cron_tick(Status::Online, p, false, false),
                CronTick::Restart
            );
        }
    }

    #[test]
    fn a_periodic_job_that_ended_by_itself_runs_again() {
        for st in [Status::Stopped, Status::Errored] {
            for p in [RestartPolicy::OnFailure, RestartPolicy::Never] {
                assert_eq!(on_cron_tick(st, p, false, false), CronTick::Start);
            }
        }
    }

    #[test]
    fn a_job_a_person_stopped_stays_stopped_through_any_number_of_ticks() {
        for st in [Status::Stopped, Status::Errored] {
            for p in [RestartPolicy::OnFailure, RestartPolicy::Never] {
                for _tick in 0..3 {
                    assert_eq!(on_cron_tick(st, p, true, false), CronTick::Nothing);
                }
            }
        }
    }

    #[test]
    fn nothing_starts_while_the_daemon_shuts_down_or_an_always_app_waits() {
        assert_eq!(
            on_cron_tick(Status::Stopped, RestartPolicy::Never, false, true),
            CronTick::Nothing
        );
        // An `always` app that is not online is the restart policy's to
        // bring back: cron leaves it.
        for st in [
            Status::Stopped,
            Status::Errored,
            Status::Starting,
            Status::Stopping,
        ] {
            assert_eq!(
                on_cron_tick(st, RestartPolicy::Always, false, false),
                CronTick::Nothing
            );
        }
    }

    #[test]
    fn the_wait_runs_to_the_next_tick_of_the_schedule() {
        let every_minute = parse_cron("* * * * *").unwrap();
        let at = chrono::Utc
            .with_ymd_and_hms(2026, 12, 1, 10, 15, 20)
            .unwrap();
        assert_eq!(
            until_next_tick(&every_minute, &at),
            Some(Duration::from_secs(40))
        );
        let every_second = parse_cron("* * * * * *").unwrap();
        assert_eq!(
            until_next_tick(&every_second, &at),
            Some(Duration::from_secs(1))
        );
        // Nightly at 03:30: from 10:15:20, 17 h 14 min 40 s.
        let nightly = parse_cron("30 3 * * *").unwrap();
        assert_eq!(
            until_next_tick(&nightly, &at),
            Some(Duration::from_secs(17 * 3600 + 14 * 60 + 40))
        );
    }
}
