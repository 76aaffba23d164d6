//! The daemon's side of app logs: locating, tailing, following, flushing and
//! removing the files that the log shim (`super::logshim`) writes.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

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
    let mut s = OsString::from(path.as_os_str());
    s.push(format!(".{i}"));
    PathBuf::from(s)
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

/// The last `n` lines of a log, reading back across `<path>`, `<path>.1`, … `<path>.<keep>` as needed (oldest first in the result).
pub fn tail(path: &Path, keep: u32, n: usize) -> io::Result<Vec<String>> {
    let mut parts = Vec::new();
    let mut need = n;
    for i in 0..=keep {
        if need == 0 {
            break;
        }
        let p = if i == 0 {
            path.to_path_buf()
        } else {
            rotated_path(path, i)
        };
        let lines = ignore_missing(tail_file(&p, need))?;
        need -= lines.len();
        parts.push(lines);
    }
    Ok(parts.into_iter().rev().flatten().collect())
}

/// The last `n` lines of one file, without reading more of it than those lines.
fn tail_file(path: &Path, n: usize) -> io::Result<Vec<String>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len == 0 || n == 0 {
        return Ok(Vec::new());
    }
    let start = match start_of_last_lines(&file, len, n) {
        Ok(start) => start,
        // Truncated while we read: start over from whatever is there now.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
        Err(e) => return Err(e),
    };
    let mut data = vec![0u8; (len - start) as usize];
    let mut got = 0;
    while got < data.len() {
        match file.read_at(&mut data[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(got);
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.last() == Some(&b'\n') || data.is_empty() {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(n);
    Ok(lines[skip..].iter().map(|l| lossy(l)).collect())
}

/// Scans backwards in blocks for the offset where the last `n` lines begin.
fn start_of_last_lines(file: &File, len: u64, n: usize) -> io::Result<u64> {
    let mut block = vec![0u8; BLOCK];
    let mut end = len;
    let mut found = 0;
    while end > 0 {
        let start = end.saturating_sub(BLOCK as u64);
        let buf = &mut block[..(end - start) as usize];
        file.read_exact_at(buf, start)?;
        for (i, &b) in buf.iter().enumerate().rev() {
            let at = start + i as u64;
            // The file's final newline ends the last line rather than starting one.
            if b == b'\n' && at != len - 1 {
                found += 1;
                if found == n {
                    return Ok(at + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// Empties a log: truncates the current file in place (the shim keeps appending to it) and removes the rotated ones.
pub fn flush(path: &Path, keep_max: u32) -> io::Result<()> {
    // In place rather than replaced: the shim holds the file open with
    // O_APPEND, so its next write lands at the new end, offset 0.
    let truncated = match OpenOptions::new().write(true).open(path) {
        Ok(file) => file.set_len(0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    let removed = remove_rotated(path, keep_max);
    truncated.and(removed)
}

/// Removes `<path>.1` … `<path>.<keep_max>` and any other `<path>.<number>`.
fn remove_rotated(path: &Path, keep_max: u32) -> io::Result<()> {
    let mut result = Ok(());
    let mut note = |r: io::Result<()>| {
        if let Err(e) = ignore_missing(r) {
            if result.is_ok() {
                result = Err(e);
            }
        }
    };
    for i in 1..=keep_max.max(ROTATED_SCAN_MAX) {
        note(fs::remove_file(rotated_path(path, i)));
    }
    // Numbers beyond the range above, e.g. left by a larger `keep` in the past.
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return result;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            note(Err(e));
            return result;
        }
    };
    let name = name.as_bytes();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let f = file_name.as_bytes();
        let is_rotated = f.len() > name.len() + 1
            && f.starts_with(name)
            && f[name.len()] == b'.'
            && f[name.len() + 1..].iter().all(u8::is_ascii_digit);
        if is_rotated {
            note(fs::remove_file(entry.path()));
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
        if let Ok(file) = File::open(path) {
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
            match File::open(&self.path) {
                // Created after we started following: all of it is new.
                Ok(file) => self.attach(file)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(lines),
                Err(e) => return Err(e),
            }
        }
        if !self.drain(&mut lines, Some(FOLLOW_MAX_READ))? {
            return Ok(lines);
        }
        let current = match File::open(&self.path) {
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
mod tests {
    use super::*;
    use crate::supervise::logshim::copy_stream;
    use std::io::{Read, Write};
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    fn append(path: &Path, text: &str) {
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn numbered(range: std::ops::Range<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    fn want(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("line {i}")).collect()
    }

    #[test]
    fn paths() {
        let [out, err] = log_paths(Path::new("/l"), "web");
        assert_eq!(out, Path::new("/l/web-out.log"));
        assert_eq!(err, Path::new("/l/web-err.log"));
        assert_eq!(rotated_path(&out, 3), Path::new("/l/web-out.log.3"));
    }

    #[test]
    fn tail_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        assert!(tail(&path, 3, 10).unwrap().is_empty());
        fs::write(&path, "").unwrap();
        assert!(tail(&path, 0, 10).unwrap().is_empty());
        fs::write(&path, "a\n\nb\n").unwrap();
        assert_eq!(tail(&path, 0, 10).unwrap(), ["a", "", "b"]);
        assert_eq!(tail(&path, 0, 2).unwrap(), ["", "b"]);
        assert!(tail(&path, 0, 0).unwrap().is_empty());
        fs::write(&path, "a\nb\npart").unwrap();
        assert_eq!(tail(&path, 0, 2).unwrap(), ["b", "part"]);
        fs::write(&path, b"ok\n\xff\xfe bad\n").unwrap();
        assert_eq!(tail(&path, 0, 1).unwrap(), ["\u{fffd}\u{fffd} bad"]);
        // Many blocks back, with lines straddling block edges.
        fs::write(&path, numbered(0..100_000)).unwrap();
        assert_eq!(tail(&path, 0, 30_000).unwrap(), want(70_000..100_000));
        assert_eq!(tail(&path, 0, 200_000).unwrap(), want(0..100_000));
    }

    #[test]
    fn tail_across_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        fs::write(rotated_path(&path, 3), numbered(0..10)).unwrap();
        fs::write(rotated_path(&path, 2), numbered(10..20)).unwrap();
        fs::write(rotated_path(&path, 1), numbered(20..30)).unwrap();
        fs::write(&path, numbered(30..35)).unwrap();
        assert_eq!(tail(&path, 3, 3).unwrap(), want(32..35));
        assert_eq!(tail(&path, 3, 5).unwrap(), want(30..35));
        assert_eq!(tail(&path, 3, 12).unwrap(), want(23..35));
        assert_eq!(tail(&path, 3, 100).unwrap(), want(0..35));
        assert_eq!(tail(&path, 2, 100).unwrap(), want(10..35));
        fs::remove_file(rotated_path(&path, 2)).unwrap();
        fs::remove_file(&path).unwrap();
        let mut expected = want(0..10);
        expected.extend(want(20..30));
        assert_eq!(tail(&path, 3, 100).unwrap(), expected);
    }

    #[test]
    fn flush_empties_a_log_and_removes_its_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        flush(&path, 5).unwrap();
        let other = dir.path().join("a.log2");
        let kept = dir.path().join("a.log.x");
        fs::write(&other, "x").unwrap();
        fs::write(&kept, "x").unwrap();
        fs::write(&path, "abc\n").unwrap();
        for i in [1, 2, 3, 7, 150] {
            fs::write(rotated_path(&path, i), "old\n").unwrap();
        }
        flush(&path, 3).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        for i in [1, 2, 3, 7, 150] {
            assert!(!rotated_path(&path, i).exists(), "{i}");
        }
        assert!(other.exists() && kept.exists());
    }

    fn wait_for(mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out");
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn flush_under_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let (reader, mut writer) = io::pipe().unwrap();
        let shim_path = path.clone();
        // Near max_bytes, so a stale size after the flush would force a rotation.
        let before = numbered(0..1000);
        let max_bytes = before.len() as u64 + 20;
        let shim = thread::spawn(move || copy_stream(reader, &shim_path, false, max_bytes, 2));
        writer.write_all(before.as_bytes()).unwrap();
        wait_for(|| fs::metadata(&path).map(|m| m.len()).unwrap_or(0) == before.len() as u64);
        fs::write(rotated_path(&path, 1), "older\n").unwrap();
        flush(&path, 2).unwrap();
        writer.write_all(numbered(1000..1100).as_bytes()).unwrap();
        drop(writer);
        shim.join().unwrap().unwrap();
        // Appended from offset 0: no hole of zeros, no rotation, nothing old.
        assert_eq!(fs::read_to_string(&path).unwrap(), numbered(1000..1100));
        assert!(!rotated_path(&path, 1).exists());
    }

    #[test]
    fn follower_basics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut f = Follower::open_at_end(&path);
        assert!(f.poll().unwrap().is_empty());
        append(&path, "first\nsec");
        assert_eq!(f.poll().unwrap(), ["first"]);
        assert!(f.poll().unwrap().is_empty());
        append(&path, "ond\nthird\n");
        assert_eq!(f.poll().unwrap(), ["second", "third"]);

        // Starts at the end, but a line still being written comes out whole.
        let mut g = Follower::open_at_end(&path);
        append(&path, "four");
        let mut h = Follower::open_at_end(&path);
        assert!(g.poll().unwrap().is_empty());
        append(&path, "th\n");
        assert_eq!(g.poll().unwrap(), ["fourth"]);
        assert_eq!(h.poll().unwrap(), ["fourth"]);
    }

    #[test]
    fn follower_across_rotation_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, "before\n");
        let mut f = Follower::open_at_end(&path);
        append(&path, "old 1\n");
        assert_eq!(f.poll().unwrap(), ["old 1"]);
        // Written to the old file after our last poll, then rotated away.
        append(&path, "old 2\nold 3\n");
        fs::rename(&path, rotated_path(&path, 1)).unwrap();
        append(&path, "new 1\n");
        assert_eq!(f.poll().unwrap(), ["old 2", "old 3", "new 1"]);
        append(&path, "new 2\n");
        assert_eq!(f.poll().unwrap(), ["new 2"]);

        flush(&path, 2).unwrap();
        assert!(f.poll().unwrap().is_empty());
        append(&path, "after flush\n");
        assert_eq!(f.poll().unwrap(), ["after flush"]);
        fs::write(&path, "").unwrap();
        append(&path, "x\n");
        assert_eq!(f.poll().unwrap(), ["x"]);

        // keep = 0 rotation: removed, then created again.
        fs::remove_file(&path).unwrap();
        assert!(f.poll().unwrap().is_empty());
        append(&path, "recreated\n");
        assert_eq!(f.poll().unwrap(), ["recreated"]);
    }

    /// Hands the shim one chunk per read and reports each read call, so the
    /// test knows the previous chunk has been written.
    struct Handshake {
        chunks: mpsc::Receiver<Vec<u8>>,
        reads: mpsc::Sender<()>,
    }
    impl Read for Handshake {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let _ = self.reads.send(());
            match self.chunks.recv() {
                Ok(chunk) => {
                    buf[..chunk.len()].copy_from_slice(&chunk);
                    Ok(chunk.len())
                }
                Err(_) => Ok(0),
            }
        }
    }

    #[test]
    fn follower_sees_every_line_through_shim_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-out.log");
        let (chunk_tx, chunks) = mpsc::channel();
        let (reads, read_rx) = mpsc::channel();
        let shim_path = path.clone();
        let shim = thread::spawn(move || {
            copy_stream(Handshake { chunks, reads }, &shim_path, true, 4000, 3)
        });
        let mut f = Follower::open_at_end(&path);
        let mut got = Vec::new();
        let all = numbered(0..20_000);
        // Cuts mid-line on purpose. A chunk's output stays under max_bytes so
        // it rotates at most once: a file both created and rotated away
        // between two polls would be missed, as with `tail -F`.
        for chunk in all.as_bytes().chunks(500) {
            read_rx.recv().unwrap();
            got.extend(f.poll().unwrap());
            chunk_tx.send(chunk.to_vec()).unwrap();
        }
        drop(chunk_tx);
        shim.join().unwrap().unwrap();
        got.extend(f.poll().unwrap());
        let got: Vec<&str> = got.iter().map(|l| &l[25..]).collect();
        assert_eq!(got, want(0..20_000));
        assert!(rotated_path(&path, 3).exists());
    }
}
