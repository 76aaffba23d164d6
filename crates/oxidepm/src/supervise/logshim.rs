//! The log shim: `oxidepmd __logshim <args…>`, one process per app run.
//!
//! The shim, not the daemon, holds the read ends of an app's stdout and stderr
//! pipes. It outlives the daemon, so apps keep logging (no SIGPIPE, nothing
//! lost) while the daemon is down, and a slow disk only slows the app through
//! pipe backpressure, never the daemon's control plane.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::thread;

use chrono::{SecondsFormat, Utc};

use super::logfile::rotated_path;

/// Longest line content written as one line; longer lines are cut into pieces this long.
pub const MAX_LINE: usize = 64 * 1024;

/// The fd the shim reads the app's stderr from (stdout comes on fd 0).
pub const ERR_INPUT_FD: RawFd = 3;

const READ_CHUNK: usize = 64 * 1024;

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
    pub fn from_args(args: &[OsString]) -> Result<ShimConfig, String> {
        fn parse<T: std::str::FromStr>(arg: &OsStr, v: &OsStr) -> Result<T, String> {
            v.to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("log shim: bad {arg:?} value {v:?}"))
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
                .ok_or_else(|| format!("log shim: {arg:?} needs a value"))?;
            match arg.to_str() {
                Some("--out") => out = Some(PathBuf::from(v)),
                Some("--err") => err = Some(PathBuf::from(v)),
                Some("--max-bytes") => max_bytes = Some(parse(arg, v)?),
                Some("--keep") => keep = Some(parse(arg, v)?),
                _ => return Err(format!("log shim: unknown argument {arg:?}")),
            }
        }
        let path = |p: Option<PathBuf>, name: &str| match p {
            Some(p) if !p.as_os_str().is_empty() => Ok(p),
            _ => Err(format!("log shim: {name} is required")),
        };
        Ok(ShimConfig {
            out_path: path(out, "--out")?,
            err_path: path(err, "--err")?,
            timestamps,
            max_bytes: max_bytes.ok_or("log shim: --max-bytes is required")?,
            keep: keep.ok_or("log shim: --keep is required")?,
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
    use nix::sys::signal::{signal, SigHandler, Signal::*};
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] {
        // SAFETY: SIG_IGN installs no handler code, so nothing can run in
        // signal context.
        unsafe { signal(sig, SigHandler::SigIgn) }.map_err(io::Error::from)?;
    }
    Ok(())
}

