//! state.db at the daemon's start: a read-only file is refused unless
//! daemon.toml allows it (a daemon that cannot record what it starts would
//! duplicate it after its next restart), and a file that fails
//! `PRAGMA quick_check` is moved aside and replaced by the rolling backup
//! when that one is sound, else the daemon refuses to start.

use super::backup::backup_path;
use super::files::{sibling, stamp};
use super::{Result, Store, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

impl Store {
    /// Opens state.db for the daemon, checking it as described above.
    /// With `allow_read_only`, a read-only file is opened as it is and
    /// every app is owed to the disk: each change fails with `E_STORAGE`
    /// until the file can be written, and the daemon says it is degraded.
    pub fn open_for_daemon(path: &Path, allow_read_only: bool) -> Result<Store> {
        if let Some(restored) = restore_missing(path) {
            return restored;
        }
        if let Some(source) = not_writable(path) {
            if !allow_read_only {
                return Err(StoreError::ReadOnly {
                    path: path.to_path_buf(),
                    source,
                });
            }
            return open_read_only(path, source);
        }
        let opened = Store::open(path).and_then(|s| {
            s.quick_check()?;
            Ok(s)
        });
        match opened {
            Err(e) => match corruption(&e) {
                Some(reason) => restore(path, &reason),
                None => Err(e),
            },
            ok => ok,
        }
    }

    /// `PRAGMA quick_check`: `Ok` when the database is sound.
    pub fn quick_check(&self) -> Result<()> {
        quick_check_conn(&self.conn).map_err(|reason| StoreError::Corrupt {
            path: self.path.clone(),
            reason,
            backup: String::new(),
        })
    }
}

/// `PRAGMA quick_check` of the database at `path`, opened read-only:
/// `Err` says what is wrong.
pub(super) fn quick_check_file(path: &Path) -> std::result::Result<(), String> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| e.to_string())?;
    quick_check_conn(&conn)
}

fn quick_check_conn(conn: &Connection) -> std::result::Result<(), String> {
    let rows: Vec<String> = conn
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| e.to_string())?;
    if rows.len() == 1 && rows[0] == "ok" {
        Ok(())
    } else {
        Err(rows.join("; "))
    }
}

/// Why `path` cannot be written, when it exists and cannot (an immutable
/// file, a read-only mount, permissions).
fn not_writable(path: &Path) -> Option<std::io::Error> {
    let r = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path);
    use nix::errno::Errno;
    let denied = [Errno::EPERM, Errno::EACCES, Errno::EROFS].map(|e| e as i32);
    match r {
        Err(e) if e.raw_os_error().is_some_and(|c| denied.contains(&c)) => Some(e),
        _ => None,
    }
}

/// The read-only file opened as allowed: every app owed, so that the
/// retry writes them all once the file is writable again.
fn open_read_only(path: &Path, source: std::io::Error) -> Result<Store> {
    log::warn!(
        "{} is read-only ({source}); running as allowed by daemon.toml allow_read_only_state: \
         changes are kept in memory only until it can be written",
        path.display()
    );
    let store = match Store::open(path) {
        Ok(s) => s,
        Err(_) => {
            let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|source| StoreError::Open {
                    path: path.to_path_buf(),
                    source,
                })?;
            Store::with_conn(conn, path)
        }
    };
    let apps = store.load_apps()?;
    {
        let mut h = store.health.borrow_mut();
        h.failed(&format!("the file is read-only at start: {source}"));
        for a in &apps {
            h.dirty_app(a.id);
        }
        h.dirty_sessions();
    }
    Ok(store)
}

/// What says that the database is corrupt, when `e` does.
fn corruption(e: &StoreError) -> Option<String> {
    use rusqlite::ErrorCode as C;
    let sql = match e {
        StoreError::Corrupt { reason, .. } => return Some(reason.clone()),
        StoreError::Open { source, .. } | StoreError::Prepare { source, .. } => source,
        StoreError::Sql(source) => source,
        _ => return None,
    };
    match sql.sqlite_error_code() {
        Some(C::NotADatabase) | Some(C::DatabaseCorrupt) => Some(sql.to_string()),
        _ => None,
    }
}

