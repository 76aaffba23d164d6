//! State in SQLite: apps (spec and runtime), runs, lifecycle events, audit
//! rows and saved snapshots. Every change is written when it happens, each in
//! its own transaction, so a crash never loses more than the change in flight
//! and a boot never starts from an empty list.

mod backup;
mod files;
mod health;
mod identity;
mod integrity;
mod retention;
mod rewrite;
mod runs;
mod saved;
mod schema;
mod sessions;

pub use backup::{backup_time, BACKUP_EVERY};
pub use health::RETRY_EVERY;
pub use rewrite::Image;

pub use sessions::SessionRow;

pub use retention::{History, Keep};

use oxidepm_proto::{Actor, AppSpec, AuditRecord, Class, EventKind, EventRecord, Status};
use rusqlite::{params, Connection};
use std::cell::{Cell, RefCell};
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
    /// state.db cannot be written at start, and daemon.toml does not
    /// allow running so.
    #[error(
        "{} cannot be written ({source}): the daemon would not be able to record the apps it \
         starts, and would start them twice after its next restart. Make it writable \
         (`chattr -i`, permissions, a read-write mount), or set allow_read_only_state = true in \
         daemon.toml to run with every change failing with E_STORAGE until it can be written",
        path.display()
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// Why it cannot be opened for writing.
        source: std::io::Error,
    },
    /// state.db fails its integrity check and no sound backup replaces it.
    #[error(
        "{} is corrupt ({reason}) and {backup}; it was left in place. Restore a copy of it, or \
         move it away (to start with no apps defined; live apps of this home are then found \
         again by their markers) and start the daemon again",
        path.display()
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What the integrity check says.
        reason: String,
        /// Why no backup was restored.
        backup: String,
    },
    /// The corrupt file cannot be moved aside, or the backup not copied.
    #[error("cannot restore {} from its backup: {source}", path.display())]
    Restore {
        /// The database file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A state.db rewritten from memory cannot be put in place.
    #[error("cannot put the rewritten {} in place: {source}", path.display())]
    Rewrite {
        /// The database file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The backup cannot be written.
    #[error("cannot write the backup {}: {source}", path.display())]
    Backup {
        /// The backup file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
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

/// The runtime part of an app that survives the daemon: the runtime
/// columns of its row, one field a column. The supervisor holds it as it
/// is in memory, so a state write is this struct and no conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// `desired`: whether the app should be running (false after a stop
    /// by request).
    pub desired_running: bool,
    /// `status`: last known status.
    pub status: Status,
    /// `pid`: the running process.
    pub pid: Option<u32>,
    /// `pid_start`: that process's start time in clock ticks since boot
    /// (`/proc/<pid>/stat` field 22).
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
    /// `stopped_by`: the class of the actor whose request stopped the app,
    /// until it starts again (what only a person may start again is
    /// decided from it).
    pub stopped_by: Option<Class>,
}

impl Default for Runtime {
    fn default() -> Runtime {
        Runtime {
            desired_running: false,
            status: Status::Stopped,
            pid: None,
            pid_start: None,
            boot_id: None,
            restarts: 0,
            started_at_ms: None,
            last_exit: None,
            run_id: None,
            stopped_by: None,
        }
    }
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
    pub runtime: Runtime,
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
    /// The front end it came through (`mcp:restart`), when one was named.
    pub via: Option<&'a str>,
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
    /// Rows at or before this Unix ms.
    pub until_ms: Option<i64>,
    /// Most recent rows.
    pub limit: usize,
}

/// The state database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The file opened, to tell when it is deleted or replaced.
    file: Option<identity::FileId>,
    /// What failed to reach the disk and is owed to it.
    health: RefCell<health::Health>,
    /// The next run id: ids are handed out here, so that a run whose
    /// insert failed keeps its id in memory and gets it on disk later.
    next_run: Cell<i64>,
    /// The largest app id handed out, so a rewrite never reuses one.
    max_app: Cell<i64>,
}

impl Store {
    /// Opens (creating or migrating) the database at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        prepare(&conn).map_err(|source| StoreError::Prepare {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Store::with_conn(conn, path))
    }

    fn with_conn(conn: Connection, path: &Path) -> Store {
        let seq = |table: &str| -> i64 {
            conn.query_row(
                &format!(
                    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{table}'), 0),
                            coalesce((SELECT max(id) FROM {table}), 0))"
                ),
                [],
                |r| r.get(0),
            )
            .unwrap_or(0)
        };
        let (runs, apps) = (seq("runs"), seq("apps"));
        Store {
            file: identity::FileId::of(path),
            path: path.to_path_buf(),
            health: RefCell::default(),
            next_run: Cell::new(runs + 1),
            max_app: Cell::new(apps),
            conn,
        }
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
                Runtime {
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
        let id = self.conn.last_insert_rowid();
        self.max_app.set(self.max_app.get().max(id));
        Ok(id as u64)
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

    /// Writes an app's runtime state; when that fails, the app is owed
    /// to the disk until a retry writes it.
    pub fn save_runtime(&self, id: u64, rt: &Runtime) -> Result<()> {
        self.noted(write_runtime(&self.conn, id, rt), |h| h.dirty_app(id))
    }

    /// A run id not handed out before. Every row of `runs` takes its id
    /// from here (never from AUTOINCREMENT), so an id given to a run whose
    /// insert failed is never given to another.
    pub fn reserve_run_id(&self) -> i64 {
        let id = self.next_run.get();
        self.next_run.set(id + 1);
        id
    }

    /// Records the end of a run (owed to the disk when that fails).
    pub fn end_run(&self, run_id: i64, exit_code: Option<i32>, signal: Option<i32>) -> Result<()> {
        let at = now_ms();
        let r = self
            .conn
            .prepare_cached(
                "UPDATE runs SET ended_at = ?2, exit_code = ?3, signal = ?4 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![run_id, at, exit_code, signal]));
        self.noted(r, |h| h.run_ended(run_id, (at, exit_code, signal)))
            .map(|_| ())
    }

    /// Records a lifecycle event (owed to the disk when that fails);
    /// returns its sequence number.
    pub fn record_event(
        &self,
        app_id: u64,
        app: &str,
        kind: &str,
        actor: &Actor,
        detail: &str,
    ) -> Result<u64> {
        let at = now_ms();
        let detail = cut(detail, MAX_TEXT);
        let r = self
            .conn
            .prepare_cached(
                "INSERT INTO events (at, app_id, app, kind, actor, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    at,
                    app_id as i64,
                    app,
                    kind,
                    actor.to_string(),
                    detail
                ])
            });
        self.noted(r, |h| {
            h.event(health::PendingEvent {
                at,
                app_id,
                app: app.to_string(),
                kind: kind.to_string(),
                actor: actor.to_string(),
                detail: detail.to_string(),
            })
        })
        .map(|_| self.conn.last_insert_rowid() as u64)
    }

    /// The most recent `limit` events (of the given apps, or all), oldest first.
    #[cfg(test)]
    pub fn events(&self, app_ids: Option<&[u64]>, limit: usize) -> Result<Vec<EventRecord>> {
        self.events_since(app_ids, limit, None)
    }

    /// The most recent `limit` events (of the given apps, or all) at or after
    /// `since_ms` (Unix ms) when given, oldest first.
    pub fn events_since(
        &self,
        app_ids: Option<&[u64]>,
        limit: usize,
        since_ms: Option<i64>,
    ) -> Result<Vec<EventRecord>> {
        let filter = match app_ids {
            Some(ids) => {
                let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                format!("AND app_id IN ({})", list.join(","))
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT seq, at, app_id, app, kind, actor, detail FROM events
             WHERE (?2 IS NULL OR at >= ?2) {filter}
             ORDER BY seq DESC LIMIT ?1"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params![limit as i64, since_ms], |r| {
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
                "INSERT INTO audit (at, actor, socket, op, apps, outcome, message, via)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                now_ms(),
                a.actor.to_string(),
                a.socket,
                a.op,
                apps,
                a.outcome,
                message,
                a.via
            ])?;
        Ok(())
    }

    /// Audit rows matching `f`, oldest first.
    pub fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at, actor, socket, op, apps, outcome, message, via FROM audit
             WHERE (?1 IS NULL OR actor = ?1
                    OR (instr(?1, ':') = 0 AND substr(actor, 1, length(?1) + 1) = ?1 || ':'))
               AND (?2 IS NULL OR at >= ?2) AND (?5 IS NULL OR at <= ?5)
               AND (?3 IS NULL OR EXISTS (SELECT 1 FROM json_each(audit.apps) WHERE value = ?3))
             ORDER BY seq DESC LIMIT ?4",
        )?;
        // An actor without `:` is a class alone (`ai`, `human`): every
        // label of it.
        let p = params![f.actor, f.since_ms, f.app, f.limit as i64, f.until_ms];
        let rows = stmt.query_map(p, |r| {
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
                via: r.get(8)?,
            })
        })?;
        let mut out = rows.collect::<std::result::Result<Vec<_>, _>>()?;
        out.reverse();
        Ok(out)
    }
}

/// Takes the file for this connection alone, then creates or migrates
/// the schema. Exclusive locking, set before the first access in WAL mode,
/// keeps SQLite's WAL index in the process's memory instead of a shared
/// mapping of `state.db-shm`: a mapped file that is truncated, made
/// immutable or hits a full disk kills the process with SIGBUS, where a
/// failed write is an error the daemon handles. No other process reads or
/// writes state.db while the daemon runs (read `state.db.bak` instead).
fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    schema::prepare(conn)?;
    sessions::prepare(conn)
}

/// Writes an app's runtime columns through `conn` (a connection or a
/// transaction).
fn write_runtime(conn: &Connection, id: u64, rt: &Runtime) -> rusqlite::Result<()> {
    conn.prepare_cached(
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
