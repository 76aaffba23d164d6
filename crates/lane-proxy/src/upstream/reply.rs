//! Redis's replies, parsed whole ([`Reply`]): for the questions the proxy
//! asks itself (the meter's, the route's, a reply's check). Relayed
//! replies are never parsed, only scanned (`crate::conn::reply_scanner`).

use crate::resp::parse_int;

/// A RESP2 reply, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+…`
    Simple(Vec<u8>),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…`; `None` for the null bulk.
    Bulk(Option<Vec<u8>>),
    /// `*…`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an `Int`.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a simple or bulk string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Simple(b) | Reply::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }

    /// The elements of an array (none for the null array).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            _ => &[],
        }
    }
}

/// Parses one reply from the start of `buf`: `Ok(None)` if incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > 8 {
        return Err("reply nested too deeply".into());
    }
    let Some(&ty) = buf.get(at) else {
        return Ok(None);
    };
    let Some(lf) = buf[at..].iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    if lf < 2 || buf[at + lf - 1] != b'\r' {
        return Err("reply line not terminated by CRLF".into());
    }
    let line = &buf[at + 1..at + lf - 1];
    let next = at + lf + 1;
    let int = || parse_int(line).ok_or_else(|| format!("bad integer in reply: {line:?}"));
    Ok(Some(match ty {
        b'+' => (Reply::Simple(line.to_vec()), next),
        b'-' => (
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b':' => (Reply::Int(int()?), next),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let end = next + n as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            (Reply::Bulk(Some(buf[next..end].to_vec())), end + 2)
        }
        b'*' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((r, p)) => {
                        items.push(r);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            (Reply::Array(Some(items)), pos)
        }
        other => return Err(format!("unexpected reply type byte 0x{other:02x}")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_replies_only() {
        let b = b"*3\r\n:5\r\n$3\r\nabc\r\n*2\r\n$-1\r\n-ERR x\r\n+OK\r\n";
        let (r, used) = parse_reply(b).unwrap().unwrap();
        assert_eq!(used, b.len() - 5);
        assert_eq!(r.items()[0].int(), Some(5));
        assert_eq!(r.items()[1].bytes(), Some(&b"abc"[..]));
        assert_eq!(
            r.items()[2],
            Reply::Array(Some(vec![Reply::Bulk(None), Reply::Error("ERR x".into())]))
        );
        for cut in 0..used {
            assert_eq!(parse_reply(&b[..cut]).unwrap(), None, "at {cut}");
        }
        assert!(parse_reply(b"%1\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
    }
}
