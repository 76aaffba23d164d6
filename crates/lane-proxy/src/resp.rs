//! RESP commands, as far as the lane proxy needs them.
//!
//! * client → Redis: [`CommandParser`] accepts exactly one form, an array of
//!   bulk strings (`*N\r\n$len\r\n…\r\n`), within [`Limits`]. Everything else
//!   (inline commands, nested arrays, other element types, oversized
//!   arguments) is a [`ProtocolError`]. A parsed [`Command`] is re-encoded
//!   with [`encode_command`] / [`encode_args`]; client bytes are never
//!   forwarded as they came.
//! * Redis → client: see [`crate::conn::reply_scanner`].

use oxidepm_lanes::LimitsConfig;
use std::fmt;

/// Bounds on what one client command may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest single argument, in bytes.
    pub max_bulk: usize,
    /// Most arguments (command name included) in one command.
    pub max_elements: usize,
    /// Largest whole command, headers included, in bytes.
    pub max_command: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&LimitsConfig::default())
    }
}

impl From<&LimitsConfig> for Limits {
    fn from(l: &LimitsConfig) -> Self {
        Limits {
            max_bulk: l.max_bulk,
            max_elements: l.max_elements,
            max_command: l.max_command,
        }
    }
}

/// Why a client's bytes are not a command the proxy accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The command does not start with `*`: an inline command.
    Inline,
    /// An array header that is not `*<count>\r\n` with 1 ≤ count.
    BadArrayHeader,
    /// An element that is not a bulk string (`$`): a nested array, an
    /// integer, a simple string, …
    NotBulk(u8),
    /// A bulk header that is not `$<len>\r\n` with len ≥ 0.
    BadBulkHeader,
    /// A bulk string not followed by `\r\n`.
    MissingCrlf,
    TooManyElements {
        count: usize,
        max: usize,
    },
    BulkTooLarge {
        len: usize,
        max: usize,
    },
    CommandTooLarge {
        max: usize,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Inline => f.write_str(
                "inline commands are not accepted; send commands as RESP arrays of bulk strings",
            ),
            ProtocolError::BadArrayHeader => {
                f.write_str("invalid command header; expected *<count> with count >= 1")
            }
            ProtocolError::NotBulk(b) => write!(
                f,
                "command arguments must be bulk strings ('$'), got {}",
                describe_type(*b)
            ),
            ProtocolError::BadBulkHeader => {
                f.write_str("invalid bulk string header; expected $<length>")
            }
            ProtocolError::MissingCrlf => f.write_str("bulk string not terminated by CRLF"),
            ProtocolError::TooManyElements { count, max } => {
                write!(
                    f,
                    "command has {count} arguments; at most {max} are accepted"
                )
            }
            ProtocolError::BulkTooLarge { len, max } => {
                write!(
                    f,
                    "argument of {len} bytes; at most {max} bytes are accepted"
                )
            }
            ProtocolError::CommandTooLarge { max } => {
                write!(f, "command larger than {max} bytes")
            }
        }
    }
}

impl ProtocolError {
    /// The configuration key of the limit this error is about, if it is
    /// one of the limits (rather than a malformed command).
    pub fn limit(&self) -> Option<&'static str> {
        match self {
            ProtocolError::TooManyElements { .. } => Some("max_elements"),
            ProtocolError::BulkTooLarge { .. } => Some("max_bulk"),
            ProtocolError::CommandTooLarge { .. } => Some("max_command"),
            _ => None,
        }
    }
}

impl std::error::Error for ProtocolError {}

fn describe_type(b: u8) -> String {
    match b {
        b'*' => "a nested array".to_string(),
        b'+' => "a simple string".to_string(),
        b':' => "an integer".to_string(),
        b'-' => "an error".to_string(),
        b if b.is_ascii_graphic() => format!("type '{}'", b as char),
        b => format!("byte 0x{b:02x}"),
    }
}

/// Longest header line (`*1048576\r\n`, `$67108864\r\n`) worth waiting for.
const MAX_HEADER: usize = 24;

/// Where an argument lies in the buffer its command was parsed from,
/// relative to the command's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: usize,
    len: usize,
}

