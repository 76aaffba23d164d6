//! Following a log as it grows and rotates (like `tail -F`, without its
//! losses). The follower holds open every file of the log it has not read
//! to its end: the one it reads, then each that replaced it, found by
//! looking at `<log>`, `<log>.1`, … on every read (and while its reader is
//! slow to take lines, see [`Follower::refresh`]). A rotation renames or
//! removes names, not what an open descriptor reads, so a follower behind
//! the writer still reads every line, in order, across any number of
//! rotations. What it holds is bounded: at most `keep + 2` files (the
//! ones kept on disk and one beyond); past that, the oldest is let go and
//! its unread lines are counted and reported in the stream. Memory is a
//! block and one partial line, whatever the backlog.

use super::{lossy, open_log, rotated_path, Access, BLOCK};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A line this long without a newline is returned anyway, to bound memory.
const MAX_PARTIAL: usize = 1024 * 1024;

/// Bytes one [`Follower::poll`] reads before returning.
const POLL_MAX: usize = 1024 * 1024;

/// Rotated names looked at when the log's `keep` is not known to be lower.
const SCAN_MAX: u32 = 100;

/// (dev, inode): which file a name or a descriptor is.
type Id = (u64, u64);

/// One file of the log, held open.
struct Held {
    file: File,
    id: Id,
    /// Files came and went unseen between the one before and this one.
    gap_before: bool,
}

/// Follows a log from its current end; see the module.
pub struct Follower {
    path: PathBuf,
    /// Oldest first: the file being read at `pos`, then its successors.
    files: VecDeque<Held>,
    pos: u64,
    partial: Vec<u8>,
    /// The newest file known, held or not (a file that was there before
    /// the follower started is not new).
    newest: Option<Id>,
    /// Files held at most.
    max_held: usize,
    /// Rotated names looked at.
    scan: u32,
    /// Lines let go unread, not reported yet.
    missed: u64,
    /// The read buffer, kept between reads (a follower reads every tick).
    buf: Vec<u8>,
}

impl Follower {
    /// Starts at the end of the log at `path` (which may not exist yet),
    /// whose writer keeps `keep` rotated files.
    pub fn open_at_end(path: &Path, keep: u32) -> Follower {
        let mut f = Follower {
            path: path.to_path_buf(),
            files: VecDeque::new(),
            pos: 0,
            partial: Vec::new(),
            newest: None,
            max_held: keep as usize + 2,
            scan: keep.clamp(1, SCAN_MAX),
            missed: 0,
            buf: Vec::new(),
        };
        match open_log(path, Access::Read).and_then(held) {
            Ok(h) => {
                f.pos = after_last_newline(&h.file, h.file.metadata().map_or(0, |m| m.len()));
                f.newest = Some(h.id);
                f.files.push_back(h);
            }
            // Rotated files from before are not new.
            Err(_) => f.newest = id_of(&rotated_path(path, 1)),
        }
        f
    }

