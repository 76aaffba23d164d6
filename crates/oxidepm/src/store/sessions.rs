//! The sessions of every app's runs, kept so that an app's processes are
//! still found by session after its main process exited and after the
//! daemon restarted, where no cgroup holds them (see
//! `supervise::cgroup`). A row lives from the run's spawn until no
//! process of the session is left or the app is deleted.
//!
//! The table is made with `IF NOT EXISTS` at every open rather than by a
//! numbered migration: it holds nothing that an older oxidepm needs, and
//! an older oxidepm opening the file simply ignores it.

use super::{Result, Store};
use rusqlite::{params, Connection};

/// A recorded session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRow {
    /// The app.
    pub app_id: u64,
    /// The session id (the pid of its leader, the run's main process).
    pub sid: u32,
    /// The leader's start time in clock ticks since boot.
    pub leader_start: u64,
}

/// Creates the table when it is missing.
pub(super) fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS app_sessions (
           app_id INTEGER NOT NULL, sid INTEGER NOT NULL,
           leader_start INTEGER NOT NULL, boot_id TEXT NOT NULL,
           PRIMARY KEY (app_id, sid));",
    )
}

impl Store {
    /// Records the session of a new run.
    pub fn add_session(&self, row: SessionRow, boot_id: &str) -> Result<()> {
        let r = self
            .conn
            .prepare_cached(
                "INSERT OR REPLACE INTO app_sessions (app_id, sid, leader_start, boot_id)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.app_id as i64,
                    row.sid as i64,
                    row.leader_start as i64,
                    boot_id
                ])
            });
        self.noted(r, |h| h.dirty_sessions()).map(|_| ())
    }

    /// Forgets one session of an app.
    pub fn remove_session(&self, app_id: u64, sid: u32) -> Result<()> {
        let r = self
            .conn
            .prepare_cached("DELETE FROM app_sessions WHERE app_id = ?1 AND sid = ?2")
            .and_then(|mut s| s.execute(params![app_id as i64, sid as i64]));
        self.noted(r, |h| h.dirty_sessions()).map(|_| ())
    }

    /// Forgets every session of an app.
    pub fn remove_sessions(&self, app_id: u64) -> Result<()> {
        let r = self
            .conn
            .prepare_cached("DELETE FROM app_sessions WHERE app_id = ?1")
            .and_then(|mut s| s.execute(params![app_id as i64]));
        self.noted(r, |h| h.dirty_sessions()).map(|_| ())
    }

    /// The sessions recorded in boot `boot_id`; those of earlier boots are
    /// dropped (no process outlives a boot).
    pub fn sessions(&self, boot_id: &str) -> Result<Vec<SessionRow>> {
        self.conn
            .prepare_cached("DELETE FROM app_sessions WHERE boot_id != ?1")?
            .execute(params![boot_id])?;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT app_id, sid, leader_start FROM app_sessions")?;
        let rows = stmt.query_map([], |r| {
            Ok(SessionRow {
                app_id: r.get::<_, i64>(0)? as u64,
                sid: r.get::<_, i64>(1)? as u32,
                leader_start: r.get::<_, i64>(2)? as u64,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_survive_a_reopen_and_not_a_reboot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let row = |sid| SessionRow {
            app_id: 1,
            sid,
            leader_start: 5,
        };
        store.add_session(row(10), "boot").unwrap();
        store.add_session(row(11), "boot").unwrap();
        store.add_session(row(12), "old").unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.sessions("boot").unwrap(), vec![row(10), row(11)]);
        store.remove_session(1, 10).unwrap();
        assert_eq!(store.sessions("boot").unwrap(), vec![row(11)]);
        store.remove_sessions(1).unwrap();
        assert!(store.sessions("boot").unwrap().is_empty());
    }
}