/// An incremental parser of client commands.
///
/// Call [`CommandParser::parse`] with the unconsumed input, starting at a
/// command boundary; when it returns `Ok(Some(n))` the command is the first
/// `n` bytes and [`CommandParser::command`] views its arguments. Work done
/// on an incomplete command is kept, so a large command arriving in many
/// reads is scanned once.
#[derive(Debug)]
pub struct CommandParser {
    limits: Limits,
    /// Declared element count, once the array header has been read.
    expected: Option<usize>,
    /// Offset of the next unparsed byte, relative to the command start.
    pos: usize,
    spans: Vec<Span>,
    /// Bytes the command is known to need in total (headers seen so far
    /// plus declared bulk lengths): a hint for buffer reservation.
    need: usize,
    /// Every header so far was written the way [`encode_command`] writes
    /// it (no leading zero, no sign).
    canonical: bool,
}

impl CommandParser {
    pub fn new(limits: Limits) -> Self {
        CommandParser {
            limits,
            expected: None,
            pos: 0,
            spans: Vec::new(),
            need: 0,
            canonical: true,
        }
    }

    /// Bytes the command in progress is known to need, at least.
    pub fn needed(&self) -> usize {
        self.need
    }

    /// Whether part of a command has been parsed.
    /// Whether the command just parsed is byte for byte its canonical
    /// encoding: then copying its bytes *is* re-encoding it (every byte has
    /// been checked), which saves the proxy rebuilding it.
    pub fn is_canonical(&self) -> bool {
        self.canonical
    }

    #[cfg(test)]
    pub fn in_progress(&self) -> bool {
        self.expected.is_some()
    }

    /// Forgets the command just returned; the next `parse` starts afresh.
    pub fn reset(&mut self) {
        self.expected = None;
        self.pos = 0;
        self.spans.clear();
        self.need = 0;
        self.canonical = true;
    }

    /// Parses from `buf`, which starts at the current command's first byte
    /// and holds at least the bytes given to earlier calls.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let expected = match self.expected {
            Some(e) => e,
            None => {
                let Some(&first) = buf.first() else {
                    return Ok(None);
                };
                if first != b'*' {
                    return Err(ProtocolError::Inline);
                }
                let Some((count, next, canonical)) =
                    read_header(buf, 0).map_err(|_| ProtocolError::BadArrayHeader)?
                else {
                    return Ok(None);
                };
                if count < 1 {
                    return Err(ProtocolError::BadArrayHeader);
                }
                let count = count as usize;
                if count > self.limits.max_elements {
                    return Err(ProtocolError::TooManyElements {
                        count,
                        max: self.limits.max_elements,
                    });
                }
                self.expected = Some(count);
                self.pos = next;
                self.need = next;
                self.canonical = canonical;
                self.spans.reserve(count.min(1024));
                count
            }
        };
        while self.spans.len() < expected {
            let pos = self.pos;
            let Some(&ty) = buf.get(pos) else {
                return Ok(None);
            };
            if ty != b'$' {
                return Err(ProtocolError::NotBulk(ty));
            }
            let Some((len, data, canonical)) =
                read_header(buf, pos).map_err(|_| ProtocolError::BadBulkHeader)?
            else {
                return Ok(None);
            };
            if len < 0 {
                return Err(ProtocolError::BadBulkHeader);
            }
            let len = len as usize;
            if len > self.limits.max_bulk {
                return Err(ProtocolError::BulkTooLarge {
                    len,
                    max: self.limits.max_bulk,
                });
            }
            let end = data + len + 2;
            if end > self.limits.max_command {
                return Err(ProtocolError::CommandTooLarge {
                    max: self.limits.max_command,
                });
            }
            self.need = end;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[data + len..end] != b"\r\n" {
                return Err(ProtocolError::MissingCrlf);
            }
            self.spans.push(Span { start: data, len });
            self.canonical &= canonical;
            self.pos = end;
        }
        Ok(Some(self.pos))
    }

    /// The command just parsed; `buf` is the same buffer given to `parse`.
    pub fn command<'a>(&'a self, buf: &'a [u8]) -> Command<'a> {
        Command {
            buf,
            spans: &self.spans,
        }
    }
}

