//! Writing what the store owes: the retry of failed writes from the
//! supervisor's memory, and the rewrite of a state.db that was deleted,
//! replaced or truncated under the daemon. Both take an [`Image`] of memory:
//! every app with its id (the id an app's processes carry in their run
//! marker), its runtime row, the run it is in, and the recorded sessions.

use super::files::{remove_db_files, sibling, stamp, with_suffix};
use super::health::Owed;
use super::identity::{self, FileId};
use super::integrity::intact;
use super::{sessions::SessionRow, Result, Store, StoredApp};
use crate::timefmt::now_ms;
use rusqlite::{params, Connection, Transaction};
use std::path::{Path, PathBuf};

/// What memory holds that recovery needs from state.db.
#[derive(Debug, Clone, Default)]
pub struct Image {
    /// Every app, with its id, spec and runtime row.
    pub apps: Vec<StoredApp>,
    /// Every recorded session.
    pub sessions: Vec<SessionRow>,
    /// The boot the sessions belong to.
    pub boot_id: String,
}

impl Store {
    /// Writes what is owed: rewrites the file from `image` when it was
    /// lost, else writes the rows whose writes failed. On failure the debt
    /// stays (and the connection is reopened, so that a file made writable
    /// again is seen); the caller tries again later.
    pub fn catch_up(&mut self, image: &Image) -> Result<()> {
        let lost = self.health.borrow().lost_reason().map(str::to_string);
        if let Some(why) = lost {
            return self.rewrite(image, &why);
        }
        // A handle opened while the file could not be written is
        // read-only for good: open it again first.
        if self
            .conn
            .is_readonly(rusqlite::DatabaseName::Main)
            .unwrap_or(true)
        {
            self.reopen();
        }
        let owed = self.health.borrow().owed();
        let result = {
            let tx = self.conn.transaction()?;
            write_owed(&tx, image, &owed).and_then(|()| tx.commit())
        };
        match result {
            Ok(()) => {
                self.health.borrow_mut().written(&owed);
                log::info!("state.db: the writes that had failed are written now");
                Ok(())
            }
            Err(e) => {
                self.health.borrow_mut().still_failing(&e);
                self.reopen();
                Err(e.into())
            }
        }
    }

    /// Opens the connection again (a read-only or failed handle does not
    /// always notice that the file became writable). Keeps the old one
    /// when the file cannot be opened.
    fn reopen(&mut self) {
        // The old handle holds the file's lock: it goes first. Should the
        // file not open at all, an empty in-memory handle takes its place,
        // on which every write fails (and is owed) rather than being lost.
        if let Ok(placeholder) = Connection::open_in_memory() {
            self.conn = placeholder;
        }
        match Connection::open(&self.path) {
            Ok(c) => {
                if let Err(e) = super::prepare(&c) {
                    log::warn!("state.db: {}: {e}", self.path.display());
                }
                self.conn = c;
            }
            Err(e) => log::warn!("state.db: cannot reopen {}: {e}", self.path.display()),
        }
    }

    /// Rewrites state.db from memory: what the old file still holds
    /// (events, audit rows, snapshots, routes) is copied when it can be
    /// read and is intact; the apps, their runs and the sessions come from
    /// `image`. The new file is built beside the old one and renamed into
    /// place; whatever stands at the name is kept under a timestamped name.
    fn rewrite(&mut self, image: &Image, why: &str) -> Result<()> {
        let tmp = sibling(&self.path, &format!("rewrite-{}", std::process::id()));
        let salvaged = self.salvage(&tmp);
        if let Err(e) = self.build(&tmp, image) {
            remove_db_files(&tmp);
            self.health.borrow_mut().still_failing(&e);
            return Err(e.into());
        }
        self.put_in_place(&tmp)?;
        let kept = if salvaged {
            "events, audit rows, snapshots and routes were copied from the old file"
        } else {
            "events, audit rows, snapshots and routes added at runtime were lost"
        };
        let text = format!(
            "{} {why}; it was rewritten from memory at {} with all {} app(s); {kept}",
            self.path.display(),
            crate::timefmt::rfc3339_ms(now_ms()),
            image.apps.len()
        );
        log::warn!("{text}");
        let mut h = self.health.borrow_mut();
        h.rewritten();
        h.notice(text);
        Ok(())
    }

