//! State in SQLite: apps (spec and runtime), runs, lifecycle events, audit
//! rows and saved snapshots. Every change is written when it happens, each in
//! its own transaction, so a crash never loses more than the change in flight
//! and a boot never starts from an empty list.

mod retention;
mod runs;
mod schema;
mod sessions;

pub use sessions::SessionRow;

pub use retention::{History, Keep};

use oxidepm_proto::{Actor, AppSpec, AuditRecord, Class, EventKind, EventRecord, Status};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};

use crate::timefmt::{now_ms, rfc3339_ms};

/// A storage failure: what was being read or written, and the SQLite or
/// JSON error underneath.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file cannot be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's reason.
        source: rusqlite::Error,
    },
    /// The schema cannot be created or migrated.
    #[error("cannot prepare {}: {source}", path.display())]
    Prepare {
        /// The database file.
        path: PathBuf,
        /// SQLite's reason.
        source: rusqlite::Error,
    },
    /// A query or a write failed.
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A stored spec no longer reads as an app spec.
    #[error("app {id}: unreadable spec in state.db: {source}")]
    Spec {
        /// The app's id.
        id: i64,
        /// Why it does not read.
        source: serde_json::Error,
    },
    /// A value cannot be written as JSON.
    #[error("{0}")]
    Encode(#[source] serde_json::Error),
    /// A saved snapshot no longer reads.
    #[error("snapshot {name:?} is unreadable ({source}); nothing was changed")]
    Snapshot {
        /// The snapshot's name.
        name: String,
        /// Why it does not read.
        source: serde_json::Error,
    },
    /// A stored route no longer reads.
    #[error("unreadable route {text}: {source}")]
    Route {
        /// The route as stored.
        text: String,
        /// Why it does not read.
        source: serde_json::Error,
    },
}

/// The snapshot `save` and `resurrect` use when a request names none.
pub const DEFAULT_SNAPSHOT: &str = "default";

/// Result of a store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

/// The runtime columns of an app's row, one field a column. The supervisor
/// keeps its own runtime state and converts to and from this row, so the
/// store needs nothing of the supervisor and a state write serialises
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeRow {
    /// `desired`: whether the app should be running.
    pub desired_running: bool,
    /// `status`: last known status.
    pub status: Status,
    /// `pid`: the running process.
    pub pid: Option<u32>,
    /// `pid_start`: that process's start time in clock ticks since boot.
    pub pid_start: Option<u64>,
    /// `boot_id`: the boot the process was started in.
    pub boot_id: Option<String>,
    /// `restarts`: restart count.
    pub restarts: u64,
    /// `started_at`: Unix ms when the current process started.
    pub started_at_ms: Option<i64>,
    /// `last_exit`: exit code of the last run.
    pub last_exit: Option<i32>,
    /// `run_id`: the current row of `runs`.
    pub run_id: Option<i64>,
    /// `stopped_by`: the class of the actor whose request stopped the app
    /// (none once it starts again).
    pub stopped_by: Option<Class>,
}

/// An app as stored.
#[derive(Debug, Clone)]
pub struct StoredApp {
    /// Numeric id.
    pub id: u64,
    /// Its spec.
    pub spec: AppSpec,
    /// Who defined it.
    pub defined_by: Actor,
    /// Runtime state.
    pub runtime: RuntimeRow,
}

/// One app in a snapshot.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SnapshotApp {
    /// The spec.
    pub spec: AppSpec,
    /// Who defined it.
    pub defined_by: Actor,
}

/// An audit row about to be written.
#[derive(Debug, Clone)]
pub struct NewAudit<'a> {
    /// Who asked.
    pub actor: &'a Actor,
    /// Which socket.
    pub socket: &'a str,
    /// Operation name.
    pub op: &'a str,
    /// Apps touched.
    pub apps: &'a [String],
    /// `ok` or an error code.
    pub outcome: &'a str,
    /// Error message.
    pub message: &'a str,
}

/// Filter for [`Store::audit`].
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Rows that touched this app.
    pub app: Option<String>,
    /// Rows by this actor.
    pub actor: Option<String>,
    /// Rows at or after this Unix ms.
    pub since_ms: Option<i64>,
    /// Most recent rows.
    pub limit: usize,
}

