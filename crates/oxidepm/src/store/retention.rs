//! Retention of the history tables (events, audit): the oldest rows beyond
//! a count or an age are deleted in small batches, and the pages they held
//! are handed back to the file system.
//!
//! Rows are only ever deleted from the oldest end, so `seq` (AUTOINCREMENT)
//! has no holes below its maximum: the newest `n` rows are those with
//! `seq > max(seq) - n`, found through the primary key in O(log n) without
//! counting or an OFFSET walk.

use super::{Result, Store};
use rusqlite::params;

/// A table that keeps a bounded history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Lifecycle events.
    Events,
    /// Audited requests.
    Audit,
}

impl History {
    fn table(self) -> &'static str {
        match self {
            History::Events => "events",
            History::Audit => "audit",
        }
    }
}

/// How much of a table's history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The newest rows kept at most (at least 1).
    pub max_rows: u64,
    /// Rows older than this are deleted; `None`: no age limit.
    pub max_age_ms: Option<i64>,
}

impl Store {
    /// Deletes, among the `batch` oldest rows of `table`, those beyond
    /// `keep` at `now_ms`; returns how many it deleted. Fewer than `batch`
    /// means nothing more is due now. One short statement, so a caller can
    /// let others use the database between batches.
    ///
    /// A row stamped later than rows after it (the clock went back) holds
    /// the age limit up behind it until the count limit passes it.
    pub fn prune(&self, table: History, keep: Keep, now_ms: i64, batch: usize) -> Result<usize> {
        let t = table.table();
        let sql = format!(
            "DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} ORDER BY seq LIMIT ?1)
               AND (seq <= (SELECT max(seq) FROM {t}) - ?2 OR at < ?3)"
        );
        // No age limit: a cut-off before every possible stamp.
        let before = keep
            .max_age_ms
            .map_or(i64::MIN, |age| now_ms.saturating_sub(age));
        let n = self.conn.prepare_cached(&sql)?.execute(params![
            batch as i64,
            keep.max_rows.min(i64::MAX as u64) as i64,
            before
        ])?;
        Ok(n)
    }

    /// Rows in `table`.
    #[cfg(test)]
    pub(crate) fn history_rows(&self, table: History) -> Result<u64> {
        let n: i64 = self.conn.query_row(
            &format!("SELECT count(*) FROM {}", table.table()),
            [],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    }

    /// Gives up to `pages` free pages back to the file system (the file
    /// shrinks; `auto_vacuum = INCREMENTAL`, see `schema`); returns the free
    /// pages left.
    pub fn reclaim(&self, pages: u32) -> Result<u64> {
        let free: i64 = self
            .conn
            .pragma_query_value(None, "freelist_count", |r| r.get(0))?;
        if free > 0 {
            // Stepped to the end: the pragma frees pages as it is stepped.
            let mut stmt = self
                .conn
                .prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
        }
        let free: i64 = self
            .conn
            .pragma_query_value(None, "freelist_count", |r| r.get(0))?;
        Ok(free as u64)
    }

    /// Writes an event stamped `at_ms`, as if it had happened then.
    #[cfg(test)]
    pub(crate) fn record_event_at(&self, at_ms: i64, app: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO events (at, app_id, app, kind, actor, detail)
             VALUES (?1, 1, ?2, 'started', 'human:cli', '')",
            params![at_ms, app],
        )?;
        Ok(())
    }

    /// Writes an audit row stamped `at_ms`, as if it had been written then.
    #[cfg(test)]
    pub(crate) fn record_audit_at(&self, at_ms: i64, op: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO audit (at, actor, socket, op, apps, outcome, message)
             VALUES (?1, 'human:cli', 'daemon', ?2, '[]', 'ok', '')",
            params![at_ms, op],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
