//! The log shim: `oxidepmd __logshim <args…>`, one process per app run.
//!
//! The shim, not the daemon, holds the read ends of an app's stdout and stderr
//! pipes. It outlives the daemon, so apps keep logging (no SIGPIPE, nothing
//! lost) while the daemon is down, and a slow disk only slows the app through
//! pipe backpressure, never the daemon's control plane.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};
use std::thread;

use chrono::{SecondsFormat, Utc};
use oxidepm_sys::dir::{Access, Dir};

use super::logfile::{rotated_name, split};

/// Longest line content written as one line; longer lines are cut into pieces this long.
pub const MAX_LINE: usize = 64 * 1024;

/// The fd the shim reads the app's stderr from (stdout comes on fd 0).
pub const ERR_INPUT_FD: RawFd = 3;

const READ_CHUNK: usize = 64 * 1024;

/// Why the shim's arguments were refused (they come from the daemon, so
/// this means a daemon and shim of different versions, or a hand-run shim).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShimArgsError {
    /// A value that does not parse.
    #[error("log shim: bad {arg:?} value {value:?}")]
    BadValue {
        /// The option.
        arg: OsString,
        /// Its value.
        value: OsString,
    },
    /// An option at the end, without its value.
    #[error("log shim: {arg:?} needs a value")]
    NoValue {
        /// The option.
        arg: OsString,
    },
    /// An option the shim does not know.
    #[error("log shim: unknown argument {arg:?}")]
    Unknown {
        /// The argument.
        arg: OsString,
    },
    /// A required option is absent (or, for a path, empty).
    #[error("log shim: {option} is required")]
    Missing {
        /// The option.
        option: &'static str,
    },
}

/// What one shim writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ShimConfig {
    /// Where the app's stdout goes.
    pub out_path: PathBuf,
    /// Where the app's stderr goes.
    pub err_path: PathBuf,
    /// Prefix each line with the UTC time it was read, to the millisecond.
    pub timestamps: bool,
    /// Rotate before a file would grow past this; 0 means never rotate.
    pub max_bytes: u64,
    /// Rotated files kept (`<path>.1` … `<path>.<keep>`).
    pub keep: u32,
}

impl ShimConfig {
    /// Arguments after `__logshim` that `from_args` reads back.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--out".into(),
            self.out_path.clone().into_os_string(),
            "--err".into(),
            self.err_path.clone().into_os_string(),
            "--max-bytes".into(),
            self.max_bytes.to_string().into(),
            "--keep".into(),
            self.keep.to_string().into(),
        ];
        if self.timestamps {
            args.push("--timestamps".into());
        }
        args
    }

    /// Parses what `to_args` produced.
    pub fn from_args(args: &[OsString]) -> Result<ShimConfig, ShimArgsError> {
        fn parse<T: std::str::FromStr>(arg: &OsStr, v: &OsStr) -> Result<T, ShimArgsError> {
            v.to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ShimArgsError::BadValue {
                    arg: arg.to_owned(),
                    value: v.to_owned(),
                })
        }
        let (mut out, mut err, mut max_bytes, mut keep) = (None, None, None, None);
        let mut timestamps = false;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "--timestamps" {
                timestamps = true;
                continue;
            }
            let v = it
                .next()
                .ok_or_else(|| ShimArgsError::NoValue { arg: arg.clone() })?;
            match arg.to_str() {
                Some("--out") => out = Some(PathBuf::from(v)),
                Some("--err") => err = Some(PathBuf::from(v)),
                Some("--max-bytes") => max_bytes = Some(parse(arg, v)?),
                Some("--keep") => keep = Some(parse(arg, v)?),
                _ => return Err(ShimArgsError::Unknown { arg: arg.clone() }),
            }
        }
        let path = |p: Option<PathBuf>, option: &'static str| match p {
            Some(p) if !p.as_os_str().is_empty() => Ok(p),
            _ => Err(ShimArgsError::Missing { option }),
        };
        Ok(ShimConfig {
            out_path: path(out, "--out")?,
            err_path: path(err, "--err")?,
            timestamps,
            max_bytes: max_bytes.ok_or(ShimArgsError::Missing {
                option: "--max-bytes",
            })?,
            keep: keep.ok_or(ShimArgsError::Missing { option: "--keep" })?,
        })
    }
}

/// Copies fd 0 to out_path and fd 3 to err_path until both reach EOF.
pub fn run(cfg: &ShimConfig) -> io::Result<()> {
    ignore_signals()?;
    let (out_input, err_input) = (take_fd(0)?, take_fd(ERR_INPUT_FD)?);
    let copy = |input, path| copy_stream(input, path, cfg.timestamps, cfg.max_bytes, cfg.keep);
    thread::scope(|scope| {
        let err_thread = thread::Builder::new()
            .name("logshim-err".into())
            .spawn_scoped(scope, || copy(err_input, &cfg.err_path))?;
        let out_result = copy(out_input, &cfg.out_path);
        let err_result = err_thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("stderr copier panicked")));
        out_result.and(err_result)
    })
}

