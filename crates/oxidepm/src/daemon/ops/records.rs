//! What the daemon recorded: lifecycle events and the audit trail.

use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::store::AuditFilter;
use crate::supervise::lock;
use oxidepm_proto::{AuditRecord, EventRecord};

/// Most rows one answer holds, whatever the client asks.
const MAX_ROWS: usize = 100_000;

impl Daemon {
    /// `events`: the most recent events of the selected apps (or all, or
    /// `only` those the caller's grant narrows it to).
    pub(super) fn events(
        &self,
        target: Option<String>,
        limit: usize,
        since: Option<String>,
        only: Option<&[String]>,
    ) -> Result<Vec<EventRecord>, OpError> {
        let since_ms = match since {
            Some(t) => match crate::timefmt::parse_rfc3339_ms(&t) {
                Some(ms) => Some(ms),
                None => return Err(OpError::BadSince { since: t }),
            },
            None => None,
        };
        let s = lock(&self.sup);
        let ids = match (target, only) {
            (Some(t), _) => Some(s.resolve(&t)?),
            (None, Some(names)) => Some(
                s.apps()
                    .filter(|a| names.contains(&a.spec.name))
                    .map(|a| a.id)
                    .collect::<Vec<u64>>(),
            ),
            (None, None) => None,
        };
        if ids.as_ref().is_some_and(|i| i.is_empty()) {
            return Ok(Vec::new());
        }
        let limit = limit.clamp(1, MAX_ROWS);
        Ok(s.store.events_since(ids.as_deref(), limit, since_ms)?)
    }

    /// `audit`: the most recent audited requests matching the filters.
    pub(super) fn audit_trail(
        &self,
        app: Option<String>,
        actor: Option<String>,
        since: Option<String>,
        until: Option<String>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, OpError> {
        let ms = |t: Option<String>| match t {
            Some(t) => match crate::timefmt::parse_rfc3339_ms(&t) {
                Some(ms) => Ok(Some(ms)),
                None => Err(OpError::BadSince { since: t }),
            },
            None => Ok(None),
        };
        let f = AuditFilter {
            app,
            actor,
            since_ms: ms(since)?,
            until_ms: ms(until)?,
            limit: limit.clamp(1, MAX_ROWS),
        };
        Ok(lock(&self.sup).store.audit(&f)?)
    }
}
