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
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

mod merge;
mod reader;
mod since;

pub use merge::merge;
pub use reader::{newest_within_since, TailReader};

const BLOCK: usize = 64 * 1024;

/// Rotated files looked for even beyond the configured count (the count may have been lowered).
const ROTATED_SCAN_MAX: u32 = 100;

/// A line this long without a newline is returned by `Follower` anyway, to bound memory.
const FOLLOW_MAX_PARTIAL: usize = 1024 * 1024;

/// Bytes one `Follower::poll` reads from a growing file before returning.
const FOLLOW_MAX_READ: u64 = 16 * 1024 * 1024;

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

/// Follows a log file from its current end (like `tail -F`).
///
/// Truncation is noticed when the file is shorter than what was already
/// read; a file truncated and then regrown past that point between two polls
/// looks like plain growth, as with `tail -F`.
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    /// (dev, inode) of `file`, to notice when `path` names a new file.
    id: (u64, u64),
    pos: u64,
    partial: Vec<u8>,
}

impl Follower {
    /// Starts at the end of the file; the file may not exist yet.
    pub fn open_at_end(path: &Path) -> Follower {
        let mut follower = Follower {
            path: path.to_path_buf(),
            file: None,
            id: (0, 0),
            pos: 0,
            partial: Vec::new(),
        };
        if let Ok(file) = open_log(path, Access::Read) {
            if let Ok(meta) = file.metadata() {
                follower.id = (meta.dev(), meta.ino());
                follower.pos = after_last_newline(&file, meta.len());
                follower.file = Some(file);
            }
        }
        follower
    }

    /// New complete lines appended since the last call (a partial last line waits).
    pub fn poll(&mut self) -> io::Result<Vec<String>> {
        let mut lines = Vec::new();
        if self.file.is_none() {
            match open_log(&self.path, Access::Read) {
                // Created after we started following: all of it is new.
                Ok(file) => self.attach(file)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(lines),
                Err(e) => return Err(e),
            }
        }
        if !self.drain(&mut lines, Some(FOLLOW_MAX_READ))? {
            return Ok(lines);
        }
        let current = match open_log(&self.path, Access::Read) {
            Ok(file) => file,
            // Between a remove and a create (keep = 0 rotation): keep the old file.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(lines),
            Err(e) => return Err(e),
        };
        let meta = current.metadata()?;
        if (meta.dev(), meta.ino()) != self.id {
            // The shim renames before it opens the new file, so nothing more
            // will be written to the old one: finish it, then switch.
            self.drain(&mut lines, None)?;
            if !self.partial.is_empty() {
                lines.push(lossy(&std::mem::take(&mut self.partial)));
            }
            self.attach(current)?;
            self.drain(&mut lines, Some(FOLLOW_MAX_READ))?;
        }
        Ok(lines)
    }

    fn attach(&mut self, file: File) -> io::Result<()> {
        let meta = file.metadata()?;
        self.id = (meta.dev(), meta.ino());
        self.pos = 0;
        self.partial.clear();
        self.file = Some(file);
        Ok(())
    }

    /// Reads complete lines from `pos`; true if it reached the end of the file.
    fn drain(&mut self, lines: &mut Vec<String>, limit: Option<u64>) -> io::Result<bool> {
        let Some(file) = &self.file else {
            return Ok(true);
        };
        if file.metadata()?.len() < self.pos {
            // Truncated (e.g. `flush`): what was written since starts at 0.
            self.pos = 0;
            self.partial.clear();
        }
        let mut buf = vec![0u8; BLOCK];
        let mut read = 0u64;
        loop {
            if limit.is_some_and(|l| read >= l) {
                return Ok(false);
            }
            let k = match file.read_at(&mut buf, self.pos) {
                Ok(0) => return Ok(true),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.pos += k as u64;
            read += k as u64;
            let mut chunk = &buf[..k];
            while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                if self.partial.is_empty() {
                    lines.push(lossy(&chunk[..i]));
                } else {
                    self.partial.extend_from_slice(&chunk[..i]);
                    lines.push(lossy(&std::mem::take(&mut self.partial)));
                }
                chunk = &chunk[i + 1..];
            }
            self.partial.extend_from_slice(chunk);
            if self.partial.len() >= FOLLOW_MAX_PARTIAL {
                lines.push(lossy(&std::mem::take(&mut self.partial)));
            }
        }
    }
}

/// Where following should start so that a line being written at the end is
/// returned whole once it completes, not as a fragment.
fn after_last_newline(file: &File, len: u64) -> u64 {
    let window = len.min(2 * BLOCK as u64);
    let mut buf = vec![0u8; window as usize];
    if file.read_exact_at(&mut buf, len - window).is_err() {
        return len;
    }
    match buf.iter().rposition(|&b| b == b'\n') {
        Some(i) => len - window + i as u64 + 1,
        None if window == len => 0,
        None => len,
    }
}

#[cfg(test)]
mod tests;
