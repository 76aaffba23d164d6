//! `[retention]` of daemon.toml, and the daemon's housekeeping timer: the
//! history tables pruned in small batches, and refusal windows closed into
//! their summary rows when they are due (no tick while none is open).

use super::refusals::Limits;
use super::Daemon;
use crate::store::{History, Keep};
use crate::supervise::{lock, Shared};
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// Rows deleted per statement: a few milliseconds, after which the
/// runtime thread serves others before the next batch.
const BATCH: usize = 500;

/// Free pages handed back per pass (4 KiB each).
const RECLAIM_PAGES: u32 = 4096;

/// Refusals written per window over all kinds, as a multiple of one kind's.
const TOTAL_PER_KIND: u32 = 10;

/// Kinds of refusal followed one by one within a window.
const MAX_KINDS: usize = 256;

/// How long the history tables keep their rows, and how many refusals are
/// written. Every table is bounded by a row count; an age of 0 days means
/// no age limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Events older than this many days are deleted (default 30; 0: none).
    #[serde(default = "thirty")]
    pub events_max_age_days: u32,
    /// The newest events kept (default 100,000).
    #[serde(default = "hundred_thousand")]
    pub events_max_rows: u64,
    /// Audit rows older than this many days are deleted (default 90; 0: none).
    #[serde(default = "ninety")]
    pub audit_max_age_days: u32,
    /// The newest audit rows kept (default 100,000).
    #[serde(default = "hundred_thousand")]
    pub audit_max_rows: u64,
    /// The newest runs kept (default 100,000; a run that has not ended
    /// and each app's current run are kept whatever the count).
    #[serde(default = "hundred_thousand")]
    pub runs_max_rows: u64,
    /// Seconds between two prunings (default 60).
    #[serde(default = "sixty")]
    pub prune_interval_secs: u64,
    /// Refusals of one kind (actor, socket, operation, code) written per
    /// window; the rest are counted into one summary row (default 10).
    #[serde(default = "ten")]
    pub refusals_per_window: u32,
    /// The refusal window, seconds (default 60).
    #[serde(default = "sixty")]
    pub refusal_window_secs: u64,
}

fn thirty() -> u32 {
    30
}
fn ninety() -> u32 {
    90
}
fn hundred_thousand() -> u64 {
    100_000
}
fn sixty() -> u64 {
    60
}
fn ten() -> u32 {
    10
}

impl Default for RetentionSettings {
    fn default() -> RetentionSettings {
        toml::from_str("").expect("defaults parse")
    }
}

impl RetentionSettings {
    /// Checks the settings: the key at fault and why.
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let unbounded = "must be at least 1: every table keeps a bounded number of rows";
        if self.events_max_rows == 0 {
            return Err(("retention.events_max_rows", unbounded));
        }
        if self.audit_max_rows == 0 {
            return Err(("retention.audit_max_rows", unbounded));
        }
        if self.runs_max_rows == 0 {
            return Err(("retention.runs_max_rows", unbounded));
        }
        let secs = "must be at least 1 (seconds)";
        if self.prune_interval_secs == 0 {
            return Err(("retention.prune_interval_secs", secs));
        }
        if self.refusal_window_secs == 0 {
            return Err(("retention.refusal_window_secs", secs));
        }
        Ok(())
    }

    /// What `table` keeps.
    pub fn keep(&self, table: History) -> Keep {
        let (rows, days) = match table {
            History::Events => (self.events_max_rows, self.events_max_age_days),
            History::Audit => (self.audit_max_rows, self.audit_max_age_days),
        };
        Keep {
            max_rows: rows,
            max_age_ms: (days > 0).then(|| i64::from(days) * DAY_MS),
        }
    }

    /// How many refusals are written.
    pub fn refusal_limits(&self) -> Limits {
        Limits {
            window_ms: self
                .refusal_window_secs
                .saturating_mul(1000)
                .min(i64::MAX as u64) as i64,
            per_kind: self.refusals_per_window,
            total: self.refusals_per_window.saturating_mul(TOTAL_PER_KIND),
            max_kinds: MAX_KINDS,
        }
    }
}

