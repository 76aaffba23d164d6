//! Where the programs the lanes run are found: oxidepm's own beside the
//! daemon's executable (so that one installation's daemon runs its own
//! proxy and bridge), others (redis-server, useradd) on PATH.

use std::path::PathBuf;

/// A program installed beside the daemon's own executable.
pub(crate) fn sibling(name: &str) -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .filter(|p| p.is_file())
}

/// Finds a program on PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
