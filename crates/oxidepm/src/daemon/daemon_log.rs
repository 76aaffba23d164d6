//! daemon.log when the daemon runs in the background: the `log` records
//! written to it, and the file rotated by size as app logs are
//! (`daemon.log.1` … `daemon.log.<keep>`).
//!
//! The file is opened, renamed and removed relative to the home's
//! descriptor and never through a symbolic link (`oxidepm_sys::dir`); the
//! home itself passed `paths::trust` before the daemon started. After a
//! rotation the new file also becomes the daemon's stdout and stderr, so a
//! panic message, and the log shims started from then on, write to the
//! current file rather than to a rotated one.

use crate::supervise::logfile::rotated_name;
use oxidepm_sys::dir::{Access, Dir};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// daemon.log, rotated by size.
pub struct DaemonLog {
    dir: Dir,
    name: OsString,
    max_bytes: u64,
    keep: u32,
    file: Option<File>,
    /// Bytes in the file; others (a panic, a log shim) append too, so it
    /// is read again before each record.
    size: u64,
    /// Make each new file the process's stdout and stderr.
    stdio: bool,
    /// A rotation failed: the next try waits until this size.
    retry_at: Option<u64>,
}

impl DaemonLog {
    /// Opens (creating, 0600 with the daemon's umask) `name` in the
    /// directory `dir`; rotates before it would grow past `max_bytes`
    /// (0: never), keeping `keep` rotated files. `stdio`: each file
    /// opened after a rotation becomes stdout and stderr.
    pub fn open(
        dir: &Path,
        name: &OsStr,
        max_bytes: u64,
        keep: u32,
        stdio: bool,
    ) -> io::Result<DaemonLog> {
        let mut log = DaemonLog {
            dir: Dir::open(dir)?,
            name: name.to_os_string(),
            max_bytes,
            keep,
            file: None,
            size: 0,
            stdio,
            retry_at: None,
        };
        log.reopen()?;
        Ok(log)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = self
            .dir
            .open_file(&self.name, Access::AppendCreate { mode: 0o600 })?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Whether `n` more bytes would take the file past its size, counting
    /// what others appended since the last look.
    fn over(&mut self, n: u64) -> bool {
        if self.max_bytes == 0 {
            return false;
        }
        // One fstat a record: cheap next to the write itself.
        if let Some(meta) = self.file.as_ref().and_then(|f| f.metadata().ok()) {
            self.size = meta.len();
        }
        let due = self.retry_at.is_none_or(|at| self.size >= at);
        due && self.size > 0 && self.size + n > self.max_bytes
    }

    /// `daemon.log.<keep-1>` → `.<keep>`, …, `daemon.log` → `.1`, then a
    /// new `daemon.log`. A link among them is moved or removed itself,
    /// never followed.
    fn rotate(&mut self) -> io::Result<()> {
        let missing_ok = |r: io::Result<()>| match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        let name = self.name.as_os_str();
        if self.keep == 0 {
            missing_ok(self.dir.remove(name))?;
        } else {
            missing_ok(self.dir.remove(&rotated_name(name, self.keep)))?;
            for i in (1..self.keep).rev() {
                missing_ok(
                    self.dir
                        .rename(&rotated_name(name, i), &rotated_name(name, i + 1)),
                )?;
            }
            missing_ok(self.dir.rename(name, &rotated_name(name, 1)))?;
        }
        self.reopen()?;
        if self.stdio {
            if let Some(f) = &self.file {
                for fd in [1, 2] {
                    nix::unistd::dup2(f.as_raw_fd(), fd).map_err(io::Error::from)?;
                }
            }
        }
        Ok(())
    }
}

impl Write for DaemonLog {
    /// Writes all of `buf` (one record) to one file: a record is never
    /// split across a rotation.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len() as u64;
        if self.over(n) {
            match self.rotate() {
                Ok(()) => self.retry_at = None,
                Err(e) => {
                    // Said in the log itself (the logger is busy with this
                    // very record); tried again after another max_bytes.
                    self.retry_at = Some(self.size + self.max_bytes);
                    if self.file.is_none() {
                        let _ = self.reopen();
                    }
                    if let Some(f) = self.file.as_mut() {
                        let line = format!("oxidepmd: cannot rotate daemon.log: {e}\n");
                        if f.write_all(line.as_bytes()).is_ok() {
                            self.size += line.len() as u64;
                        }
                    }
                }
            }
        }
        if self.file.is_none() {
            self.reopen()?;
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(buf)?;
        self.size += n;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