/// Reads a `<type><integer>\r\n` header at `at`. `Ok(None)`: incomplete.
/// Returns the integer, the offset after the CRLF, and whether the integer
/// was written canonically.
fn read_header(buf: &[u8], at: usize) -> Result<Option<(i64, usize, bool)>, ()> {
    let rest = &buf[at + 1..];
    let limit = rest.len().min(MAX_HEADER);
    let Some(cr) = rest[..limit].iter().position(|&b| b == b'\r') else {
        return if rest.len() >= MAX_HEADER {
            Err(())
        } else {
            Ok(None)
        };
    };
    match rest.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(()),
    }
    let text = &rest[..cr];
    let n = parse_int(text).ok_or(())?;
    let canonical = text[0] != b'-' && (text[0] != b'0' || text.len() == 1);
    Ok(Some((n, at + 1 + cr + 2, canonical)))
}

/// A decimal integer, optionally negative; no `+`, no spaces, no empty.
pub(crate) fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(d - b'0');
    }
    Some(if neg { -n } else { n })
}

/// A parsed command: its arguments, borrowed from the input buffer.
#[derive(Clone, Copy)]
pub struct Command<'a> {
    buf: &'a [u8],
    spans: &'a [Span],
}

impl<'a> Command<'a> {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Argument `i` (0 is the command name); empty when out of range.
    pub fn arg(&self, i: usize) -> &'a [u8] {
        match self.spans.get(i) {
            Some(s) => &self.buf[s.start..s.start + s.len],
            None => &[],
        }
    }

    pub fn args(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(move |i| self.arg(i))
    }
}

impl fmt::Debug for Command<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.args().map(String::from_utf8_lossy))
            .finish()
    }
}

/// Appends `cmd` to `out` in canonical form.
pub fn encode_command(out: &mut Vec<u8>, cmd: &Command<'_>) {
    push_header(out, b'*', cmd.len());
    for a in cmd.args() {
        push_bulk(out, a);
    }
}

/// Appends the command made of `args` to `out`.
pub fn encode_args<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    push_header(out, b'*', args.len());
    for a in args {
        push_bulk(out, a.as_ref());
    }
}