/// A stop signal sent to the app's process group must not kill the logger
/// before it has drained what the app wrote; EOF is what ends the shim.
fn ignore_signals() -> io::Result<()> {
    use oxidepm_sys::signal::{ignore, Signal::*};
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] {
        ignore(sig)?;
    }
    Ok(())
}

/// The shim's inputs are fds 0 and 3 as the daemon set them up; in the
/// shim process nothing else owns them.
fn take_fd(fd: RawFd) -> io::Result<File> {
    match oxidepm_sys::fd::take_inherited(fd) {
        Ok(fd) => Ok(File::from(fd)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("log shim input fd {fd}: {e}"),
        )),
    }
}

/// The same loop for one reader/writer pair (used by `run` per stream and by tests).
pub fn copy_stream(
    mut input: impl Read,
    path: &Path,
    timestamps: bool,
    max_bytes: u64,
    keep: u32,
) -> io::Result<()> {
    let mut log = LogWriter::new(path, max_bytes, keep);
    // An unfinished line (at most MAX_LINE bytes) waits at the front of `buf`.
    let mut buf = vec![0u8; MAX_LINE + READ_CHUNK];
    let mut held = 0usize;
    let mut out = Vec::with_capacity(2 * buf.len());
    let mut stamp = Vec::new();
    loop {
        let (n, read_error) = match input.read(&mut buf[held..held + READ_CHUNK]) {
            Ok(n) => (n, None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => (0, Some(e)),
        };
        // One clock read per chunk: formatting per line would dominate the CPU cost.
        refresh_stamp(&mut stamp, timestamps);
        log.stalled = false;
        if n == 0 {
            if held > 0 {
                log.push_line(&mut out, &stamp, &buf[..held]);
                log.write_out(&mut out);
            }
            return read_error.map_or(Ok(()), Err);
        }
        let end = held + n;
        let mut start = 0;
        // Bytes before `held` were already searched for a newline.
        let mut search = held;
        while let Some(i) = buf[search..end].iter().position(|&b| b == b'\n') {
            let nl = search + i;
            push_cut(&mut log, &mut out, &stamp, &buf[start..nl]);
            start = nl + 1;
            search = start;
        }
        while end - start > MAX_LINE {
            log.push_line(&mut out, &stamp, &buf[start..start + MAX_LINE]);
            start += MAX_LINE;
        }
        log.write_out(&mut out);
        buf.copy_within(start..end, 0);
        held = end - start;
    }
}

/// Cuts at MAX_LINE from the line's start, so the result does not depend on
/// how the line was split across reads.
fn push_cut(log: &mut LogWriter, out: &mut Vec<u8>, stamp: &[u8], mut line: &[u8]) {
    while line.len() > MAX_LINE {
        log.push_line(out, stamp, &line[..MAX_LINE]);
        line = &line[MAX_LINE..];
    }
    log.push_line(out, stamp, line);
}

fn refresh_stamp(stamp: &mut Vec<u8>, timestamps: bool) {
    stamp.clear();
    if timestamps {
        stamp.extend_from_slice(
            Utc::now()
                .to_rfc3339_opts(SecondsFormat::Millis, true)
                .as_bytes(),
        );
        stamp.push(b' ');
    }
}

/// One size-rotated log file.
///
/// It is opened, rotated and removed relative to its directory, held open,
/// and never through a symbolic link: the shim runs as the daemon's user
/// (often root), and a link planted under a log's name must not make it
/// write anywhere else. Such a link is reported and the output dropped.
#[derive(Default)]
struct LogWriter {
    path: PathBuf,
    /// The log's directory, opened at the first write.
    dir: Option<Dir>,
    max_bytes: u64,
    keep: u32,
    file: Option<File>,
    /// Bytes in the file as far as we know; the daemon may truncate it under us.
    size: u64,
    /// A failed write left an unterminated line in the file.
    torn: bool,
    /// An error was reported and not yet followed by success (avoids one message per chunk).
    failing: bool,
    /// Opening, writing or rotating failed during this chunk; retrying per
    /// line would only repeat the failure, so retry on the next chunk.
    stalled: bool,
}

impl LogWriter {
    fn new(path: &Path, max_bytes: u64, keep: u32) -> LogWriter {
        let path = path.to_path_buf();
        LogWriter {
            path,
            max_bytes,
            keep,
            ..LogWriter::default()
        }
    }

    fn push_line(&mut self, out: &mut Vec<u8>, stamp: &[u8], line: &[u8]) {
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

    /// Writes and clears `out`; on failure the data is dropped so the app never blocks on us.
    fn write_out(&mut self, out: &mut Vec<u8>) {
        if out.is_empty() {
            return;
        }
        if !self.ensure_open() {
            out.clear();
            return;
        }
        if self.torn {
            out.insert(0, b'\n');
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
                // Reopen next time: the file may have been replaced or its fs remounted.
                self.file = None;
            }
        }
        out.clear();
    }

    fn rotate_if_over(&mut self, n: u64) {
        let Some(file) = &self.file else { return };
        // The tracked size may be stale: `logfile::flush` truncates in place.
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
            "oxidepm logshim: {}: {msg}",
            self.path.display()
        );
    }
}

#[cfg(test)]
mod tests;