/// Moves the corrupt file aside and restores the backup when it is sound;
/// else refuses, leaving the file where it is.
fn restore(path: &Path, reason: &str) -> Result<Store> {
    let meta = usable_backup(path).map_err(|backup| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
        backup,
    })?;
    let aside = sibling(path, &format!("corrupt-{}", stamp()));
    let io = |source| StoreError::Restore {
        path: path.to_path_buf(),
        source,
    };
    std::fs::rename(path, &aside).map_err(io)?;
    for suffix in ["-wal", "-shm"] {
        let mut from = path.as_os_str().to_os_string();
        from.push(suffix);
        let mut to = aside.as_os_str().to_os_string();
        to.push(suffix);
        if Path::new(&from).exists() {
            std::fs::rename(&from, &to).map_err(io)?;
        }
    }
    let what = format!(
        "{} was corrupt ({reason}); it was moved to {}",
        path.display(),
        aside.display()
    );
    put_back(path, &meta, &what)
}

/// A state.db deleted, or emptied to 0 bytes (a disk that filled, a
/// careless `>`), while no daemon ran, with a sound backup beside it: the
/// backup is restored (a home that never had a state.db has no backup
/// either, and starts empty). An empty file taken as a new database would
/// forget every app, and leave their processes unsupervised.
fn restore_missing(path: &Path) -> Option<Result<Store>> {
    let what = match std::fs::symlink_metadata(path) {
        Err(_) => format!("{} was missing", path.display()),
        Ok(m) if m.file_type().is_file() && m.len() == 0 => {
            format!("{} was empty (0 bytes)", path.display())
        }
        Ok(_) => return None,
    };
    match usable_backup(path) {
        Ok(meta) => Some(put_back(path, &meta, &what)),
        Err(why) => {
            if what.ends_with("(0 bytes)") {
                log::warn!(
                    "{what} and {why}: starting with no apps; the processes of the apps it \
                     held are kept running as orphans (see `oxidepm whoami`) until apps of \
                     their names are defined again"
                );
            }
            None
        }
    }
}

/// The rolling backup of `path` when it is a sound regular file (its
/// metadata), else why not.
fn usable_backup(path: &Path) -> std::result::Result<std::fs::Metadata, String> {
    let bak = backup_path(path);
    match std::fs::symlink_metadata(&bak) {
        Err(_) => Err(format!("there is no backup at {}", bak.display())),
        Ok(m) if !m.file_type().is_file() => {
            Err(format!("{} is not a regular file", bak.display()))
        }
        Ok(m) => quick_check_file(&bak)
            .map(|()| m)
            .map_err(|why| format!("the backup {} is unusable too ({why})", bak.display())),
    }
}

/// Copies the backup (`meta` is its metadata) to `path` and opens it, with
/// a notice that says `what` happened and what was lost.
fn put_back(path: &Path, meta: &std::fs::Metadata, what: &str) -> Result<Store> {
    let bak = backup_path(path);
    let io = |source| StoreError::Restore {
        path: path.to_path_buf(),
        source,
    };
    let tmp = sibling(path, &format!("restore-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::fs::copy(&bak, &tmp).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    let store = Store::open(path)?;
    let when = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| crate::timefmt::rfc3339_ms(d.as_millis() as i64))
        .unwrap_or_else(|| "an unknown time".into());
    let text = format!(
        "{what}; the backup {} (written {when}) was restored: changes made after it \
         are lost; check `oxidepm status`",
        bak.display()
    );
    log::warn!("{text}");
    store.health.borrow_mut().notice(text);
    Ok(store)
}

/// Whether the database at `path` passes `PRAGMA quick_check`.
pub(super) fn intact(path: &Path) -> bool {
    quick_check_file(path).is_ok()
}
