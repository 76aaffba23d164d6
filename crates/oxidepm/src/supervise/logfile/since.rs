//! Where in a log file the lines of a time window begin, found by
//! bisecting the file on its line stamps: `logs --since` on a 1 GiB log
//! reads a few blocks, not the file.
//!
//! A line without a stamp (written with `log_timestamps = false`, or a
//! piece of a long line) belongs to the stamped line before it. A file
//! with no stamp near its end is taken as unstamped: its time is unknown,
//! so a window selects none of it.

use super::BLOCK;
use crate::timefmt::{split_stamp, STAMP_LEN};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// How far a probe looks forward for a stamped line before it takes the
/// rest of the range as "not before the window".
const PROBE: u64 = BLOCK as u64;

/// The offset of the first line of `file` (`len` bytes) stamped at or
/// after `since` (a stamp, `2026-11-30T10:00:00.000Z`), or `len` when
/// there is none.
pub(super) fn first_at_or_after(file: &File, len: u64, since: &[u8]) -> io::Result<u64> {
    first_not_before(file, len, |stamp| stamp < since)
}

/// The offset of the first line of `file` (`len` bytes) stamped after
/// `until`, or `len` when there is none: where a window that ends at
/// `until` stops (a line without a stamp goes with the line before it).
pub(super) fn first_after(file: &File, len: u64, until: &[u8]) -> io::Result<u64> {
    first_not_before(file, len, |stamp| stamp <= until)
}

/// The offset of the first line whose stamp is not `before` the boundary
/// (stamps grow through a file), or `len`.
fn first_not_before(file: &File, len: u64, before: impl Fn(&[u8]) -> bool) -> io::Result<u64> {
    match last_stamp(file, len)? {
        Some(last) if !before(&last) => {}
        _ => return Ok(len),
    }
    let (mut lo, mut hi) = (0u64, len);
    // `lo` is always a line start whose stamped lines are all before
    // `since`; the answer is at or after it, and near `hi` or before.
    while hi - lo > PROBE {
        let mid = lo + (hi - lo) / 2;
        let start = next_line_start(file, mid, len)?;
        match first_stamp_from(file, start, len, PROBE)? {
            Some((stamp, _)) if before(&stamp) => lo = start,
            _ => hi = mid,
        }
    }
    // Lines from `lo` on, a block at a time, until one is in the window.
    let mut buf = vec![0u8; BLOCK];
    let mut pos = lo;
    while pos < len {
        let n = ((len - pos) as usize).min(BLOCK);
        file.read_exact_at(&mut buf[..n], pos)?;
        let mut at = 0;
        loop {
            if split_stamp(&buf[at..n]).is_some_and(|(t, _)| !before(t)) {
                return Ok(pos + at as u64);
            }
            match buf[at..n].iter().position(|&b| b == b'\n') {
                Some(i) if at + i + 1 < n => at += i + 1,
                Some(i) => {
                    at += i + 1;
                    break;
                }
                // The line goes on past the block: read again from it.
                None => break,
            }
        }
        pos = if at == 0 {
            // One line longer than a block, its stamp already seen.
            next_line_start(file, pos + n as u64, len)?
        } else {
            pos + at as u64
        };
    }
    Ok(len)
}

/// Bytes read at a time looking for the end of a line: lines are short.
const SMALL: usize = 4096;

/// The first line start at or after `at` (`at` itself when a newline is
/// just before it), or `len`.
fn next_line_start(file: &File, at: u64, len: u64) -> io::Result<u64> {
    if at == 0 {
        return Ok(0);
    }
    let mut buf = vec![0u8; SMALL];
    let mut pos = at - 1;
    while pos < len {
        let n = ((len - pos) as usize).min(SMALL);
        file.read_exact_at(&mut buf[..n], pos)?;
        if let Some(i) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(pos + i as u64 + 1);
        }
        pos += n as u64;
    }
    Ok(len)
}

/// The first stamped line starting at or after the line start `start`,
/// looking no further than `limit` bytes: its stamp and offset.
fn first_stamp_from(
    file: &File,
    start: u64,
    len: u64,
    limit: u64,
) -> io::Result<Option<(Vec<u8>, u64)>> {
    let end = len.min(start.saturating_add(limit));
    // Most lines are stamped: the first one usually answers.
    let first = ((end - start) as usize).min(SMALL);
    let mut head = vec![0u8; first];
    file.read_exact_at(&mut head, start)?;
    if let Some((s, _)) = split_stamp(&head) {
        return Ok(Some((s.to_vec(), start)));
    }
    let n = (end - start) as usize;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, start)?;
    let mut at = 0usize;
    while at + STAMP_LEN < n {
        if let Some((s, _)) = split_stamp(&buf[at..]) {
            return Ok(Some((s.to_vec(), start + at as u64)));
        }
        match buf[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => break,
        }
    }
    Ok(None)
}