    /// Reads up to about `max` bytes of new lines, handing each to `line`
    /// (a note of lines rotated away unread comes as a line too); true
    /// when more is waiting. A partial last line waits for its end.
    pub fn read(&mut self, max: usize, mut line: impl FnMut(&[u8])) -> io::Result<bool> {
        // A link (or anything but a file) in place of the log is refused,
        // never followed: say so rather than wait for ever.
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if !m.is_file() {
                open_log(&self.path, Access::Read)?;
                return Err(io::Error::other(format!(
                    "{} is not a regular file",
                    self.path.display()
                )));
            }
        }
        self.refresh();
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(BLOCK.min(max.max(1)), 0);
        let result = self.read_into(&mut buf, max, &mut line);
        self.buf = buf;
        result
    }

    fn read_into(
        &mut self,
        buf: &mut [u8],
        max: usize,
        line: &mut impl FnMut(&[u8]),
    ) -> io::Result<bool> {
        let mut read = 0usize;
        loop {
            self.report(line);
            let Some(h) = self.files.front() else {
                return Ok(false);
            };
            if h.file.metadata()?.len() < self.pos {
                // Truncated in place (`flush`): what was written since starts at 0.
                self.pos = 0;
                self.partial.clear();
            }
            if read >= max {
                return Ok(true);
            }
            let k = match h.file.read_at(buf, self.pos) {
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if k == 0 {
                if self.files.len() == 1 {
                    return Ok(false);
                }
                // A successor exists, so nothing more is written to this
                // one: its last line is whole, newline or not.
                if !self.partial.is_empty() {
                    line(&std::mem::take(&mut self.partial));
                }
                self.files.pop_front();
                self.pos = 0;
                continue;
            }
            self.pos += k as u64;
            read += k;
            let mut chunk = &buf[..k];
            while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                if self.partial.is_empty() {
                    line(&chunk[..i]);
                } else {
                    self.partial.extend_from_slice(&chunk[..i]);
                    line(&std::mem::take(&mut self.partial));
                }
                chunk = &chunk[i + 1..];
            }
            self.partial.extend_from_slice(chunk);
            if self.partial.len() >= MAX_PARTIAL {
                line(&std::mem::take(&mut self.partial));
            }
        }
    }

    /// New complete lines, at most about 1 MiB of them per call.
    pub fn poll(&mut self) -> io::Result<Vec<String>> {
        let mut lines = Vec::new();
        self.read(POLL_MAX, |l| lines.push(lossy(l)))?;
        Ok(lines)
    }

    /// Takes hold of the files that replaced the newest one known, oldest
    /// first, and lets go of the oldest past the bound. Cheap (a `stat`
    /// per kept file): called on every read, and by a reader waiting on
    /// its client, so that no file rotates away unseen meanwhile.
    pub fn refresh(&mut self) {
        // Newest first, as the names say now.
        let mut names: Vec<(PathBuf, Id)> = Vec::new();
        if let Some(id) = id_of(&self.path) {
            names.push((self.path.clone(), id));
        }
        for i in 1..=self.scan {
            let p = rotated_path(&self.path, i);
            match id_of(&p) {
                Some(id) => names.push((p, id)),
                None => break,
            }
        }
        let (new, mut gap): (&[(PathBuf, Id)], bool) = match self.newest {
            None => (&names, false),
            Some(n) => match names.iter().position(|(_, id)| *id == n) {
                Some(j) => (&names[..j], false),
                // Every name on disk replaced the newest known; with every
                // kept name taken, files may have come and gone unseen.
                None => (&names, names.len() as u32 > self.scan),
            },
        };
        for (path, id) in new.iter().rev() {
            let Ok(mut h) = open_log(path, Access::Read).and_then(held) else {
                break;
            };
            if h.id != *id {
                // Renamed between the look and the open: the next look
                // finds it where it is now.
                break;
            }
            h.gap_before = std::mem::take(&mut gap);
            self.newest = Some(h.id);
            self.files.push_back(h);
        }
        while self.files.len() > self.max_held {
            if let Some(h) = self.files.pop_front() {
                self.missed += unread_lines(&h.file, self.pos, !self.partial.is_empty());
                if h.gap_before {
                    if let Some(next) = self.files.front_mut() {
                        next.gap_before = true;
                    }
                }
            }
            self.pos = 0;
            self.partial.clear();
        }
    }

    /// Hands on, once and where they belong in the stream, the notes of
    /// lines let go and of files that rotated away unseen.
    fn report(&mut self, line: &mut impl FnMut(&[u8])) {
        if self.missed > 0 {
            let note = match std::mem::take(&mut self.missed) {
                1 => "… 1 line rotated away before it was read".to_string(),
                n => format!("… {n} lines rotated away before they were read"),
            };
            line(note.as_bytes());
        }
        if let Some(h) = self.files.front_mut().filter(|h| h.gap_before) {
            h.gap_before = false;
            line(
                "… lines rotated away before they were read (the log rotated more often than it \
                 was looked at: how many is not known)"
                    .as_bytes(),
            );
        }
    }
}

fn held(file: File) -> io::Result<Held> {
    let m = file.metadata()?;
    Ok(Held {
        id: (m.dev(), m.ino()),
        file,
        gap_before: false,
    })
}

/// The file a name is now, without following a link.
fn id_of(path: &Path) -> Option<Id> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| (m.dev(), m.ino()))
}

/// Lines of `file` from `pos` to its end, a line already begun
/// (`partial`) or not ended by a newline counting as one.
fn unread_lines(file: &File, pos: u64, partial: bool) -> u64 {
    let mut buf = vec![0u8; BLOCK];
    let (mut at, mut newlines) = (pos, 0u64);
    // Whether bytes follow the last newline (or the start, before one).
    let mut open = partial;
    loop {
        let k = match file.read_at(&mut buf, at) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        at += k as u64;
        newlines += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
        open = buf[k - 1] != b'\n';
    }
    newlines + u64::from(open)
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
