//! The daemon's side of app logs: locating, tailing, following, flushing and
//! removing the files that the log shim (`super::logshim`) writes.
//!
//! Every log file is opened relative to its directory and never through a
//! symbolic link (`oxidepm_sys::dir`): a link planted in `logs/` is refused,
//! so nothing outside `logs/` is ever read, written, truncated or removed.

use oxidepm_sys::dir::{Access, Dir};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod follow;
mod merge;
mod reader;
mod search;
mod since;

pub use follow::Follower;
pub use merge::merge;
pub use reader::{newest_within_since, TailReader};
pub use search::{Found, Pattern, Search, MAX_CONTEXT};

const BLOCK: usize = 64 * 1024;

/// Rotated files looked for even beyond the configured count (the count may have been lowered).
const ROTATED_SCAN_MAX: u32 = 100;

/// `<logs_dir>/<app>-out.log` and `<logs_dir>/<app>-err.log`.
pub fn log_paths(logs_dir: &Path, app: &str) -> [PathBuf; 2] {
    [
        logs_dir.join(format!("{app}-out.log")),
        logs_dir.join(format!("{app}-err.log")),
    ]
}

/// `<path>.<i>`, the i-th most recent rotated file.
pub(crate) fn rotated_path(path: &Path, i: u32) -> PathBuf {
    PathBuf::from(rotated_name(path.as_os_str(), i))
}

pub(crate) use oxidepm_logwriter::{rotated_name, split};

/// Bytes the log at `path` lost to failed writes (disk full, I/O errors),
/// as its writer counted them in `<log>.dropped`; 0 when none or unknown.
pub fn dropped_bytes(path: &Path) -> u64 {
    let Ok((dir, name)) = split(path) else {
        return 0;
    };
    match Dir::open(dir) {
        Ok(dir) => oxidepm_logwriter::read_total(&dir, &oxidepm_logwriter::dropped_name(name)),
        Err(_) => 0,
    }
}

/// Opens the log at `path` relative to its directory, never through a link.
pub(crate) fn open_log(path: &Path, how: Access) -> io::Result<File> {
    let (dir, name) = split(path)?;
    Dir::open(dir)?.open_file(name, how)
}

fn lossy(line: &[u8]) -> String {
    String::from_utf8_lossy(line).into_owned()
}

fn ignore_missing<T: Default>(r: io::Result<T>) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        r => r,
    }
}

/// The last `n` lines of a log, reading back across `<path>`, `<path>.1`,
/// … `<path>.<keep>` as needed (oldest first in the result). All of them are
/// in memory at once: the tests' view; [`TailReader`] streams any number.
#[cfg(test)]
pub fn tail(path: &Path, keep: u32, n: usize) -> io::Result<Vec<String>> {
    let mut reader = TailReader::open(path, keep, n)?;
    let mut out = Vec::new();
    while reader.read(BLOCK, |line| out.push(lossy(line)))? {}
    Ok(out)
}

/// Empties a log: truncates the current file in place (the shim keeps
/// appending to it) and removes the rotated ones. A link in place of the
/// log is refused, never followed.
pub fn flush(path: &Path, keep_max: u32) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let dir = Dir::open(dir)?;
    // In place rather than replaced: the shim holds the file open with
    // O_APPEND, so its next write lands at the new end, offset 0.
    let truncated = match dir.open_file(name, Access::WriteExisting) {
        Ok(file) => file.set_len(0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    let removed = remove_rotated(&dir, name, keep_max);
    // The count of dropped bytes goes with the lines it was about.
    let counter = ignore_missing(dir.remove(&oxidepm_logwriter::dropped_name(name)));
    truncated.and(removed).and(counter)
}

/// Removes `<name>.1` … `<name>.<keep_max>` and any other `<name>.<number>`
/// in `dir` (a link among them is removed itself, not what it points to).
fn remove_rotated(dir: &Dir, name: &OsStr, keep_max: u32) -> io::Result<()> {
    let mut result = Ok(());
    let mut note = |r: io::Result<()>| {
        if let Err(e) = ignore_missing(r) {
            if result.is_ok() {
                result = Err(e);
            }
        }
    };
    for i in 1..=keep_max.max(ROTATED_SCAN_MAX) {
        note(dir.remove(&rotated_name(name, i)));
    }
    // Numbers beyond the range above, e.g. left by a larger `keep` in the past.
    let entries = match dir.names() {
        Ok(entries) => entries,
        Err(e) => {
            note(Err(e));
            return result;
        }
    };
    let name = name.as_bytes();
    for file_name in entries {
        let f = file_name.as_bytes();
        let is_rotated = f.len() > name.len() + 1
            && f.starts_with(name)
            && f[name.len()] == b'.'
            && f[name.len() + 1..].iter().all(u8::is_ascii_digit);
        if is_rotated {
            note(dir.remove(&file_name));
        }
    }
    result
}

#[cfg(test)]
mod tests;
