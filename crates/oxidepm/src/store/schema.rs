//! The schema and its migrations.

use rusqlite::Connection;

const SCHEMA_VERSION: i64 = 5;

/// The migrations in order: the one at index `i` takes the schema from
/// version `i` to `i + 1`, and says so in `user_version`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] =
    [TABLES, ROUTES, STOPPED_BY, RUN_BEFORE_FORK, AUDIT_VIA];

/// Version 1: apps, runs, events, audit and snapshots.
const TABLES: &str = "BEGIN;
             CREATE TABLE IF NOT EXISTS apps (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               name TEXT NOT NULL UNIQUE,
               spec TEXT NOT NULL,
               defined_by TEXT NOT NULL,
               created_at INTEGER NOT NULL,
               desired INTEGER NOT NULL DEFAULT 0,
               status TEXT NOT NULL,
               pid INTEGER, pid_start INTEGER, boot_id TEXT,
               restarts INTEGER NOT NULL DEFAULT 0,
               started_at INTEGER, last_exit INTEGER, run_id INTEGER);
             CREATE TABLE IF NOT EXISTS runs (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               app_id INTEGER NOT NULL, pid INTEGER NOT NULL,
               started_at INTEGER NOT NULL, ended_at INTEGER,
               exit_code INTEGER, signal INTEGER, actor TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS events (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               at INTEGER NOT NULL, app_id INTEGER NOT NULL, app TEXT NOT NULL,
               kind TEXT NOT NULL, actor TEXT NOT NULL, detail TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS events_by_app ON events(app_id, seq);
             CREATE TABLE IF NOT EXISTS audit (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               at INTEGER NOT NULL, actor TEXT NOT NULL, socket TEXT NOT NULL,
               op TEXT NOT NULL, apps TEXT NOT NULL, outcome TEXT NOT NULL,
               message TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS audit_by_time ON audit(at);
             CREATE TABLE IF NOT EXISTS snapshots (
               name TEXT PRIMARY KEY, at INTEGER NOT NULL, apps TEXT NOT NULL);
             PRAGMA user_version = 1;
             COMMIT;";

/// Version 2: the routes added at runtime.
const ROUTES: &str = "BEGIN;
             CREATE TABLE IF NOT EXISTS routes (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               route TEXT NOT NULL UNIQUE);
             PRAGMA user_version = 2;
             COMMIT;";

/// Version 3: who stopped an app, who saved a snapshot.
// Who stopped an app (its class), so that what only a person may start
// again stays so across daemon restarts; who saved a snapshot, so that
// nobody less trusted replaces it.
const STOPPED_BY: &str = "BEGIN;
             ALTER TABLE apps ADD COLUMN stopped_by TEXT;
             ALTER TABLE snapshots ADD COLUMN saved_by TEXT;
             PRAGMA user_version = 3;
             COMMIT;";

/// Version 4: a run's pid may be NULL.
// A run is recorded before its process is forked, so its pid is not known
// yet (NULL until the fork returns): a daemon killed in between leaves the
// intent, and recovery finds the process by its OXIDEPM_RUN marker. SQLite
// cannot relax NOT NULL in place.
const RUN_BEFORE_FORK: &str = "BEGIN;
             CREATE TABLE IF NOT EXISTS runs (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               app_id INTEGER NOT NULL, pid INTEGER,
               started_at INTEGER NOT NULL, ended_at INTEGER,
               exit_code INTEGER, signal INTEGER, actor TEXT NOT NULL);
             CREATE TABLE runs_v4 (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               app_id INTEGER NOT NULL, pid INTEGER,
               started_at INTEGER NOT NULL, ended_at INTEGER,
               exit_code INTEGER, signal INTEGER, actor TEXT NOT NULL);
             INSERT INTO runs_v4 SELECT id, app_id, pid, started_at, ended_at, exit_code, signal, actor FROM runs;
             DROP TABLE runs;
             ALTER TABLE runs_v4 RENAME TO runs;
             PRAGMA user_version = 4;
             COMMIT;";

/// Version 5: the front end an audited request came through (`mcp:stop`),
/// NULL for the CLI and for the rows written before.
// The table is made first if missing (as version 1 makes it), so the
// column can be added to whatever version 4 held.
const AUDIT_VIA: &str = "BEGIN;
             CREATE TABLE IF NOT EXISTS audit (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               at INTEGER NOT NULL, actor TEXT NOT NULL, socket TEXT NOT NULL,
               op TEXT NOT NULL, apps TEXT NOT NULL, outcome TEXT NOT NULL,
               message TEXT NOT NULL);
             ALTER TABLE audit ADD COLUMN via TEXT;
             PRAGMA user_version = 5;
             COMMIT;";

/// Sets pragmas and creates or migrates the schema.
pub fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    pragmas(conn)?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "state.db has schema version {version}, newer than this oxidepm ({SCHEMA_VERSION}); upgrade oxidepm"
        )));
    }
    for (from, migration) in (0..).zip(MIGRATIONS) {
        if version <= from {
            conn.execute_batch(migration)?;
        }
    }
    incremental_vacuum(conn)?;
    Ok(())
}

/// The connection's pragmas, set at every open.
fn pragmas(conn: &Connection) -> rusqlite::Result<()> {
    // WAL with synchronous=NORMAL: a commit is durable against a daemon crash
    // (the WAL is in the page cache), and only a power loss can take the last
    // commits; that trade keeps a state write far below a millisecond.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The WAL is truncated back to 4 MiB after a checkpoint, so a burst of
    // writes does not leave a large file behind for good.
    conn.pragma_update(None, "journal_size_limit", 4 * 1024 * 1024)?;
    Ok(())
}

/// Turns on `auto_vacuum = INCREMENTAL`, so that pages freed by retention
/// can be handed back to the file system (`Store::reclaim`). A database made
/// without it needs one VACUUM to switch: done once, here, at the first
/// start of a daemon that prunes; it rewrites the file, so a large old
/// state.db makes that one start slower (seconds for a million rows).
fn incremental_vacuum(conn: &Connection) -> rusqlite::Result<()> {
    const INCREMENTAL: i64 = 2;
    let mode: i64 = conn.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?;
    if mode != INCREMENTAL {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.execute_batch("VACUUM")?;
    }
    Ok(())
}
