//! One size-rotated log file, and the gaps that failed writes leave in it.
//!
//! It is opened, rotated and removed relative to its directory, held open,
//! and never through a symbolic link: the writer runs as the daemon's user
//! (often root), and a link planted under a log's name must not make it
//! write anywhere else. Such a link is reported and the output dropped.
//!
//! Output that cannot be written (disk full, quota, I/O error, the
//! directory gone) is dropped, never waited for, so the app never blocks
//! on its log. The bytes dropped are counted; when writing works again a
//! marker line says how many were lost, between when and when, and why,
//! and the log's total loss is kept in `<log>.dropped` for `oxidepm show`.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use oxidepm_sys::dir::{Access, Dir};

use crate::names::{dropped_name, rotated_name, split};
use crate::stamp;

/// Output lost since the last successful write, counted in bytes of the
/// log (timestamps included), as the file would have held it.
#[derive(Debug)]
struct Gap {
    /// Bytes of app output dropped.
    bytes: u64,
    /// When the first of them was dropped (ms since the epoch).
    since_ms: u64,
    /// Why the first was dropped.
    error: String,
}

/// One log file being written.
#[derive(Default)]
pub(crate) struct LogFile {
    path: PathBuf,
    /// The log's directory, opened at the first write.
    dir: Option<Dir>,
    max_bytes: u64,
    keep: u32,
    timestamps: bool,
    file: Option<File>,
    /// Bytes in the file as far as we know; the daemon may truncate it under us.
    size: u64,
    /// A failed write left an unterminated line in the file.
    torn: bool,
    /// An error was reported and not yet followed by success (avoids one message per chunk).
    failing: bool,
    /// Opening, writing or rotating failed during this chunk; retrying per
    /// line would only repeat the failure, so retry on the next chunk.
    pub(crate) stalled: bool,
    gap: Option<Gap>,
    /// The total in `<log>.dropped`, once read.
    dropped_total: Option<u64>,
}

impl LogFile {
    /// A log at `path`, not opened yet.
    pub(crate) fn new(path: &Path, timestamps: bool, max_bytes: u64, keep: u32) -> LogFile {
        LogFile {
            path: path.to_path_buf(),
            max_bytes,
            keep,
            timestamps,
            ..LogFile::default()
        }
    }

    /// Whether lines get a timestamp.
    pub(crate) fn timestamps(&self) -> bool {
        self.timestamps
    }

    /// Appends one line to `out`, first writing out and rotating when the
    /// line would take the file past `max_bytes`.
    pub(crate) fn push_line(&mut self, out: &mut Vec<u8>, stamp: &[u8], line: &[u8]) {
        let n = (stamp.len() + line.len() + 1) as u64;
        if self.max_bytes > 0 && !self.stalled {
            if self.file.is_none() {
                // The real size is needed before deciding where this line goes.
                self.ensure_open();
            }
            let pending = self.size + out.len() as u64;
            if pending > 0 && pending + n > self.max_bytes {
                self.write_out(out);
                self.rotate_if_over(n);
            }
        }
        out.extend_from_slice(stamp);
        out.extend_from_slice(line);
        out.push(b'\n');
    }

    fn ensure_open(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        if self.stalled {
            return false;
        }
        match self.open() {
            Ok(()) => true,
            Err(e) => {
                self.stalled = true;
                self.report("open", &e);
                self.note_drop(0, &e);
                // Look the directory up again next time: it may have been
                // removed and made anew.
                self.dir = None;
                false
            }
        }
    }

    /// The log's directory and its name in it.
    fn dir(&mut self) -> io::Result<(&Dir, &OsStr)> {
        let (dir_path, name) = split(&self.path)?;
        if self.dir.is_none() {
            self.dir = Some(Dir::open(dir_path)?);
        }
        Ok((self.dir.as_ref().expect("opened above"), name))
    }

