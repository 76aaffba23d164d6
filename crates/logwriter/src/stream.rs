//! One input stream cut into lines: a partial line waits for its end, a
//! line longer than `MAX_LINE` is cut into pieces that long, and each line
//! gets the time of the read it came in (when timestamps are on).

use std::io::{self, Read};
use std::path::Path;

use crate::file::LogFile;
use crate::journal_out::Sink;
use crate::stamp;

/// Longest line content written as one line; longer lines are cut into pieces this long.
pub const MAX_LINE: usize = 64 * 1024;

/// Bytes read at once. Small: the writer's memory is multiplied by the
/// number of apps, and pages of the buffer are only touched by a burst.
pub const READ_CHUNK: usize = 16 * 1024;

/// Above this, a buffer is given back after use rather than kept.
const KEEP_CAPACITY: usize = 16 * 1024;

/// One stream being copied into its log.
pub(crate) struct Stream {
    log: Sink,
    timestamps: bool,
    /// The unfinished last line (at most MAX_LINE bytes between reads).
    held: Vec<u8>,
    stamp: Vec<u8>,
}

impl Stream {
    /// A stream written to `path`.
    pub(crate) fn new(path: &Path, timestamps: bool, max_bytes: u64, keep: u32) -> Stream {
        Stream::to_sink(Sink::new(
            LogFile::new(path, timestamps, max_bytes, keep),
            None,
            false,
            true,
        ))
    }

    /// A stream written to `sink` (files, journal or both).
    pub(crate) fn to_sink(log: Sink) -> Stream {
        let timestamps = log.log.timestamps();
        Stream {
            log,
            timestamps,
            held: Vec::new(),
            stamp: Vec::new(),
        }
    }

    /// Takes what one read returned and writes every line it completes.
    /// `out` is scratch space, empty between calls.
    pub(crate) fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        // One clock read per chunk: formatting per line would dominate the CPU cost.
        self.stamp.clear();
        if self.timestamps {
            stamp::push_rfc3339(&mut self.stamp, stamp::now_ms());
            self.stamp.push(b' ');
        }
        self.log.log.stalled = false;
        let mut rest = data;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if self.held.is_empty() {
                push_cut(&mut self.log, out, &self.stamp, &rest[..i]);
            } else {
                self.held.extend_from_slice(&rest[..i]);
                push_cut(&mut self.log, out, &self.stamp, &self.held);
                self.held.clear();
            }
            rest = &rest[i + 1..];
        }
        self.held.extend_from_slice(rest);
        let mut start = 0;
        while self.held.len() - start > MAX_LINE {
            let piece = &self.held[start..start + MAX_LINE];
            self.log.push_line(out, &self.stamp, piece);
            start += MAX_LINE;
        }
        self.held.drain(..start);
        self.log.log.write_out(out);
        give_back(&mut self.held);
        give_back(out);
    }

    /// The input ended: writes the unfinished line, if any.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.held.is_empty() {
            self.log.log.stalled = false;
            self.log.push_line(out, &self.stamp, &self.held);
            self.held = Vec::new();
            self.log.log.write_out(out);
        }
    }
}

/// Frees an empty buffer that a burst made large.
fn give_back(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > KEEP_CAPACITY {
        *buf = Vec::new();
    }
}

/// Cuts at MAX_LINE from the line's start, so the result does not depend on
/// how the line was split across reads.
fn push_cut(log: &mut Sink, out: &mut Vec<u8>, stamp: &[u8], mut line: &[u8]) {
    while line.len() > MAX_LINE {
        log.push_line(out, stamp, &line[..MAX_LINE]);
        line = &line[MAX_LINE..];
    }
    log.push_line(out, stamp, line);
}

/// Copies `input` into the log at `path` until EOF (one stream, in the
/// calling thread; the writer's own loop serves two streams at once).
pub fn copy_stream(
    mut input: impl Read,
    path: &Path,
    timestamps: bool,
    max_bytes: u64,
    keep: u32,
) -> io::Result<()> {
    let mut stream = Stream::new(path, timestamps, max_bytes, keep);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut out = Vec::new();
    loop {
        match input.read(&mut buf) {
            Ok(0) => {
                stream.finish(&mut out);
                return Ok(());
            }
            Ok(n) => stream.feed(&buf[..n], &mut out),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                stream.finish(&mut out);
                return Err(e);
            }
        }
    }
}
