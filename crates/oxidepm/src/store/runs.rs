//! Runs written around the fork that starts them: the intent (a run row
//! without a pid, and the app's row pointing at it) is committed before
//! the fork, the pid right after. A daemon killed in between leaves a run
//! whose process recovery finds by its `OXIDEPM_RUN` marker, never one
//! that nothing records.

use super::{Result, Runtime, Store};
use crate::timefmt::now_ms;
use oxidepm_proto::Actor;
use rusqlite::params;

impl Store {
    /// Records that app `app_id` is about to be forked: a new run (pid not
    /// known yet) and the app's runtime `rt` (pointing at that run, which
    /// this sets), in one transaction. Returns the run's id.
    ///
    /// When the write fails (disk full, a read-only file) the run keeps
    /// its id and both rows are owed to the disk: the fork goes on, as the
    /// process's `OXIDEPM_RUN` marker lets recovery find it whatever the
    /// file holds, and an app is not kept down by a full disk.
    pub fn begin_run(&self, app_id: u64, actor: &Actor, rt: &mut Runtime) -> Result<i64> {
        let mut rows = [(app_id, std::mem::take(rt))];
        let runs = self.begin_runs(actor, &mut rows);
        *rt = std::mem::take(&mut rows[0].1);
        Ok(runs[0])
    }

    /// [`Store::begin_run`] for many apps: every intent (app id, runtime)
    /// of `rows` is written and all are committed together, before any of
    /// their forks, so that a start of many apps costs one commit rather
    /// than one per app. Returns the runs' ids, in the order of `rows`.
    pub fn begin_runs(&self, actor: &Actor, rows: &mut [(u64, Runtime)]) -> Vec<i64> {
        if rows.is_empty() {
            return Vec::new();
        }
        let runs: Vec<i64> = rows
            .iter_mut()
            .map(|(_, rt)| {
                let run = self.reserve_run_id();
                rt.run_id = Some(run);
                run
            })
            .collect();
        let at = now_ms();
        let who = actor.to_string();
        // The intent must be committed before the fork, batch or not:
        // inside a batch it is committed with what the batch wrote so far,
        // and the batch goes on after it.
        let in_batch = !self.conn.is_autocommit();
        let write = |s: &Store| -> rusqlite::Result<()> {
            let mut insert = s.conn.prepare_cached(
                "INSERT INTO runs (id, app_id, pid, started_at, actor)
                 VALUES (?1, ?2, NULL, ?3, ?4)",
            )?;
            for ((app_id, rt), run) in rows.iter().zip(&runs) {
                insert.execute(params![run, *app_id as i64, at, who])?;
                super::write_runtime(&s.conn, *app_id, rt)?;
            }
            Ok(())
        };
        let written = if in_batch {
            let r = write(self).and_then(|()| self.conn.execute_batch("COMMIT"));
            if r.is_err() {
                let _ = self.conn.execute_batch("ROLLBACK");
                self.batch_lost();
            }
            let _ = self.conn.execute_batch("BEGIN IMMEDIATE");
            r
        } else {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .and_then(|()| write(self))
                .and_then(|()| self.conn.execute_batch("COMMIT"))
                .inspect_err(|_| {
                    let _ = self.conn.execute_batch("ROLLBACK");
                })
        };
        if let Err(e) = self.noted(written, |h| {
            for ((app_id, _), run) in rows.iter().zip(&runs) {
                h.run_started(*run, (*app_id, 0, at, who.clone()));
                h.dirty_app(*app_id);
            }
        }) {
            log::error!(
                "cannot record {} run(s) before their fork (kept in memory and retried): {e}",
                runs.len()
            );
        }
        runs
    }