fn push_bulk(out: &mut Vec<u8>, data: &[u8]) {
    push_header(out, b'$', data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn push_header(out: &mut Vec<u8>, ty: u8, n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push(ty);
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// An argument for an error message: printable ASCII (`?` for anything
/// else), at most `max` characters.
pub(crate) fn printable(s: &[u8], max: usize) -> String {
    s.iter()
        .take(max)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

/// An error reply, `-<text>\r\n`, with CR and LF in `text` replaced.
pub fn error_reply(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 3);
    out.push(b'-');
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = Option<(usize, Vec<Vec<u8>>)>;

    fn parse_all(bytes: &[u8], limits: Limits) -> Result<Parsed, ProtocolError> {
        let mut p = CommandParser::new(limits);
        Ok(p.parse(bytes)?
            .map(|n| (n, p.command(bytes).args().map(<[u8]>::to_vec).collect())))
    }

    fn err(bytes: &[u8]) -> ProtocolError {
        parse_all(bytes, Limits::default()).unwrap_err()
    }

    #[test]
    fn parses_arrays_of_bulk_strings() {
        let b = b"*3\r\n$4\r\nXADD\r\n$0\r\n\r\n$4\r\na\r\nb\r\n*1\r\n";
        let (n, args) = parse_all(b, Limits::default()).unwrap().unwrap();
        assert_eq!(n, b.len() - 4);
        assert_eq!(args, [b"XADD".to_vec(), b"".to_vec(), b"a\r\nb".to_vec()]);
    }

    #[test]
    fn resumes_across_partial_input() {
        let mut full = Vec::new();
        encode_args(&mut full, &["ECHO", "hello world", "x"]);
        let mut p = CommandParser::new(Limits::default());
        for cut in 0..full.len() {
            assert_eq!(p.parse(&full[..cut]).unwrap(), None, "at {cut}");
            assert!(p.needed() <= full.len());
        }
        assert_eq!(p.parse(&full).unwrap(), Some(full.len()));
        let args: Vec<&[u8]> = p.command(&full).args().collect();
        assert_eq!(args, [&b"ECHO"[..], b"hello world", b"x"]);
        p.reset();
        assert!(!p.in_progress());
    }

    #[test]
    fn refuses_everything_else() {
        assert_eq!(err(b"PING\r\n"), ProtocolError::Inline);
        assert_eq!(err(b"\x16\x03\x01\x02"), ProtocolError::Inline);
        assert_eq!(
            err(b"*1\r\n*1\r\n$4\r\nPING\r\n"),
            ProtocolError::NotBulk(b'*')
        );
        assert_eq!(err(b"*1\r\n:1\r\n"), ProtocolError::NotBulk(b':'));
        assert_eq!(err(b"*1\r\n+PING\r\n"), ProtocolError::NotBulk(b'+'));
        for h in [
            &b"*0\r\n"[..],
            b"*-1\r\n",
            b"*abc\r\n",
            b"*\r\n",
            b"*+1\r\n",
            b"*1\rx",
        ] {
            assert_eq!(err(h), ProtocolError::BadArrayHeader, "{h:?}");
        }
        for h in [&b"*1\r\n$-1\r\n"[..], b"*1\r\n$x\r\n", b"*1\r\n$ 4\r\n"] {
            assert_eq!(err(h), ProtocolError::BadBulkHeader, "{h:?}");
        }
        assert_eq!(err(b"*1\r\n$4\r\nPINGxx"), ProtocolError::MissingCrlf);
        // A header that never ends is refused, not waited for.
        assert_eq!(err(&[b'*'; 40]), ProtocolError::BadArrayHeader);
        assert_eq!(
            err(b"*1\r\n$11111111111111111111111111"),
            ProtocolError::BadBulkHeader
        );
    }

    #[test]
    fn enforces_limits_before_buffering() {
        let l = Limits {
            max_bulk: 10,
            max_elements: 3,
            max_command: 30,
        };
        assert_eq!(
            parse_all(b"*4\r\n", l).unwrap_err(),
            ProtocolError::TooManyElements { count: 4, max: 3 }
        );
        // Refused on the header alone: the payload never has to arrive.
        assert_eq!(
            parse_all(b"*1\r\n$11\r\n", l).unwrap_err(),
            ProtocolError::BulkTooLarge { len: 11, max: 10 }
        );
        assert_eq!(
            parse_all(b"*3\r\n$10\r\n0123456789\r\n$10\r\n", l).unwrap_err(),
            ProtocolError::CommandTooLarge { max: 30 }
        );
        let d = Limits::default();
        assert!(matches!(
            parse_all(b"*2\r\n$4\r\nECHO\r\n$100000000\r\n", d),
            Err(ProtocolError::BulkTooLarge { .. })
        ));
        assert!(matches!(
            parse_all(b"*2000000\r\n", d),
            Err(ProtocolError::TooManyElements { .. })
        ));
    }

    #[test]
    fn encodes_canonically() {
        let mut out = Vec::new();
        encode_args(&mut out, &["SET", "", "1234567890"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$10\r\n1234567890\r\n");
        let mut p = CommandParser::new(Limits::default());
        p.parse(&out).unwrap().unwrap();
        let mut again = Vec::new();
        encode_command(&mut again, &p.command(&out));
        assert_eq!(again, out);
        assert!(p.is_canonical());
        // Equivalent but not canonical: parsed, then rebuilt.
        let odd = b"*02\r\n$4\r\nECHO\r\n$-0\r\n\r\n";
        let mut p = CommandParser::new(Limits::default());
        assert_eq!(p.parse(odd).unwrap(), Some(odd.len()));
        assert!(!p.is_canonical());
        let mut rebuilt = Vec::new();
        encode_command(&mut rebuilt, &p.command(odd));
        assert_eq!(rebuilt, b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n");
        assert_eq!(error_reply("ERR a\r\nb"), b"-ERR a  b\r\n");
    }
}
