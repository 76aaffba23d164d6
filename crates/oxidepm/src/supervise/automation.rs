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

/// Restarts app `id` on its cron schedule (local time) while `epoch` holds.
pub async fn cron_loop(shared: Shared, id: u64, epoch: u64, cron: croner::Cron, expr: String) {
    loop {
        let now = Local::now();
        let Ok(next) = cron.find_next_occurrence(&now, false) else {
            log::warn!("app {id}: cron schedule has no next time; cron restarts end");
            return;
        };
        let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
        tokio::time::sleep(wait).await;
        let (online, idle) = {
            let s = lock(&shared);
            match s.app(id) {
                Some(a) if a.auto_epoch == epoch => (
                    a.rt.status == Status::Online,
                    // A periodic job (not restarted when it exits) that
                    // ended by itself runs again, as in pm2. One a request
                    // stopped stays stopped until a start.
                    a.spec.restart != RestartPolicy::Always
                        && matches!(a.rt.status, Status::Stopped | Status::Errored)
                        && a.rt.stopped_by.is_none()
                        && !s.shutting_down,
                ),
                _ => return,
            }
        };
        let detail = format!("scheduled by {expr:?}");
        if online {
            let shared = shared.clone();
            tokio::spawn(async move {
                super::control::restart_by_daemon(
                    &shared,
                    id,
                    Actor::system("cron"),
                    EventKind::Cron,
                    &detail,
                    false,
                )
                .await;
            });
        } else if idle {
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