    /// Records the pid of run `run_id`, once its process exists (or, for an
    /// adopted process, once it is known); owed to the disk when that
    /// Deletes up to `batch` of the oldest ended runs beyond the newest
    /// `keep` (never a run that has not ended, nor an app's current run:
    /// recovery finds processes by them); returns how many it deleted.
    /// Fewer than `batch` means nothing more is due now.
    pub fn prune_runs(&self, keep: u64, batch: usize) -> Result<usize> {
        let n = self
            .conn
            .prepare_cached(
                "DELETE FROM runs WHERE id IN (
                   SELECT id FROM runs
                    WHERE ended_at IS NOT NULL
                      AND id <= (SELECT max(id) FROM runs) - ?2
                      AND id NOT IN (SELECT run_id FROM apps WHERE run_id IS NOT NULL)
                    ORDER BY id LIMIT ?1)",
            )?
            .execute(params![batch as i64, keep.min(i64::MAX as u64) as i64])?;
        Ok(n)
    }

    /// fails.
    pub fn run_forked(&self, run_id: i64, pid: u32) -> Result<()> {
        // A start still owed takes the pid with it.
        self.health.borrow_mut().run_pid(run_id, pid);
        let r = self
            .conn
            .prepare_cached("UPDATE runs SET pid = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![run_id, pid as i64]));
        self.noted(r, |h| h.run_pid_owed(run_id, pid)).map(|_| ())
    }

    /// Records that run `run_id` never got a process (its fork failed).
    pub fn run_failed(&self, run_id: i64) -> Result<()> {
        self.end_run(run_id, None, None)
    }

    /// Makes every app id given from now on greater than `id`: processes
    /// of apps this database no longer knows (it was lost) still carry
    /// their old ids in their marker and cgroup, and a new app must never
    /// be taken for one of them.
    pub fn reserve_app_ids(&self, id: u64) -> Result<()> {
        self.in_transaction(|s| {
            let n = s
                .conn
                .prepare_cached(
                    "UPDATE sqlite_sequence SET seq = MAX(seq, ?1) WHERE name = 'apps'",
                )?
                .execute(params![id as i64])?;
            if n == 0 {
                s.conn
                    .prepare_cached("INSERT INTO sqlite_sequence (name, seq) VALUES ('apps', ?1)")?
                    .execute(params![id as i64])?;
            }
            Ok(())
        })
    }

    /// Opens a batch: the writes until [`Store::end_batch`] are committed
    /// together. Returns whether this call opened it (false inside an
    /// outer batch, which commits them).
    pub fn begin_batch(&self) -> bool {
        self.conn.is_autocommit() && self.conn.execute_batch("BEGIN IMMEDIATE").is_ok()
    }

    /// Commits the batch `began` says this caller opened.
    pub fn end_batch(&self, began: bool) {
        if began && !self.conn.is_autocommit() {
            let r = self.conn.execute_batch("COMMIT");
            if r.is_err() {
                let _ = self.conn.execute_batch("ROLLBACK");
                self.batch_lost();
            }
            if let Err(e) = self.noted(r, |_| {}) {
                log::error!("cannot commit the state (kept in memory and retried): {e}");
            }
        }
    }

    /// A batch's commit failed: which of its rows were lost is not known,
    /// so every app (its row when the batch defined it, its runtime row,
    /// its current run) and the sessions are owed (written again from
    /// memory); the batch's events are lost.
    fn batch_lost(&self) {
        let mut h = self.health.borrow_mut();
        h.everything_dirty();
    }

    /// Runs `f` in one transaction (committed when `f` succeeds, rolled
    /// back otherwise), so that the writes of one change, or of one
    /// request's many changes, cost one commit. Nested calls join the
    /// outer transaction.
    pub fn in_transaction<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        if !self.conn.is_autocommit() {
            return f(self);
        }
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        match f(self) {
            Ok(v) => match self.conn.execute_batch("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(e.into())
                }
            },
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_proto::{AppSpec, Class, Status};

    #[test]
    fn intent_is_recorded_before_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let human = Actor::new(Class::Human, "cli");
        let id = store
            .insert_app(&AppSpec::new("web", "sleep", vec![]), &human)
            .unwrap();
        let mut rt = Runtime {
            status: Status::Starting,
            desired_running: true,
            ..store.load_apps().unwrap()[0].runtime.clone()
        };
        let run = store.begin_run(id, &human, &mut rt).unwrap();
        drop(store);
        // A daemon killed here: the intent is there, without a pid.
        let store = Store::open(&path).unwrap();
        let app = &store.load_apps().unwrap()[0];
        assert_eq!(app.runtime.run_id, Some(run));
        assert_eq!(app.runtime.status, Status::Starting);
        assert!(app.runtime.desired_running);
        let pid: Option<i64> = store
            .conn
            .query_row("SELECT pid FROM runs WHERE id = ?1", [run], |r| r.get(0))
            .unwrap();
        assert_eq!(pid, None);
        store.run_forked(run, 4242).unwrap();
        let pid: Option<i64> = store
            .conn
            .query_row("SELECT pid FROM runs WHERE id = ?1", [run], |r| r.get(0))
            .unwrap();
        assert_eq!(pid, Some(4242));
    }

    #[test]
    fn ended_runs_beyond_the_count_are_pruned_and_current_ones_never() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let actor = Actor::new(Class::Human, "cli");
        let app = store
            .insert_app(&AppSpec::new("web", "sleep", vec![]), &actor)
            .unwrap();
        let mut rt = store.load_apps().unwrap()[0].runtime.clone();
        let mut ids = Vec::new();
        for _ in 0..10 {
            let id = store.begin_run(app, &actor, &mut rt).unwrap();
            store.run_forked(id, 100).unwrap();
            ids.push(id);
        }
        // All but the last two have ended; the first is an app's current
        // run (as after a lost state).
        for id in &ids[..8] {
            store
                .conn
                .execute("UPDATE runs SET ended_at = 1 WHERE id = ?1", [id])
                .unwrap();
        }
        store
            .conn
            .execute("UPDATE apps SET run_id = ?1", [ids[0]])
            .unwrap();
        // The newest 3 kept whatever they are: of the rest, ended ones go.
        assert_eq!(store.prune_runs(3, 4).unwrap(), 4);
        assert_eq!(store.prune_runs(3, 4).unwrap(), 2);
        assert_eq!(store.prune_runs(3, 4).unwrap(), 0);
        let left: Vec<i64> = store
            .conn
            .prepare("SELECT id FROM runs ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(left, [ids[0], ids[7], ids[8], ids[9]]);
    }

    #[test]
    fn ids_of_lost_apps_are_not_given_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let human = Actor::new(Class::Human, "cli");
        store.reserve_app_ids(41).unwrap();
        let id = store
            .insert_app(&AppSpec::new("a", "sleep", vec![]), &human)
            .unwrap();
        assert_eq!(id, 42);
        store.reserve_app_ids(10).unwrap();
        let id = store
            .insert_app(&AppSpec::new("b", "sleep", vec![]), &human)
            .unwrap();
        assert_eq!(id, 43);
    }

    #[test]
    fn an_old_runs_table_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE runs (
                   id INTEGER PRIMARY KEY AUTOINCREMENT,
                   app_id INTEGER NOT NULL, pid INTEGER NOT NULL,
                   started_at INTEGER NOT NULL, ended_at INTEGER,
                   exit_code INTEGER, signal INTEGER, actor TEXT NOT NULL);
                 INSERT INTO runs (app_id, pid, started_at, actor) VALUES (1, 77, 5, 'human:cli');
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let (pid, actor): (Option<i64>, String) = store
            .conn
            .query_row("SELECT pid, actor FROM runs WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((pid, actor.as_str()), (Some(77), "human:cli"));
        store
            .conn
            .execute(
                "INSERT INTO runs (app_id, pid, started_at, actor) VALUES (1, NULL, 6, 'x')",
                [],
            )
            .unwrap();
    }
}
