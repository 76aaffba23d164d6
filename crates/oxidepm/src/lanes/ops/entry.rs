//! What the `ops` responder reads and writes, taken apart leniently: an
//! XREADGROUP reply read as raw values (a typed read fails the whole
//! batch on one field name that is not UTF-8), and replies bounded in
//! bytes.

use super::super::error::Error;
use oxidepm_proto::{ErrorBody, Response};
use redis::Value;
use std::collections::BTreeMap;

/// One entry of an outbox.
#[derive(Debug)]
pub struct Entry {
    /// Its stream id.
    pub id: String,
    /// Its fields; `None` when it was deleted while pending.
    pub fields: Option<Result<BTreeMap<String, String>, Error>>,
}

/// The entries of an XREADGROUP reply for one stream (RESP2 arrays or
/// RESP3 maps). Anything without an id is skipped: it cannot be answered.
pub fn entries(reply: Value) -> Vec<Entry> {
    let streams = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut kv) if kv.len() == 2 => kv.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, v)| v).collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for list in streams {
        let Value::Array(list) = list else { continue };
        for e in list {
            let Value::Array(mut parts) = e else { continue };
            if parts.is_empty() {
                continue;
            }
            let fields = if parts.len() > 1 { parts.pop() } else { None };
            let Some(id) = text(&parts[0]) else { continue };
            out.push(Entry {
                id,
                fields: fields.and_then(field_map),
            });
        }
    }
    out
}

/// The text of a value, when it is UTF-8 text or a number.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// An entry's fields as text; the first one that is not text is the
/// error. `None` for a deleted entry (nil fields).
fn field_map(v: Value) -> Option<Result<BTreeMap<String, String>, Error>> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(flat) => {
            let mut it = flat.into_iter();
            let mut pairs = Vec::new();
            while let Some(k) = it.next() {
                pairs.push((k, it.next().unwrap_or(Value::Nil)));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        _ => Vec::new(),
    };
    let mut map = BTreeMap::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        let Some(name) = text(k) else {
            return Some(Err(Error::EntryNotText {
                field: format!("name #{}", i + 1),
            }));
        };
        let Some(value) = text(v) else {
            return Some(Err(Error::EntryNotText {
                field: format!("`{}` (#{})", name.escape_debug(), i + 1),
            }));
        };
        map.insert(name, value);
    }
    Some(Ok(map))
}

/// A reply as JSON of at most `max` bytes, and a truncation note when it
/// had to be cut: a list loses its oldest (first) items until it fits;
/// anything else becomes an `E_TOO_LARGE` error.
pub fn bounded(resp: Response, max: usize) -> (String, Option<String>) {
    let json = serde_json::to_string(&resp).unwrap_or_default();
    if json.len() <= max {
        return (json, None);
    }
    let size = json.len();
    let id = resp.id;
    if let Some(serde_json::Value::Array(mut items)) = resp.result {
        let n = items.len();
        let mut over = size - max;
        let mut drop = 0;
        while over > 0 && drop < n {
            let item = serde_json::to_string(&items[drop]).map_or(0, |s| s.len());
            over = over.saturating_sub(item + 1);
            drop += 1;
        }
        let kept = items.split_off(drop);
        let k = kept.len();
        let cut = serde_json::to_string(&Response::ok(id, serde_json::Value::Array(kept)))
            .unwrap_or_default();
        if cut.len() <= max {
            let note = format!(
                "kept the newest {k} of {n} items: the answer was {size} bytes, over \
                 ops_max_reply_bytes ({max}); ask for fewer"
            );
            return (cut, Some(note));
        }
    }
    let e = Response::err(
        id,
        ErrorBody::from(Error::ReplyTooLarge { bytes: size, max }),
    );
    let note = format!("the answer was {size} bytes, over ops_max_reply_bytes ({max})");
    (serde_json::to_string(&e).unwrap_or_default(), Some(note))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    #[test]
    fn a_field_that_is_not_text_spoils_only_its_entry() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"alice:ops:outbox"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk(b"1-0"),
                    Value::Array(vec![bulk(b"\xff\xfe"), bulk(b"x")]),
                ]),
                Value::Array(vec![bulk(b"2-0"), Value::Nil]),
                Value::Array(vec![
                    bulk(b"3-0"),
                    Value::Array(vec![bulk(b"op"), bulk(b"ping")]),
                ]),
                Value::Array(vec![
                    bulk(b"4-0"),
                    Value::Array(vec![bulk(b"op"), bulk(b"\xc3")]),
                ]),
            ]),
        ])]);
        let e = entries(reply);
        assert_eq!(e.len(), 4);
        assert!(matches!(e[0].fields, Some(Err(Error::EntryNotText { .. }))));
        assert!(e[1].fields.is_none());
        let ok = e[2].fields.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(ok["op"], "ping");
        assert!(matches!(e[3].fields, Some(Err(Error::EntryNotText { .. }))));
        assert!(entries(Value::Nil).is_empty());
    }

    #[test]
    fn lists_lose_their_oldest_items() {
        let items: Vec<serde_json::Value> = (0..1000).map(|i| format!("line {i}").into()).collect();
        let (json, note) = bounded(Response::ok(1, items.into()), 2000);
        assert!(json.len() <= 2000);
        assert!(note.is_some());
        let r: Response = serde_json::from_str(&json).unwrap();
        let kept = r.result.unwrap();
        let kept = kept.as_array().unwrap();
        assert_eq!(kept.last().unwrap(), "line 999");
        let (json, note) = bounded(
            Response::ok(1, serde_json::json!({"a": "x".repeat(5000)})),
            2000,
        );
        assert!(json.len() <= 2000);
        assert!(note.is_some());
        assert!(json.contains("E_TOO_LARGE"));
        let (_, note) = bounded(Response::ok(1, serde_json::json!([1, 2])), 2000);
        assert!(note.is_none());
    }
}