/// Closes the refusal windows when they are due, and prunes the history
/// tables every `prune_interval_secs` (and at start); in between it sleeps,
/// woken early only when a window opens or the limits change: a tick every
/// second with no window open was an idle daemon's wake-up for nothing.
pub async fn run(daemon: Arc<Daemon>) {
    let mut next_prune = Instant::now();
    let mut handed_back = false;
    loop {
        let due = daemon.refusals().next_due();
        let until = match due {
            Some(at) => {
                let ms = at.saturating_sub(crate::timefmt::now_ms()).max(0) as u64;
                next_prune.min(after(Duration::from_millis(ms)))
            }
            None => next_prune,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = daemon.refusals_due.notified() => continue,
        }
        daemon.close_refusal_windows(false);
        if Instant::now() >= next_prune {
            // Read each time: `reload-daemon-config` may have changed them.
            let settings = daemon.retention_settings();
            prune(&daemon.sup, &settings).await;
            next_prune = after(Duration::from_secs(settings.prune_interval_secs));
            if !handed_back {
                handed_back = true;
                tokio::task::spawn_blocking(hand_back_start_up_code);
            }
        }
    }
}

/// Start-up's code (arguments, daemon.toml, the schema, recovery, the first
/// prune) ran once and left most of the program resident (7 of its 9 MB):
/// handed back, what runs from now on is read in again as it runs
/// (`oxidepm_sys::memory`).
fn hand_back_start_up_code() {
    match oxidepm_sys::memory::page_out_own_code() {
        Ok(bytes) => log::debug!("start-up code handed back ({} KiB mapped)", bytes >> 10),
        Err(e) => log::debug!("cannot hand back the start-up code: {e}"),
    }
}

/// `wait` from now; a wait too long for the clock (a huge interval in
/// daemon.toml) is a year, which the loop then waits again.
fn after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Prunes the history tables, one batch at a time, yielding between
/// batches so that requests are served meanwhile; then shrinks the file.
pub async fn prune(sup: &Shared, settings: &RetentionSettings) {
    // A crash loop records a run every restart: about 0.8 GiB a year for
    // one app crashing every two seconds, unpruned.
    in_batches(sup, "runs", |store| {
        store.prune_runs(settings.runs_max_rows, BATCH)
    })
    .await;
    for table in [History::Events, History::Audit] {
        let keep = settings.keep(table);
        let what = match table {
            History::Events => "events",
            History::Audit => "audit rows",
        };
        in_batches(sup, what, |store| {
            store.prune(table, keep, crate::timefmt::now_ms(), BATCH)
        })
        .await;
    }
    if let Err(e) = lock(sup).store.reclaim(RECLAIM_PAGES) {
        log::error!("cannot shrink state.db: {e}");
    }
}

/// Runs `batch` (which deletes at most [`BATCH`] rows of `what`) until it
/// deletes fewer, yielding between batches.
async fn in_batches(
    sup: &Shared,
    what: &str,
    mut batch: impl FnMut(&crate::store::Store) -> crate::store::Result<usize>,
) {
    let mut deleted = 0;
    loop {
        let n = batch(&lock(sup).store);
        match n {
            Ok(n) => {
                deleted += n;
                if n < BATCH {
                    break;
                }
            }
            Err(e) => {
                log::error!("cannot prune old {what}: {e}");
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    if deleted > 0 {
        log::debug!("retention: {deleted} {what} deleted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_weeks_and_a_bounded_count() {
        let s = RetentionSettings::default();
        assert_eq!(
            s.keep(History::Events),
            Keep {
                max_rows: 100_000,
                max_age_ms: Some(30 * DAY_MS)
            }
        );
        assert_eq!(
            s.keep(History::Audit),
            Keep {
                max_rows: 100_000,
                max_age_ms: Some(90 * DAY_MS)
            }
        );
        assert_eq!(s.refusal_limits().per_kind, 10);
        assert_eq!(s.refusal_limits().window_ms, 60_000);
        assert!(s.check().is_ok());
    }

    #[test]
    fn an_unbounded_table_is_refused_and_age_zero_means_no_age_limit() {
        let s: RetentionSettings = toml::from_str("audit_max_rows = 0").unwrap();
        assert_eq!(s.check().unwrap_err().0, "retention.audit_max_rows");
        let s: RetentionSettings = toml::from_str("events_max_age_days = 0").unwrap();
        assert_eq!(s.keep(History::Events).max_age_ms, None);
        assert!(toml::from_str::<RetentionSettings>("audit_rows = 5").is_err());
    }
}