/// The state database.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating or migrating) the database at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        schema::prepare(&conn)
            .and_then(|()| sessions::prepare(&conn))
            .map_err(|source| StoreError::Prepare {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Store { conn })
    }

    /// Every app, ordered by id.
    pub fn load_apps(&self) -> Result<Vec<StoredApp>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, spec, defined_by, desired, status, pid, pid_start, boot_id, restarts,
                    started_at, last_exit, run_id, stopped_by FROM apps ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                RuntimeRow {
                    desired_running: r.get::<_, i64>(3)? != 0,
                    status: Status::parse(&r.get::<_, String>(4)?).unwrap_or(Status::Stopped),
                    pid: r.get::<_, Option<i64>>(5)?.map(|p| p as u32),
                    pid_start: r.get::<_, Option<i64>>(6)?.map(|p| p as u64),
                    boot_id: r.get(7)?,
                    restarts: r.get::<_, i64>(8)? as u64,
                    started_at_ms: r.get(9)?,
                    last_exit: r.get(10)?,
                    run_id: r.get(11)?,
                    stopped_by: r
                        .get::<_, Option<String>>(12)?
                        .and_then(|c| Class::parse(&c)),
                },
            ))
        })?;
        let mut apps = Vec::new();
        for row in rows {
            let (id, spec, defined_by, runtime) = row?;
            // A row that cannot be read is reported, never silently dropped:
            // dropping it would let the next save forget the app.
            let spec: AppSpec =
                serde_json::from_str(&spec).map_err(|source| StoreError::Spec { id, source })?;
            let defined_by = serde_json::from_value(serde_json::Value::String(defined_by))
                .unwrap_or_else(|_| Actor::system("unknown"));
            apps.push(StoredApp {
                id: id as u64,
                spec,
                defined_by,
                runtime,
            });
        }
        Ok(apps)
    }

    /// Adds an app and returns its id.
    pub fn insert_app(&self, spec: &AppSpec, defined_by: &Actor) -> Result<u64> {
        let json = serde_json::to_string(spec).map_err(StoreError::Encode)?;
        self.conn
            .prepare_cached(
                "INSERT INTO apps (name, spec, defined_by, created_at, desired, status, restarts)
                 VALUES (?1, ?2, ?3, ?4, 0, 'stopped', 0)",
            )?
            .execute(params![spec.name, json, defined_by.to_string(), now_ms()])?;
        Ok(self.conn.last_insert_rowid() as u64)
    }

    /// Replaces an app's spec (and who defined it).
    pub fn update_spec(&self, id: u64, spec: &AppSpec, defined_by: &Actor) -> Result<()> {
        let json = serde_json::to_string(spec).map_err(StoreError::Encode)?;
        self.conn
            .prepare_cached("UPDATE apps SET name = ?2, spec = ?3, defined_by = ?4 WHERE id = ?1")?
            .execute(params![id as i64, spec.name, json, defined_by.to_string()])?;
        Ok(())
    }

    /// Forgets an app (its events and runs stay for the record).
    pub fn delete_app(&self, id: u64) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM apps WHERE id = ?1")?
            .execute(params![id as i64])?;
        Ok(())
    }

    /// Writes an app's runtime state.
    pub fn save_runtime(&self, id: u64, rt: &RuntimeRow) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE apps SET desired = ?2, status = ?3, pid = ?4, pid_start = ?5, boot_id = ?6,
                 restarts = ?7, started_at = ?8, last_exit = ?9, run_id = ?10, stopped_by = ?11
                 WHERE id = ?1",
            )?
            .execute(params![
                id as i64,
                rt.desired_running as i64,
                rt.status.as_str(),
                rt.pid.map(|p| p as i64),
                rt.pid_start.map(|p| p as i64),
                rt.boot_id,
                rt.restarts as i64,
                rt.started_at_ms,
                rt.last_exit,
                rt.run_id,
                rt.stopped_by.map(Class::as_str),
            ])?;
        Ok(())
    }

    /// Records the end of a run.
    pub fn end_run(&self, run_id: i64, exit_code: Option<i32>, signal: Option<i32>) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE runs SET ended_at = ?2, exit_code = ?3, signal = ?4 WHERE id = ?1",
            )?
            .execute(params![run_id, now_ms(), exit_code, signal])?;
        Ok(())
    }

    /// Records a lifecycle event.
    pub fn record_event(
        &self,
        app_id: u64,
        app: &str,
        kind: &str,
        actor: &Actor,
        detail: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO events (at, app_id, app, kind, actor, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                now_ms(),
                app_id as i64,
                app,
                kind,
                actor.to_string(),
                cut(detail, MAX_TEXT)
            ])?;
        Ok(())
    }

    /// The most recent `limit` events (of the given apps, or all), oldest first.
    pub fn events(&self, app_ids: Option<&[u64]>, limit: usize) -> Result<Vec<EventRecord>> {
        let filter = match app_ids {
            Some(ids) => {
                let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                format!("WHERE app_id IN ({})", list.join(","))
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT seq, at, app_id, app, kind, actor, detail FROM events {filter}
             ORDER BY seq DESC LIMIT ?1"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params![limit as i64], |r| {
            Ok(EventRecord {
                seq: r.get::<_, i64>(0)? as u64,
                at: rfc3339_ms(r.get(1)?),
                app_id: r.get::<_, i64>(2)? as u64,
                app: r.get(3)?,
                kind: EventKind::parse(&r.get::<_, String>(4)?),
                actor: parse_actor(&r.get::<_, String>(5)?),
                detail: r.get(6)?,
            })
        })?;
        let mut out = rows.collect::<std::result::Result<Vec<_>, _>>()?;
        out.reverse();
        Ok(out)
    }

    /// Writes an audit row.
    pub fn record_audit(&self, a: &NewAudit<'_>) -> Result<()> {
        let apps = serde_json::to_string(a.apps).unwrap_or_else(|_| "[]".into());
        let message = cut(a.message, MAX_TEXT);
        self.conn
            .prepare_cached(
                "INSERT INTO audit (at, actor, socket, op, apps, outcome, message)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                now_ms(),
                a.actor.to_string(),
                a.socket,
                a.op,
                apps,
                a.outcome,
                message
            ])?;
        Ok(())
    }

    /// Audit rows matching `f`, oldest first.
    pub fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at, actor, socket, op, apps, outcome, message FROM audit
             WHERE (?1 IS NULL OR actor = ?1) AND (?2 IS NULL OR at >= ?2)
               AND (?3 IS NULL OR EXISTS (SELECT 1 FROM json_each(audit.apps) WHERE value = ?3))
             ORDER BY seq DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![f.actor, f.since_ms, f.app, f.limit as i64], |r| {
            let apps: String = r.get(5)?;
            Ok(AuditRecord {
                seq: r.get::<_, i64>(0)? as u64,
                at: rfc3339_ms(r.get(1)?),
                actor: parse_actor(&r.get::<_, String>(2)?),
                socket: r.get(3)?,
                op: r.get(4)?,
                apps: serde_json::from_str(&apps).unwrap_or_default(),
                outcome: r.get(6)?,
                message: r.get(7)?,
            })
        })?;
        let mut out = rows.collect::<std::result::Result<Vec<_>, _>>()?;
        out.reverse();
        Ok(out)
    }

    /// Saves a named snapshot of apps (replacing one of the same name),
    /// with who saved it.
    pub fn save_snapshot(&self, name: &str, apps: &[SnapshotApp], saved_by: &Actor) -> Result<()> {
        let json = serde_json::to_string(apps).map_err(StoreError::Encode)?;
        self.conn
            .prepare_cached(
                "INSERT INTO snapshots (name, at, apps, saved_by) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(name) DO UPDATE SET at = excluded.at, apps = excluded.apps,
                 saved_by = excluded.saved_by",
            )?
            .execute(params![name, now_ms(), json, saved_by.to_string()])?;
        Ok(())
    }

    /// Who saved the snapshot `name`: `None` when there is no such
    /// snapshot, `Some(None)` when it was saved before oxidepm recorded it.
    pub fn snapshot_saved_by(&self, name: &str) -> Result<Option<Option<Actor>>> {
        let row: Option<Option<String>> = self
            .conn
            .prepare_cached("SELECT saved_by FROM snapshots WHERE name = ?1")?
            .query_row(params![name], |r| r.get(0))
            .optional()?;
        Ok(row.map(|by| by.map(|s| parse_actor(&s))))
    }

    /// Loads a named snapshot; `None` when there is none by that name.
    pub fn load_snapshot(&self, name: &str) -> Result<Option<Vec<SnapshotApp>>> {
        let json: Option<String> = self
            .conn
            .prepare_cached("SELECT apps FROM snapshots WHERE name = ?1")?
            .query_row(params![name], |r| r.get(0))
            .optional()?;
        match json {
            None => Ok(None),
            Some(j) => serde_json::from_str(&j)
                .map(Some)
                .map_err(|source| StoreError::Snapshot {
                    name: name.to_string(),
                    source,
                }),
        }
    }

    /// Routes added at runtime, in the order they were added.
    pub fn routes(&self) -> Result<Vec<oxidepm_proto::Route>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT route FROM routes ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            let text = r?;
            let route = match serde_json::from_str(&text) {
                Ok(r) => r,
                Err(source) => return Err(StoreError::Route { text, source }),
            };
            out.push(route);
        }
        Ok(out)
    }

    /// Adds a route; false when the same route is already there.
    pub fn add_route(&self, route: &oxidepm_proto::Route) -> Result<bool> {
        let text = serde_json::to_string(route).map_err(StoreError::Encode)?;
        let n = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO routes (route) VALUES (?1)")?
            .execute(params![text])?;
        Ok(n == 1)
    }

    /// Removes a route; false when there was no such route.
    pub fn remove_route(&self, route: &oxidepm_proto::Route) -> Result<bool> {
        let text = serde_json::to_string(route).map_err(StoreError::Encode)?;
        let n = self
            .conn
            .prepare_cached("DELETE FROM routes WHERE route = ?1")?
            .execute(params![text])?;
        Ok(n == 1)
    }
}

/// Bytes of an audit message or an event detail kept at most: what bounds
/// a row, and so the disk that `[retention]`'s row counts allow.
pub const MAX_TEXT: usize = 1024;

/// `s` cut to at most `max` bytes at a character boundary, marked with `…`.
fn cut(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end]).into()
}

fn parse_actor(s: &str) -> Actor {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .unwrap_or_else(|_| Actor::system("unknown"))
}

#[cfg(test)]
mod tests;
