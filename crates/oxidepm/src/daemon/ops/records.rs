//! What the daemon recorded: lifecycle events and the audit trail.

use crate::daemon::Daemon;
use crate::store::AuditFilter;
use crate::supervise::lock;
use oxidepm_proto::{AuditRecord, ErrorBody, EventRecord};

/// Most rows one answer holds, whatever the client asks.
const MAX_ROWS: usize = 100_000;

impl Daemon {
    /// `events`: the most recent events of the selected apps (or all).
    pub(super) fn events(
        &self,
        target: Option<String>,
        limit: usize,
    ) -> Result<Vec<EventRecord>, ErrorBody> {
        let s = lock(&self.sup);
        let ids = match target {
            Some(t) => Some(s.resolve(&t)?),
            None => None,
        };
        s.store
            .events(ids.as_deref(), limit.clamp(1, MAX_ROWS))
            .map_err(super::internal)
    }

    /// `audit`: the most recent audited requests matching the filters.
    pub(super) fn audit_trail(
        &self,
        app: Option<String>,
        actor: Option<String>,
        since: Option<String>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ErrorBody> {
        let since_ms = match since {
            Some(t) => Some(crate::timefmt::parse_rfc3339_ms(&t).ok_or_else(|| {
                super::bad(format!(
                    "--since {t:?} is not an RFC 3339 time such as 2026-01-31T12:00:00Z"
                ))
            })?),
            None => None,
        };
        let f = AuditFilter {
            app,
            actor,
            since_ms,
            limit: limit.clamp(1, MAX_ROWS),
        };
        lock(&self.sup).store.audit(&f).map_err(super::internal)
    }
}