fn take_fd(fd: RawFd) -> io::Result<File> {
    // SAFETY: F_GETFD only queries the descriptor.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("log shim input fd {fd}: {e}"),
        ));
    }
    // SAFETY: the fd is open and, in the shim process, nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
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
#[derive(Default)]
struct LogWriter {
    path: PathBuf,
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
                false
            }
        }
    }

    fn open(&mut self) -> io::Result<()> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&self.path)?;
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
        if self.keep == 0 {
            ignore_missing(fs::remove_file(&self.path))?;
        } else {
            ignore_missing(fs::remove_file(rotated_path(&self.path, self.keep)))?;
            for i in (1..self.keep).rev() {
                ignore_missing(fs::rename(
                    rotated_path(&self.path, i),
                    rotated_path(&self.path, i + 1),
                ))?;
            }
            ignore_missing(fs::rename(&self.path, rotated_path(&self.path, 1)))?;
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
mod tests {
    use super::*;
    use std::io::Cursor;

    fn read(path: &Path) -> String {
        String::from_utf8(fs::read(path).unwrap()).unwrap()
    }

    /// Each read returns what the closure gives (at most one read's worth; empty is EOF).
    struct FnReader<F>(F);
    impl<F: FnMut() -> Vec<u8>> Read for FnReader<F> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let piece = (self.0)();
            buf[..piece.len()].copy_from_slice(&piece);
            Ok(piece.len())
        }
    }

    /// Returns `data` in reads of `size` bytes, as a pipe might.
    fn pieces(data: &[u8], size: usize) -> impl Read + '_ {
        let mut it = data.chunks(size);
        FnReader(move || it.next().unwrap_or_default().to_vec())
    }

    #[test]
    fn args_round_trip() {
        for timestamps in [true, false] {
            let cfg = ShimConfig {
                out_path: "/l/a b-out.log".into(),
                err_path: "/l/a b-err.log".into(),
                timestamps,
                max_bytes: 10 << 20,
                keep: 7,
            };
            assert_eq!(ShimConfig::from_args(&cfg.to_args()).unwrap(), cfg);
        }
        for bad in [
            "--out a --err b --max-bytes 1",
            "--out a --err b --max-bytes x --keep 1",
            "--out a --err b --max-bytes 1 --keep 1 -v",
            "--out a --max-bytes 1 --keep 1",
            "--out",
        ] {
            let args: Vec<OsString> = bad.split(' ').map(OsString::from).collect();
            assert!(ShimConfig::from_args(&args).is_err(), "{bad}");
        }
    }

    #[test]
    fn timestamps_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        copy_stream(Cursor::new("hello\n\nworld"), &path, true, 0, 0).unwrap();
        let text = read(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        for (line, want) in lines.iter().zip(["hello", "", "world"]) {
            let (ts, rest) = line.split_at(24);
            assert_eq!(rest, format!(" {want}"));
            let t = chrono::DateTime::parse_from_rfc3339(ts).unwrap().to_utc();
            // Round-trips exactly: UTC, `Z`, three fraction digits.
            assert_eq!(t.to_rfc3339_opts(SecondsFormat::Millis, true), ts);
            assert!((Utc::now() - t).num_seconds().abs() < 60);
        }
        assert!(text.ends_with("world\n"));
    }

    #[test]
    fn appends_to_existing_file_and_creates_0640() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        copy_stream(Cursor::new("old\n"), &path, false, 0, 0).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o}");
        copy_stream(Cursor::new("a\nb\n"), &path, false, 0, 0).unwrap();
        assert_eq!(read(&path), "old\na\nb\n");
    }

    #[test]
    fn partial_line_joined_across_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut it = ["hel", "lo\nwor", "ld\n", "ta", "il", ""].into_iter();
        let input = FnReader(move || it.next().unwrap().as_bytes().to_vec());
        copy_stream(input, &path, false, 0, 0).unwrap();
        assert_eq!(read(&path), "hello\nworld\ntail\n");
    }

    #[test]
    fn long_lines_cut_the_same_whatever_the_reads() {
        let mut data = vec![b'a'; 2 * MAX_LINE + 10];
        data.push(b'\n');
        data.extend(vec![b'b'; MAX_LINE]);
        data.push(b'\n');
        data.extend(vec![b'c'; MAX_LINE + 1]);
        let m = MAX_LINE;
        let want = [
            (b'a', m),
            (b'a', m),
            (b'a', 10),
            (b'b', m),
            (b'c', m),
            (b'c', 1),
        ];
        let dir = tempfile::tempdir().unwrap();
        for size in [1000, 4096, READ_CHUNK - 1, READ_CHUNK] {
            let path = dir.path().join(format!("{size}.log"));
            copy_stream(pieces(&data, size), &path, false, 0, 0).unwrap();
            let text = read(&path);
            let got: Vec<(u8, usize)> = text
                .split_terminator('\n')
                .map(|l| (l.as_bytes()[0], l.len()))
                .collect();
            assert_eq!(got, want, "read size {size}");
            assert!(text.ends_with('\n'));
        }
    }

    /// All rotated files oldest first, then the current one.
    fn all_lines(path: &Path, keep: u32, max_bytes: u64) -> Vec<String> {
        let mut lines = Vec::new();
        for i in (0..=keep).rev() {
            let p = match i {
                0 => path.to_path_buf(),
                i => rotated_path(path, i),
            };
            if let Ok(text) = fs::read_to_string(&p) {
                assert!(text.is_empty() || text.ends_with('\n'), "{p:?}");
                assert!(text.len() as u64 <= max_bytes, "{p:?}: {}", text.len());
                lines.extend(text.lines().map(str::to_owned));
            }
        }
        assert!(!rotated_path(path, keep + 1).exists());
        lines
    }

    #[test]
    fn rotation_loses_and_tears_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-out.log");
        let (max_bytes, keep, total) = (256 * 1024, 60, 200_000);
        let line = |i: usize| format!("line {i:07} {}", "x".repeat(i % 13));
        let (reader, mut writer) = io::pipe().unwrap();
        let feeder = thread::spawn(move || {
            let data: String = (0..total).map(|i| line(i) + "\n").collect();
            // Odd-sized writes put line ends anywhere in the shim's reads.
            for chunk in data.as_bytes().chunks(7919) {
                writer.write_all(chunk).unwrap();
            }
        });
        copy_stream(reader, &path, true, max_bytes, keep).unwrap();
        feeder.join().unwrap();
        assert!(rotated_path(&path, 20).exists());
        let lines = all_lines(&path, keep, max_bytes);
        assert_eq!(lines.len(), total);
        for (i, got) in lines.iter().enumerate() {
            assert_eq!(got[24..], format!(" {}", line(i)));
        }
    }

    #[test]
    fn rotation_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let data: String = (0..10_000).map(|i| format!("{i:05}\n")).collect();
        copy_stream(pieces(data.as_bytes(), 1000), &path, false, 600, 3).unwrap();
        assert!(rotated_path(&path, 3).exists());
        let lines = all_lines(&path, 3, 600);
        // Each full file holds 100 lines of 6 bytes.
        assert!(lines.len() > 300 && lines.len() <= 400, "{}", lines.len());
        let first: usize = lines[0].parse().unwrap();
        for (k, line) in lines.iter().enumerate() {
            assert_eq!(line, &format!("{:05}", first + k));
        }
        assert_eq!(lines.last().unwrap(), "09999");
    }

    #[test]
    fn keep_zero_starts_the_file_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let data: String = (0..1000).map(|i| format!("{i:03}\n")).collect();
        copy_stream(Cursor::new(data), &path, false, 100, 0).unwrap();
        let lines = all_lines(&path, 0, 100);
        assert_eq!(lines.last().unwrap(), "999");
    }

    #[test]
    fn existing_size_counts_toward_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        fs::write(&path, "x".repeat(95) + "\n").unwrap();
        copy_stream(Cursor::new("abcdef\n"), &path, false, 100, 2).unwrap();
        assert_eq!(read(&rotated_path(&path, 1)).len(), 96);
        assert_eq!(read(&path), "abcdef\n");
    }

    #[test]
    fn write_errors_do_not_stop_the_shim() {
        // /dev/full fails every write with ENOSPC: all input must still be consumed.
        let data = "y\n".repeat(100_000);
        let mut input = Cursor::new(data.as_bytes());
        copy_stream(&mut input, Path::new("/dev/full"), true, 0, 0).unwrap();
        assert_eq!(input.position() as usize, data.len());

        // A log directory that appears later: the open is retried on the next chunk.
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("logs");
        let path = sub.join("a.log");
        let mut reads = 0;
        let input = FnReader(|| {
            reads += 1;
            match reads {
                1 => b"lost\n".to_vec(),
                2 => {
                    fs::create_dir(&sub).unwrap();
                    b"kept\n".to_vec()
                }
                _ => Vec::new(),
            }
        });
        copy_stream(input, &path, false, 1000, 2).unwrap();
        assert_eq!(read(&path), "kept\n");
    }

    #[test]
    fn throughput() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let lines = 200_000;
        let data = format!("{}\n", "z".repeat(99)).repeat(lines);
        let start = std::time::Instant::now();
        copy_stream(Cursor::new(data), &path, true, 0, 0).unwrap();
        let secs = start.elapsed().as_secs_f64();
        let len = fs::metadata(&path).unwrap().len();
        assert_eq!(len, (lines * (100 + 25)) as u64);
        println!(
            "logshim: {lines} lines in {secs:.3}s, {:.0}/s",
            lines as f64 / secs
        );
    }
}
