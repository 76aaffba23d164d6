//! The files of a database beside state.db: their names (a sibling, a
//! timestamp, the WAL's suffixes) and their removal.

use crate::timefmt::now_ms;
use std::path::{Path, PathBuf};

/// `state.db.<what>` beside `path`.
pub(super) fn sibling(path: &Path, what: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(what);
    path.with_file_name(name)
}

/// `path` with `suffix` after its name.
pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Removes a database file and its WAL and shared-memory files.
pub(super) fn remove_db_files(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
}

/// A timestamp for file names: `20260131T120000123Z`.
pub(super) fn stamp() -> String {
    let t = crate::timefmt::rfc3339_ms(now_ms());
    t.chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}
