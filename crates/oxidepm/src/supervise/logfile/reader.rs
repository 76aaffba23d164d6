//! Reading the last lines of a log in bounded memory: the start of the
//! last `n` lines is found by scanning backwards in blocks across the
//! current and rotated files, then the lines are read forwards a block at
//! a time, so the memory used does not depend on `n` or on the log's size.

use super::{ignore_missing, open_log, rotated_path, Access, BLOCK};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A line longer than this is handed on in pieces of this size, so that
/// one line without a newline cannot make a reader hold the whole file.
pub const MAX_LINE: usize = 1024 * 1024;

/// One file's share of the lines: `[pos, end)`.
struct Part {
    file: File,
    pos: u64,
    end: u64,
}

/// The last `n` lines of a log (oldest first), read on demand.
///
/// The files are opened when the reader is made, and the current file is
/// read up to its length at that moment: a rotation or new lines while the
/// reader runs do not change what it returns.
pub struct TailReader {
    parts: VecDeque<Part>,
    partial: Vec<u8>,
    buf: Vec<u8>,
    cut: bool,
}

impl TailReader {
    /// Finds the last `n` lines of `path` and its rotated files
    /// `<path>.1` … `<path>.<keep>` (missing files are skipped).
    pub fn open(path: &Path, keep: u32, n: usize) -> io::Result<TailReader> {
        TailReader::open_within(path, keep, n, u64::MAX)
    }

    /// Like [`TailReader::open`], with only the last `max_bytes` of the log
    /// considered: older lines are left out (see [`TailReader::cut`]).
    pub fn open_within(path: &Path, keep: u32, n: usize, max_bytes: u64) -> io::Result<TailReader> {
        TailReader::open_bounded(path, keep, n, max_bytes, None, None)
    }

    /// The last `n` of the lines stamped at or after `since` and at or
    /// before `until` (stamps, `2026-11-30T10:00:00.000Z`; see
    /// [`super::since`]): each file is bisected for where they begin and
    /// end, files newer than the window are skipped and older ones not read.
    pub fn open_window(
        path: &Path,
        keep: u32,
        n: usize,
        since: Option<&[u8]>,
        until: Option<&[u8]>,
    ) -> io::Result<TailReader> {
        TailReader::open_bounded(path, keep, n, u64::MAX, since, until)
    }

    fn open_bounded(
        path: &Path,
        keep: u32,
        n: usize,
        max_bytes: u64,
        since: Option<&[u8]>,
        until: Option<&[u8]>,
    ) -> io::Result<TailReader> {
        let mut parts = VecDeque::new();
        let mut need = n;
        let mut budget = max_bytes;
        let mut cut = false;
        let mut missing = 0;
        for i in 0..=keep {
            if need == 0 || cut {
                break;
            }
            let p = if i == 0 {
                path.to_path_buf()
            } else {
                rotated_path(path, i)
            };
            let Some(file) = ignore_missing(open_log(&p, Access::Read).map(Some))? else {
                // Rotation renames one file at a time, so a reader sees at
                // most one gap; two missing in a row end the files, instead
                // of every name up to `keep` being tried on each read.
                missing += usize::from(i > 0);
                if missing == 2 {
                    break;
                }
                continue;
            };
            missing = 0;
            let len = file.metadata()?.len();
            if len == 0 {
                continue;
            }
            let floor = match since {
                Some(t) => super::since::first_at_or_after(&file, len, t)?,
                None => 0,
            };
            if floor == len {
                // All of it is before the window, and so are older files.
                break;
            }
            // The lines after the window are left out: the last `n` are
            // the window's own.
            let len = match until {
                Some(t) => super::since::first_after(&file, len, t)?,
                None => len,
            };
            if len == 0 {
                // All of it is after the window: an older file may hold it.
                continue;
            }
            if floor >= len {
                // The window falls between two of its lines.
                break;
            }
            let back = match scan_back(&file, len, need, budget.min(len - floor)) {
                Ok(r) => r,
                // Truncated while scanned: nothing of it is kept.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => continue,
                Err(e) => return Err(e),
            };
            need = need.saturating_sub(back.lines);
            budget = budget.saturating_sub(len - back.start);
            // Reaching the window's start is not a cut: the window ends there.
            cut = back.cut && back.start != floor;
            parts.push_front(Part {
                file,
                pos: back.start,
                end: len,
            });
            if floor > 0 {
                break;
            }
        }
        Ok(TailReader {
            parts,
            partial: Vec::new(),
            buf: vec![0u8; BLOCK],
            cut,
        })
    }