    /// Copies what the old file holds to `tmp`, if it can be read and is
    /// intact; whether it was.
    fn salvage(&self, tmp: &Path) -> bool {
        remove_db_files(tmp);
        // The old descriptor still reads the old inode when the name was
        // deleted or replaced: keep what it has.
        let salvaged = self
            .conn
            .execute("VACUUM INTO ?1", params![tmp.to_string_lossy()])
            .is_ok()
            && intact(tmp);
        if !salvaged {
            remove_db_files(tmp);
        }
        salvaged
    }

    /// Writes the apps, their runs, the sessions and what else is owed
    /// from `image` into the database at `tmp`.
    fn build(&self, tmp: &Path, image: &Image) -> rusqlite::Result<()> {
        let mut c = Connection::open(tmp)?;
        super::prepare(&c)?;
        let owed = self.health.borrow().owed();
        let tx = c.transaction()?;
        tx.execute("DELETE FROM apps", [])?;
        for a in &image.apps {
            insert_app_row(&tx, a)?;
        }
        // Run rows the marker of a live process may name.
        for a in &image.apps {
            if let (Some(run), Some(pid)) = (a.runtime.run_id, a.runtime.pid) {
                tx.execute(
                    "INSERT OR IGNORE INTO runs (id, app_id, pid, started_at, actor)
                     VALUES (?1, ?2, ?3, ?4, 'system:rewrite')",
                    params![
                        run,
                        a.id as i64,
                        pid as i64,
                        a.runtime.started_at_ms.unwrap_or_else(now_ms)
                    ],
                )?;
            }
        }
        write_owed(
            &tx,
            image,
            &Owed {
                apps: vec![],
                sessions: false,
                ..owed
            },
        )?;
        write_sessions(&tx, image)?;
        // Ids are never handed out twice, even after a rewrite that lost
        // the sequence.
        tx.execute(
            "INSERT OR REPLACE INTO sqlite_sequence (name, seq) VALUES
             ('apps', max(?1, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'apps'), 0)))",
            params![self.max_app.get()],
        )?;
        tx.commit()?;
        // Closing checkpoints the WAL into the file, so the rename below
        // moves a whole database.
        c.close().map_err(|(_, e)| e)
    }

    /// Moves what stands at the name aside (with its WAL) and renames the
    /// rebuilt file at `tmp` into its place, then opens it.
    fn put_in_place(&mut self, tmp: &Path) -> Result<()> {
        let aside = self.move_aside("lost");
        // The old connection is closed before the new file takes the name:
        // closing removes `state.db-wal` by name, which must still be the
        // old one's.
        self.conn = Connection::open_in_memory()?;
        for suffix in ["-wal", "-shm"] {
            let leftover = with_suffix(&self.path, suffix);
            if leftover.exists() {
                let _ = std::fs::rename(&leftover, with_suffix(&aside, suffix));
            }
        }
        if let Err(e) = std::fs::rename(tmp, &self.path) {
            log::error!("state.db: cannot put the rewritten file in place: {e}");
            self.reopen();
            return Err(super::StoreError::Rewrite {
                path: self.path.clone(),
                source: e,
            });
        }
        self.reopen();
        self.file = FileId::of(&self.path);
        Ok(())
    }

    /// Moves whatever stands at the name aside (kept, named with `what`
    /// and a timestamp); returns that name.
    pub(super) fn move_aside(&self, what: &str) -> PathBuf {
        let aside = sibling(&self.path, &format!("{what}-{}", stamp()));
        if std::fs::symlink_metadata(&self.path).is_ok() {
            if let Err(e) = std::fs::rename(&self.path, &aside) {
                log::warn!("state.db: cannot move {} aside: {e}", self.path.display());
            }
        }
        aside
    }

    /// Checks that the file is still the one opened (a write into a
    /// deleted file succeeds and is lost); notes it as lost when not.
    /// `deep`: also that it still starts as a database (see
    /// [`identity::check`]).
    pub fn check_file(&self, deep: bool) -> bool {
        let Some(expected) = self.file else {
            return true;
        };
        match identity::check(&self.path, expected, deep) {
            None => true,
            Some(why) => {
                let mut h = self.health.borrow_mut();
                if h.lost_reason().is_none() {
                    log::error!("{} {why}", self.path.display());
                }
                h.lost(why);
                false
            }
        }
    }
}

