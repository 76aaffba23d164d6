//! A streaming scanner of Redis's reply stream (RESP2 and RESP3).
//!
//! The proxy forwards replies as bytes arrive, and must still know where
//! each reply ends: to interleave its own replies in order, and to count
//! what is still owed to the client. [`ReplyScanner`] walks the stream
//! without buffering values — bulk payloads are skipped as they stream by,
//! only an incomplete header line is ever left unconsumed.

use crate::resp::parse_int;
use crate::upstream::cluster_map::{self, Moved};
use std::fmt;

/// The reply stream is not RESP the scanner understands: the connection
/// cannot stay in step and must be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError(pub String);

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected reply from Redis: {}", self.0)
    }
}

impl std::error::Error for ReplyError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AggKind {
    Plain,
    Attribute,
    Push,
}

#[derive(Clone, Copy, Debug)]
struct Agg {
    remaining: u64,
    kind: AggKind,
}

/// Longest reply header line the scanner waits for (Redis writes doubles
/// and big numbers on one line; keep generous).
const MAX_REPLY_LINE: usize = 64 << 10;

/// A streaming scanner of the Redis → client byte stream.
///
/// It counts *replies*: top-level frames other than RESP3 pushes (`>`) and
/// attributes (`|`, which belong to the frame after them). Bulk payloads
/// are skipped as they stream by; only an incomplete header line is ever
/// left unconsumed.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    stack: Vec<Agg>,
    /// Payload bytes (CRLF included) of the current bulk still to pass.
    bulk_left: usize,
    /// A top-level attribute has been passed; the reply it annotates has
    /// not started yet.
    after_attribute: bool,
    /// Whether top-level errors saying the lane moved stop the scan.
    watch_moves: bool,
    /// The error that stopped the scan, not consumed.
    moved: Option<Moved>,
}