    fn open(&mut self) -> io::Result<()> {
        let (dir, name) = self.dir()?;
        let file = dir.open_file(name, Access::AppendCreate { mode: 0o640 })?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Writes and clears `out`; on failure the data is dropped (and
    /// counted) so the app never blocks on us.
    pub(crate) fn write_out(&mut self, out: &mut Vec<u8>) {
        if out.is_empty() {
            return;
        }
        if !self.ensure_open() {
            self.note_drop(out.len() as u64, &io::Error::other("not written"));
            out.clear();
            return;
        }
        // Bytes at the front of `out` that are ours, not the app's.
        let mut ours = 0;
        if let Some(gap) = &self.gap {
            let marker = self.marker(gap);
            ours = marker.len();
            out.splice(0..0, marker);
        }
        if self.torn {
            out.insert(0, b'\n');
            ours += 1;
        }
        let file = self.file.as_mut().expect("opened above");
        let mut written = 0;
        let result = loop {
            if written == out.len() {
                break Ok(());
            }
            match file.write(&out[written..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(k) => written += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.size += written as u64;
        if written >= ours {
            self.close_gap();
        }
        match result {
            Ok(()) => {
                self.torn = false;
                if self.failing {
                    self.failing = false;
                    self.say("writing again");
                }
            }
            Err(e) => {
                if written > 0 {
                    self.torn = out[written - 1] != b'\n';
                }
                self.stalled = true;
                self.report("write", &e);
                self.note_drop((out.len() - written.max(ours)) as u64, &e);
                // Reopen next time: the file may have been replaced or its fs remounted.
                self.file = None;
            }
        }
        out.clear();
    }

    /// Counts `bytes` of output lost to `e` (0 bytes opens the gap only).
    fn note_drop(&mut self, bytes: u64, e: &io::Error) {
        let gap = self.gap.get_or_insert_with(|| Gap {
            bytes: 0,
            since_ms: stamp::now_ms(),
            error: describe(e),
        });
        gap.bytes += bytes;
    }

    /// The line that tells of a gap: `… N bytes dropped between T1 and T2: why`.
    fn marker(&self, gap: &Gap) -> Vec<u8> {
        let now = stamp::now_ms();
        let mut line = Vec::with_capacity(128);
        if self.timestamps {
            stamp::push_rfc3339(&mut line, now);
            line.push(b' ');
        }
        line.extend_from_slice(format!("… {} bytes dropped between ", gap.bytes).as_bytes());
        stamp::push_rfc3339(&mut line, gap.since_ms);
        line.extend_from_slice(b" and ");
        stamp::push_rfc3339(&mut line, now);
        line.extend_from_slice(format!(": {}\n", gap.error).as_bytes());
        line
    }

    /// The marker is in the log: adds the gap to `<log>.dropped`.
    fn close_gap(&mut self) {
        let Some(gap) = self.gap.take() else { return };
        if gap.bytes == 0 {
            return;
        }
        let known = self.dropped_total;
        let Ok((dir, name)) = self.dir() else { return };
        let counter = dropped_name(name);
        let before = known.unwrap_or_else(|| read_total(dir, &counter));
        let total = before.saturating_add(gap.bytes);
        let saved = dir
            .open_file(&counter, Access::ReplaceCreate { mode: 0o640 })
            .and_then(|mut f| f.write_all(format!("{total}\n").as_bytes()));
        self.dropped_total = Some(total);
        if let Err(e) = saved {
            self.say(&format!("cannot record {} dropped bytes: {e}", gap.bytes));
        }
    }

    fn rotate_if_over(&mut self, n: u64) {
        let Some(file) = &self.file else { return };
        // The tracked size may be stale: the daemon's flush truncates in place.
        if let Ok(meta) = file.metadata() {
            self.size = meta.len();
        }
        if self.size == 0 || self.size + n <= self.max_bytes {
            return;
        }
        if let Err(e) = self.rotate() {
            self.stalled = true;
            self.report("rotate", &e);
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        let ignore_missing = |r: io::Result<()>| match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        let keep = self.keep;
        let (dir, name) = self.dir()?;
        // Removing and renaming act on a link itself, never on its target.
        if keep == 0 {
            ignore_missing(dir.remove(name))?;
        } else {
            ignore_missing(dir.remove(&rotated_name(name, keep)))?;
            for i in (1..keep).rev() {
                ignore_missing(dir.rename(&rotated_name(name, i), &rotated_name(name, i + 1)))?;
            }
            ignore_missing(dir.rename(name, &rotated_name(name, 1)))?;
        }
        self.file = None;
        self.size = 0;
        self.torn = false;
        self.open()
    }

    fn report(&mut self, what: &str, e: &io::Error) {
        if !self.failing {
            self.failing = true;
            self.say(&format!("{what} failed: {e}"));
        }
    }

    fn say(&self, msg: &str) {
        // Not eprintln!: it panics if stderr is a pipe whose reader (the daemon) is gone.
        let _ = writeln!(
            io::stderr(),
            "oxidepm log writer: {}: {msg}",
            self.path.display()
        );
    }
}

/// An error as a person reads it: `No space left on device`, without the
/// `(os error 28)` that std appends.
fn describe(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The total in a `<log>.dropped` file; 0 when missing or unreadable.
pub fn read_total(dir: &Dir, counter: &OsStr) -> u64 {
    let Ok(file) = dir.open_file(counter, Access::Read) else {
        return 0;
    };
    let mut text = String::new();
    // A number and a newline: anything longer is not ours.
    if file.take(32).read_to_string(&mut text).is_err() {
        return 0;
    }
    text.trim().parse().unwrap_or(0)
}