/// The stamp of the last stamped line in the file's last block.
fn last_stamp(file: &File, len: u64) -> io::Result<Option<Vec<u8>>> {
    let from = len.saturating_sub(PROBE);
    let mut buf = vec![0u8; (len - from) as usize];
    file.read_exact_at(&mut buf, from)?;
    // The block's first line may be a piece: only whole lines count,
    // unless the block is the whole file.
    let whole = if from == 0 {
        &buf[..]
    } else {
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => &buf[i + 1..],
            None => return Ok(None),
        }
    };
    Ok(whole
        .split(|&b| b == b'\n')
        .filter_map(|l| split_stamp(l).map(|(s, _)| s.to_vec()))
        .next_back())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn stamp(s: u64) -> String {
        let ms = 1_700_000_000_000 + s * 1000;
        crate::timefmt::rfc3339_ms(ms as i64)
    }

    /// A log of `n` stamped lines, one second apart, a few with an
    /// unstamped continuation line.
    fn log(n: u64) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut w = std::io::BufWriter::new(f.as_file_mut());
        for i in 0..n {
            writeln!(w, "{} line {i} {}", stamp(i), "x".repeat((i % 97) as usize)).unwrap();
            if i % 10 == 0 {
                writeln!(w, "  continued {i}").unwrap();
            }
        }
        drop(w);
        let len = f.as_file().metadata().unwrap().len();
        (f, len)
    }

    fn line_from(f: &File, pos: u64) -> String {
        let mut buf = vec![0u8; 200];
        let n = f.read_at(&mut buf, pos).unwrap();
        let s = String::from_utf8_lossy(&buf[..n]).into_owned();
        s.lines().next().unwrap_or("").to_string()
    }

    #[test]
    fn finds_the_first_line_of_the_window_in_a_large_file() {
        let (f, len) = log(50_000);
        assert!(len > 20 * PROBE);
        for i in [0u64, 1, 10, 11, 4_999, 25_000, 49_999] {
            let at = first_at_or_after(f.as_file(), len, stamp(i).as_bytes()).unwrap();
            let line = line_from(f.as_file(), at);
            assert!(
                line.starts_with(&format!("{} line {i} ", stamp(i))),
                "{i}: {line}"
            );
        }
        // Past the end: nothing; before the start: everything.
        let after = first_at_or_after(f.as_file(), len, stamp(50_000).as_bytes()).unwrap();
        assert_eq!(after, len);
        let before = first_at_or_after(f.as_file(), len, b"2000-01-01T00:00:00.000Z").unwrap();
        assert_eq!(before, 0);
    }

    #[test]
    fn finds_where_a_window_ends_with_its_continuation_lines() {
        let (f, len) = log(50_000);
        for i in [0u64, 10, 11, 4_999, 25_000, 49_998] {
            let at = first_after(f.as_file(), len, stamp(i).as_bytes()).unwrap();
            let line = line_from(f.as_file(), at);
            // Line i's unstamped continuation (every tenth) stays before.
            assert!(
                line.starts_with(&format!("{} line {} ", stamp(i + 1), i + 1)),
                "{i}: {line}"
            );
        }
        let last = first_after(f.as_file(), len, stamp(49_999).as_bytes()).unwrap();
        assert_eq!(last, len);
        let before = first_after(f.as_file(), len, b"2000-01-01T00:00:00.000Z").unwrap();
        assert_eq!(before, 0);
    }

    /// The last lines of a window that ended long before the file's end.
    #[test]
    fn the_last_lines_of_a_window_that_ended() {
        let (f, _) = log(50_000);
        let (since, until) = (stamp(100), stamp(20_000));
        let mut r = super::super::TailReader::open_window(
            f.path(),
            0,
            2,
            Some(since.as_bytes()),
            Some(until.as_bytes()),
        )
        .unwrap();
        let mut got = Vec::new();
        while r
            .read(BLOCK, |l| got.push(String::from_utf8_lossy(l).into_owned()))
            .unwrap()
        {}
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].contains(" line 20000 "), "{got:?}");
        assert!(got[1].contains("continued 20000"), "{got:?}");
    }

    /// Bytes this thread has read through system calls so far.
    fn thread_rchar() -> Option<u64> {
        let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|n| n.trim().parse().ok())
    }

    #[test]
    fn a_window_in_a_large_log_costs_a_few_blocks() {
        let (f, len) = log(400_000);
        assert!(len > 30 << 20, "{len}");
        let Some(before) = thread_rchar() else {
            eprintln!("skipped: no /proc/thread-self/io here");
            return;
        };
        let since = stamp(200_000);
        let mut r =
            super::super::TailReader::open_window(f.path(), 0, 5, Some(since.as_bytes()), None)
                .unwrap();
        let mut got = Vec::new();
        while r
            .read(BLOCK, |l| got.push(String::from_utf8_lossy(l).into_owned()))
            .unwrap()
        {}
        let read = thread_rchar().unwrap() - before;
        assert_eq!(got.len(), 5);
        assert!(got[4].contains("line 399999"), "{got:?}");
        // A few blocks of bisection, not the 30 MiB file.
        assert!(read < 1 << 20, "read {read} bytes of {len}");
    }

    #[test]
    fn a_file_without_stamps_has_nothing_in_a_window() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "plain\nlines\n").unwrap();
        let len = f.as_file().metadata().unwrap().len();
        let at = first_at_or_after(f.as_file(), len, stamp(0).as_bytes()).unwrap();
        assert_eq!(at, len);
    }
}