impl ReplyScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the scan before a top-level error saying the lane is served
    /// elsewhere (see [`cluster_map::moved`]); [`ReplyScanner::take_moved`]
    /// then says where. Off for the private Redis, where nothing moves.
    pub fn watch_moves(&mut self) {
        self.watch_moves = true;
    }

    /// The redirection that stopped the last scan, if one did.
    pub fn take_moved(&mut self) -> Option<Moved> {
        self.moved.take()
    }

    #[cfg(test)]
    /// Whether the scanner is at a boundary between top-level frames.
    pub fn at_boundary(&self) -> bool {
        self.stack.is_empty() && self.bulk_left == 0 && !self.after_attribute
    }

    /// Scans `buf`, completing at most `max_replies` replies. Returns the
    /// bytes consumed (all of which may be forwarded) and the replies
    /// completed. It stops before starting a reply beyond the quota, but
    /// passes pushes at any top-level boundary.
    pub fn scan(&mut self, buf: &[u8], max_replies: usize) -> Result<(usize, usize), ReplyError> {
        let mut pos = 0;
        let mut replies = 0;
        loop {
            if self.bulk_left > 0 {
                let take = self.bulk_left.min(buf.len() - pos);
                pos += take;
                self.bulk_left -= take;
                if self.bulk_left > 0 {
                    return Ok((pos, replies));
                }
                if self.element_done() {
                    replies += 1;
                }
                continue;
            }
            let Some(&ty) = buf.get(pos) else {
                return Ok((pos, replies));
            };
            // At a top-level boundary, a new reply (or the attribute that
            // opens one) may start only within the quota; pushes may pass.
            if self.stack.is_empty()
                && !self.after_attribute
                && ty != b'>'
                && replies >= max_replies
            {
                return Ok((pos, replies));
            }
            let rest = &buf[pos + 1..];
            let window = &rest[..rest.len().min(MAX_REPLY_LINE)];
            let Some(lf) = window.iter().position(|&b| b == b'\n') else {
                if rest.len() >= MAX_REPLY_LINE {
                    return Err(ReplyError("header line too long".into()));
                }
                return Ok((pos, replies));
            };
            if lf == 0 || rest[lf - 1] != b'\r' {
                return Err(ReplyError("line not terminated by CRLF".into()));
            }
            let line = &rest[..lf - 1];
            if ty == b'-' && self.watch_moves && self.stack.is_empty() {
                if let Some(m) = cluster_map::moved(line) {
                    self.moved = Some(m);
                    return Ok((pos, replies));
                }
            }
            pos += 1 + lf + 1;
            if self.header(ty, line)? {
                replies += 1;
            }
        }
    }

    /// A header line of type `ty` was read: returns whether that
    /// completed a reply.
    #[inline]
    fn header(&mut self, ty: u8, line: &[u8]) -> Result<bool, ReplyError> {
        let int = || {
            parse_int(line).ok_or_else(|| {
                ReplyError(format!(
                    "bad length in '{}' header: {:?}",
                    ty as char,
                    String::from_utf8_lossy(line)
                ))
            })
        };
        let done = match ty {
            b'+' | b'-' | b':' | b',' | b'_' | b'#' | b'(' => self.element_done(),
            b'$' | b'!' | b'=' => {
                let n = int()?;
                if n < 0 {
                    if ty != b'$' {
                        return Err(ReplyError("negative verbatim/error length".into()));
                    }
                    self.element_done()
                } else {
                    self.bulk_left = n as usize + 2;
                    false
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = int()?;
                let kind = match ty {
                    b'|' => AggKind::Attribute,
                    b'>' => AggKind::Push,
                    _ => AggKind::Plain,
                };
                if n < 0 && ty != b'*' && ty != b'%' {
                    return Err(ReplyError("negative aggregate length".into()));
                }
                let elements = match ty {
                    b'%' | b'|' => (n.max(0) as u64) * 2,
                    _ => n.max(0) as u64,
                };
                if elements == 0 {
                    self.aggregate_done(kind)
                } else {
                    self.stack.push(Agg {
                        remaining: elements,
                        kind,
                    });
                    false
                }
            }
            other => {
                return Err(ReplyError(format!("unknown type byte 0x{other:02x}")));
            }
        };
        Ok(done)
    }

    /// A scalar element ended; returns whether that completed a reply.
    fn element_done(&mut self) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                self.after_attribute = false;
                return true;
            };
            top.remaining -= 1;
            if top.remaining > 0 {
                return false;
            }
            let kind = top.kind;
            self.stack.pop();
            match kind {
                AggKind::Plain => continue,
                AggKind::Attribute | AggKind::Push => return self.aggregate_done(kind),
            }
        }
    }

    /// An aggregate of `kind` ended (its elements already accounted for).
    fn aggregate_done(&mut self, kind: AggKind) -> bool {
        match kind {
            AggKind::Plain => self.element_done(),
            // An attribute annotates the next element; it is not one.
            AggKind::Attribute => {
                if self.stack.is_empty() {
                    self.after_attribute = true;
                }
                false
            }
            AggKind::Push => {
                if self.stack.is_empty() {
                    false
                } else {
                    self.element_done()
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watching_scanner_stops_before_a_redirection_only_at_top_level() {
        let mut s = ReplyScanner::new();
        s.watch_moves();
        let stream = b"+OK\r\n*1\r\n-MOVED 1 h:2\r\n-MOVED 3 h:4\r\n+OK\r\n";
        let (used, n) = s.scan(stream, 10).unwrap();
        // The nested error is an element of a reply, not a redirection.
        assert_eq!((used, n), (23, 2));
        assert!(matches!(s.take_moved(), Some(Moved::To(3, _))));
        assert_eq!(s.take_moved(), None);
        // Not watching (the private Redis): errors are replies like any.
        let mut plain = ReplyScanner::new();
        assert_eq!(plain.scan(stream, 10).unwrap(), (stream.len(), 4));
        assert_eq!(plain.take_moved(), None);
    }

    /// Scans `stream` fed in pieces of `step` bytes, the way the proxy
    /// does (unconsumed bytes are kept and re-offered). Returns replies.
    fn count(stream: &[u8], step: usize) -> usize {
        let mut s = ReplyScanner::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut replies = 0;
        for chunk in stream.chunks(step) {
            pending.extend_from_slice(chunk);
            let (used, n) = s.scan(&pending, usize::MAX).unwrap();
            pending.drain(..used);
            replies += n;
        }
        assert!(pending.is_empty(), "left over: {pending:?}");
        assert!(s.at_boundary());
        replies
    }

    const SAMPLES: &[(&[u8], usize)] = &[
        (b"+OK\r\n", 1),
        (b"-ERR no\r\n", 1),
        (b":-12\r\n", 1),
        (b"$3\r\nfoo\r\n", 1),
        (b"$0\r\n\r\n", 1),
        (b"$-1\r\n", 1),
        (b"*-1\r\n", 1),
        (b"*0\r\n", 1),
        (b"*2\r\n$1\r\na\r\n*2\r\n:1\r\n*0\r\n", 1),
        (b"$4\r\n\r\n\r\n\r\n", 1),
        // RESP3
        (b"_\r\n", 1),
        (b",1.5\r\n", 1),
        (b"#t\r\n", 1),
        (b"(3492890328409238509324850943850943825024385\r\n", 1),
        (b"=8\r\ntxt:abcd\r\n", 1),
        (b"!5\r\nERR x\r\n", 1),
        (b"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n_\r\n", 1),
        (b"%0\r\n", 1),
        (b"~2\r\n#t\r\n#f\r\n", 1),
        // A push is not a reply.
        (b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n", 0),
        // An attribute belongs to the reply after it.
        (b"|1\r\n+ttl\r\n:3\r\n:5\r\n", 1),
        (b"*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n", 1),
        (b"|0\r\n+OK\r\n", 1),
    ];

    #[test]
    fn counts_replies_of_every_type_in_any_split() {
        let mut all = Vec::new();
        let mut total = 0;
        for (bytes, n) in SAMPLES {
            for step in 1..=bytes.len() {
                assert_eq!(
                    count(bytes, step),
                    *n,
                    "{:?} step {step}",
                    String::from_utf8_lossy(bytes)
                );
            }
            all.extend_from_slice(bytes);
            total += n;
        }
        for step in [1, 2, 3, 7, 64, all.len()] {
            assert_eq!(count(&all, step), total, "step {step}");
        }
    }

    #[test]
    fn stops_at_the_quota_but_lets_pushes_through() {
        let stream = b"+A\r\n>1\r\n+p\r\n+B\r\n|1\r\n+k\r\n+v\r\n+C\r\n";
        let mut s = ReplyScanner::new();
        let (used, n) = s.scan(stream, 1).unwrap();
        // A, then the push, but not B.
        assert_eq!((&stream[..used], n), (&b"+A\r\n>1\r\n+p\r\n"[..], 1));
        let rest = &stream[used..];
        let (used2, n2) = s.scan(rest, 0).unwrap();
        assert_eq!((used2, n2), (0, 0));
        let (used3, n3) = s.scan(rest, 1).unwrap();
        assert_eq!((&rest[..used3], n3), (&b"+B\r\n"[..], 1));
        // The attribute opens C's reply: it waits for quota too.
        let rest = &rest[used3..];
        assert_eq!(s.scan(rest, 0).unwrap(), (0, 0));
        assert_eq!(s.scan(rest, 1).unwrap(), (rest.len(), 1));
    }

    #[test]
    fn streams_large_bulks_without_holding_them() {
        let mut s = ReplyScanner::new();
        assert_eq!(s.scan(b"$10\r\n01234", 1).unwrap(), (10, 0));
        assert!(!s.at_boundary());
        assert_eq!(s.scan(b"56789\r", 1).unwrap(), (6, 0));
        assert_eq!(s.scan(b"\n+OK\r\n", 1).unwrap(), (1, 1));
    }

    #[test]
    fn refuses_what_it_cannot_follow() {
        for bad in [
            &b"?x\r\n"[..],
            b"$abc\r\n",
            b"+OK\n",
            b"*1.5\r\n",
            b"~-1\r\n",
            b"$?\r\n",
        ] {
            assert!(ReplyScanner::new().scan(bad, 5).is_err(), "{bad:?}");
        }
    }
}