    /// Whether older lines that were asked for were left out for the
    /// byte bound of [`TailReader::open_within`].
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// Passes the next lines (without their newline) to `each`, until about
    /// `max_bytes` have been read or the lines run out; false once they have
    /// all been passed.
    pub fn read(&mut self, max_bytes: usize, mut each: impl FnMut(&[u8])) -> io::Result<bool> {
        let mut read = 0usize;
        while read < max_bytes {
            let Some(part) = self.parts.front_mut() else {
                return Ok(false);
            };
            let want = (part.end.saturating_sub(part.pos)).min(BLOCK as u64) as usize;
            let k = if want == 0 {
                0
            } else {
                match part.file.read_at(&mut self.buf[..want], part.pos) {
                    Ok(k) => k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if k == 0 {
                // The end of this file (or it was truncated): its last line
                // ends here even without a newline.
                self.parts.pop_front();
                if !self.partial.is_empty() {
                    each(&self.partial);
                    self.partial.clear();
                }
                continue;
            }
            part.pos += k as u64;
            read += k;
            let mut chunk = &self.buf[..k];
            while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                if self.partial.is_empty() {
                    each(&chunk[..i]);
                } else {
                    self.partial.extend_from_slice(&chunk[..i]);
                    each(&self.partial);
                    self.partial.clear();
                }
                chunk = &chunk[i + 1..];
            }
            while self.partial.len() + chunk.len() >= MAX_LINE {
                let take = MAX_LINE - self.partial.len();
                self.partial.extend_from_slice(&chunk[..take]);
                each(&self.partial);
                self.partial.clear();
                chunk = &chunk[take..];
            }
            self.partial.extend_from_slice(chunk);
            if self.partial.capacity() > 2 * MAX_LINE {
                self.partial.shrink_to(MAX_LINE);
            }
        }
        Ok(!self.parts.is_empty())
    }
}

/// Where the last lines of a file start.
struct Back {
    /// Offset of the first of them.
    start: u64,
    /// How many lines (fewer than asked for when the file has fewer).
    lines: usize,
    /// Whether the byte limit stopped the scan before enough lines.
    cut: bool,
}

/// Scans backwards in blocks for where the last `n` lines of a file of
/// `len` bytes begin, looking at no more than its last `limit` bytes.
fn scan_back(file: &File, len: u64, n: usize, limit: u64) -> io::Result<Back> {
    let floor = len.saturating_sub(limit);
    let mut block = vec![0u8; BLOCK];
    let mut end = len;
    let mut found = 0;
    while end > floor {
        let start = end.saturating_sub(BLOCK as u64).max(floor);
        let buf = &mut block[..(end - start) as usize];
        file.read_exact_at(buf, start)?;
        for (i, &b) in buf.iter().enumerate().rev() {
            let at = start + i as u64;
            // The file's final newline ends the last line rather than starting one.
            if b == b'\n' && at != len - 1 {
                found += 1;
                if found == n {
                    return Ok(Back {
                        start: at + 1,
                        lines: n,
                        cut: false,
                    });
                }
            }
        }
        end = start;
    }
    if floor == 0 {
        // Every newline but a final one starts a line, and so does offset 0.
        return Ok(Back {
            start: 0,
            lines: found + 1,
            cut: false,
        });
    }
    // Exactly the last `limit` bytes, the first line maybe in part: a
    // cut answer is then always as large as its bound, which is how the
    // one who bounds it knows it was cut.
    Ok(Back {
        start: floor,
        lines: found,
        cut: true,
    })
}

/// The newest of the last `n` lines of a log (oldest first) that fit in
/// `max_bytes` of line text, for answers that must fit a size; the bool
/// says whether older lines were left out for the size (then the text is
/// exactly `max_bytes`, the oldest line maybe in part). Reads no more
/// than `max_bytes` of the log.
#[cfg(test)]
pub fn newest_within(
    path: &Path,
    keep: u32,
    n: usize,
    max_bytes: usize,
) -> io::Result<(Vec<Vec<u8>>, bool)> {
    newest_within_since(path, keep, n, max_bytes, None, None)
}

/// The newest `n` lines of a log and its `keep` rotated files within
/// `max_bytes` of line text, of the lines stamped at or after `since` when
/// given, and at or before `until` (see [`TailReader::open_window`]); the bool says whether older lines
/// were left out for the size.
pub fn newest_within_since(
    path: &Path,
    keep: u32,
    n: usize,
    max_bytes: usize,
    since: Option<&[u8]>,
    until: Option<&[u8]>,
) -> io::Result<(Vec<Vec<u8>>, bool)> {
    let mut reader = TailReader::open_bounded(path, keep, n, max_bytes as u64, since, until)?;
    let mut out = Vec::new();
    while reader.read(BLOCK, |line| out.push(line.to_vec()))? {}
    Ok((out, reader.cut()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(r: &mut TailReader) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while r.read(7, |l| out.push(l.to_vec())).unwrap() {}
        out
    }

    #[test]
    fn rotated_files_long_lines_and_byte_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-out.log");
        std::fs::write(rotated_path(&path, 1), "1\n2\n3").unwrap();
        std::fs::write(&path, "4\n5\n").unwrap();
        let mut r = TailReader::open(&path, 1, 4).unwrap();
        assert_eq!(lines_of(&mut r), [b"2", b"3", b"4", b"5"]);
        assert!(!r.cut());

        // The last 5 bytes of "1\n2\n3" + "4\n5\n": "3" and the current file.
        let (got, cut) = newest_within(&path, 1, 100, 5).unwrap();
        assert!(cut);
        assert_eq!(got, [b"3", b"4", b"5"]);
        let (got, cut) = newest_within(&path, 1, 2, 100).unwrap();
        assert!(!cut);
        assert_eq!(got, [b"4", b"5"]);

        // A line without a newline comes in pieces of MAX_LINE.
        let long = vec![b'x'; MAX_LINE * 2 + 10];
        std::fs::write(&path, &long).unwrap();
        let mut r = TailReader::open(&path, 0, 1).unwrap();
        let mut sizes = Vec::new();
        while r.read(BLOCK, |l| sizes.push(l.len())).unwrap() {}
        assert_eq!(sizes, [MAX_LINE, MAX_LINE, 10]);
    }
}