fn write_owed(tx: &Transaction<'_>, image: &Image, owed: &Owed) -> rusqlite::Result<()> {
    for id in &owed.apps {
        if let Some(a) = image.apps.iter().find(|a| a.id == *id) {
            super::write_runtime(tx, a.id, &a.runtime)?;
        }
    }
    if owed.everything {
        for a in &image.apps {
            // An app the lost batch defined is inserted again; the others'
            // rows are there and only their runtime is written.
            insert_app_row(tx, a)?;
            if let Some(run) = a.runtime.run_id {
                tx.execute(
                    "INSERT OR IGNORE INTO runs (id, app_id, pid, started_at, actor)
                     VALUES (?1, ?2, ?3, ?4, 'system:recover')",
                    params![
                        run,
                        a.id as i64,
                        a.runtime.pid.map(|p| p as i64),
                        a.runtime.started_at_ms.unwrap_or_else(now_ms)
                    ],
                )?;
            }
        }
    }
    for (run, p) in &owed.runs {
        if let Some((app_id, pid, at, actor)) = &p.start {
            // 0: the start was owed before its fork reported a pid.
            let pid = (*pid != 0).then_some(*pid as i64);
            tx.execute(
                "INSERT OR IGNORE INTO runs (id, app_id, pid, started_at, actor)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run, *app_id as i64, pid, at, actor],
            )?;
        }
        if let Some(pid) = p.pid {
            tx.execute(
                "UPDATE runs SET pid = ?2 WHERE id = ?1",
                params![run, pid as i64],
            )?;
        }
        if let Some((at, code, signal)) = p.end {
            tx.execute(
                "UPDATE runs SET ended_at = ?2, exit_code = ?3, signal = ?4 WHERE id = ?1",
                params![run, at, code, signal],
            )?;
        }
    }
    if owed.sessions {
        write_sessions(tx, image)?;
    }
    for e in &owed.events {
        tx.execute(
            "INSERT INTO events (at, app_id, app, kind, actor, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![e.at, e.app_id as i64, e.app, e.kind, e.actor, e.detail],
        )?;
    }
    Ok(())
}

fn write_sessions(tx: &Transaction<'_>, image: &Image) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM app_sessions", [])?;
    for s in &image.sessions {
        tx.execute(
            "INSERT OR REPLACE INTO app_sessions (app_id, sid, leader_start, boot_id)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                s.app_id as i64,
                s.sid as i64,
                s.leader_start as i64,
                image.boot_id
            ],
        )?;
    }
    Ok(())
}

/// Inserts app `a` unless its row is there, then writes its runtime.
fn insert_app_row(tx: &Transaction<'_>, a: &StoredApp) -> rusqlite::Result<()> {
    let spec = serde_json::to_string(&a.spec)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    tx.execute(
        "INSERT OR IGNORE INTO apps (id, name, spec, defined_by, created_at, desired, status, restarts)
         VALUES (?1, ?2, ?3, ?4, ?5, 0, 'stopped', 0)",
        params![
            a.id as i64,
            a.spec.name,
            spec,
            a.defined_by.to_string(),
            now_ms()
        ],
    )?;
    super::write_runtime(tx, a.id, &a.runtime)
}

#[cfg(test)]
mod tests;
