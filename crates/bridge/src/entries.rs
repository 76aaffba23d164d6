//! Stream entries as Redis returns them (XREADGROUP, XAUTOCLAIM), parsed
//! by hand so that the fields keep their order and repeats. Malformed
//! replies are errors, never panics.

use redis::Value;

/// One stream entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub id: String,
    /// Its fields, or `None` when it was deleted while pending.
    pub fields: Option<Vec<(String, String)>>,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A reply of Redis that is not of the shape its command has.
#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from Redis for {what}: {value:?}")]
pub struct ReplyError {
    /// What was being read.
    pub what: &'static str,
    /// The part of the reply that does not fit.
    pub value: Value,
}

fn bad(what: &'static str, v: &Value) -> ReplyError {
    ReplyError {
        what,
        value: v.clone(),
    }
}

/// Parses `[[id, [f, v, …]], …]`.
pub fn parse_entries(v: &Value) -> Result<Vec<Entry>, ReplyError> {
    let list = match v {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(l) => l,
        other => return Err(bad("stream entries", other)),
    };
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let Value::Array(pair) = e else {
            return Err(bad("a stream entry", e));
        };
        let id = pair
            .first()
            .and_then(text)
            .ok_or_else(|| bad("a stream entry id", e))?;
        let fields = match pair.get(1) {
            None | Some(Value::Nil) => None,
            Some(Value::Array(kv)) => {
                let mut fields = Vec::with_capacity(kv.len() / 2);
                for c in kv.chunks(2) {
                    let k = c.first().and_then(text);
                    let v = c.get(1).and_then(text);
                    match (k, v) {
                        (Some(k), Some(v)) => fields.push((k, v)),
                        _ => return Err(bad("stream entry fields", e)),
                    }
                }
                Some(fields)
            }
            Some(Value::Map(kv)) => {
                let mut fields = Vec::with_capacity(kv.len());
                for (k, v) in kv {
                    match (text(k), text(v)) {
                        (Some(k), Some(v)) => fields.push((k, v)),
                        _ => return Err(bad("stream entry fields", e)),
                    }
                }
                Some(fields)
            }
            Some(other) => return Err(bad("stream entry fields", other)),
        };
        out.push(Entry { id, fields });
    }
    Ok(out)
}

/// Parses an XREADGROUP reply: `[[key, entries], …]` (nil: nothing).
pub fn parse_read(v: &Value) -> Result<Vec<(String, Vec<Entry>)>, ReplyError> {
    let list: Vec<(&Value, &Value)> = match v {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(l) => l
            .iter()
            .map(|s| match s {
                Value::Array(kv) if kv.len() == 2 => Ok((&kv[0], &kv[1])),
                other => Err(bad("XREADGROUP", other)),
            })
            .collect::<Result<_, _>>()?,
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        other => return Err(bad("XREADGROUP", other)),
    };
    list.into_iter()
        .map(|(k, e)| {
            let key = text(k).ok_or_else(|| bad("a stream key", k))?;
            Ok((key, parse_entries(e)?))
        })
        .collect()
}

/// Parses an XAUTOCLAIM reply: `[next cursor, entries, deleted ids]`.
pub fn parse_autoclaim(v: &Value) -> Result<(String, Vec<Entry>), ReplyError> {
    let Value::Array(parts) = v else {
        return Err(bad("XAUTOCLAIM", v));
    };
    let cursor = parts
        .first()
        .and_then(text)
        .ok_or_else(|| bad("XAUTOCLAIM", v))?;
    let entries = parse_entries(parts.get(1).unwrap_or(&Value::Nil))?;
    Ok((cursor, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_a_read_reply_keeping_order_and_deleted_entries() {
        let reply = Value::Array(vec![Value::Array(vec![
            b("alice:webhook:outbox"),
            Value::Array(vec![
                Value::Array(vec![
                    b("1-0"),
                    Value::Array(vec![
                        b("text"),
                        b("hi"),
                        b("agent"),
                        b("bob"),
                        b("text"),
                        b("2"),
                    ]),
                ]),
                Value::Array(vec![b("2-0"), Value::Nil]),
            ]),
        ])]);
        let got = parse_read(&reply).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "alice:webhook:outbox");
        let e = &got[0].1;
        assert_eq!(e[0].id, "1-0");
        let f = e[0].fields.as_ref().unwrap();
        assert_eq!(f[0], ("text".into(), "hi".into()));
        assert_eq!(f[2], ("text".into(), "2".into()));
        assert_eq!(e[1].fields, None);
        assert_eq!(parse_read(&Value::Nil).unwrap(), vec![]);
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(parse_read(&Value::Int(3)).is_err());
        assert!(parse_read(&Value::Array(vec![b("x")])).is_err());
        let odd = Value::Array(vec![Value::Array(vec![
            b("1-0"),
            Value::Array(vec![b("k")]),
        ])]);
        assert!(parse_entries(&odd).is_err());
        assert!(parse_autoclaim(&Value::Nil).is_err());
        let ok = Value::Array(vec![b("0-0"), Value::Array(vec![]), Value::Array(vec![])]);
        assert_eq!(parse_autoclaim(&ok).unwrap(), ("0-0".into(), vec![]));
    }
}
