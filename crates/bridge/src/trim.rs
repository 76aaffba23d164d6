//! Trimming delivered entries from an outbox, and only those.
//!
//! An outbox keeps every entry until its consumer groups are done with it:
//! the bridge never caps an outbox by length (`MAXLEN` would delete entries
//! not yet delivered). Once entries are acknowledged, everything below the
//! lowest id any group still needs is removed with `XTRIM MINID ~`.
//!
//! What a group still needs: its oldest pending entry, and everything after
//! its `last-delivered-id`. Both are read without a transaction, in this
//! order: `last-delivered-id` first (XINFO GROUPS), then the oldest pending
//! entry (XPENDING). An entry below the first and not pending at the later
//! moment has been acknowledged, since an entry leaves the pending list
//! only by being acknowledged (or claimed, which keeps it pending); an
//! entry delivered in between is above the first. So the threshold never
//! passes an entry that is not done.

use crate::entries::EntryId;
use redis::aio::ConnectionLike;
use redis::Value;

/// What one group of a stream still needs.
#[derive(Debug)]
struct Group {
    name: String,
    last_delivered: EntryId,
}

/// The lowest id any group of `key` still needs, or `None` when there is
/// no group (nothing was ever delivered: nothing is trimmed).
pub async fn threshold<C: ConnectionLike>(
    con: &mut C,
    key: &str,
) -> redis::RedisResult<Option<EntryId>> {
    let info: Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(key)
        .query_async(con)
        .await?;
    let groups = parse_groups(&info);
    if groups.is_empty() {
        return Ok(None);
    }
    let mut low: Option<EntryId> = None;
    for g in groups {
        let summary: Value = redis::cmd("XPENDING")
            .arg(key)
            .arg(&g.name)
            .query_async(con)
            .await?;
        let mut need = g.last_delivered.succ();
        if let Some(p) = oldest_pending(&summary) {
            need = need.min(p);
        }
        low = Some(low.map_or(need, |l| l.min(need)));
    }
    Ok(low)
}

/// Trims `key` below what its groups still need; returns how many
/// entries were removed.
pub async fn trim_delivered<C: ConnectionLike>(con: &mut C, key: &str) -> redis::RedisResult<u64> {
    let Some(min) = threshold(con, key).await? else {
        return Ok(0);
    };
    redis::cmd("XTRIM")
        .arg(key)
        .arg("MINID")
        .arg("~")
        .arg(min.to_string())
        .query_async(con)
        .await
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The groups of an XINFO GROUPS reply: `[[name, n, last-delivered-id,
/// id, …], …]` (RESP2) or maps (RESP3). A group whose last id cannot be
/// read counts as having read nothing, so that nothing is trimmed for it.
fn parse_groups(v: &Value) -> Vec<Group> {
    let Value::Array(list) = v else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|g| {
            let pairs: Vec<(String, &Value)> = match g {
                Value::Array(kv) => kv
                    .chunks(2)
                    .filter_map(|c| Some((text(c.first()?)?, c.get(1)?)))
                    .collect(),
                Value::Map(kv) => kv.iter().filter_map(|(k, v)| Some((text(k)?, v))).collect(),
                _ => return None,
            };
            let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
            let name = get("name").and_then(text)?;
            let last_delivered = get("last-delivered-id")
                .and_then(text)
                .and_then(|s| EntryId::parse(&s))
                .unwrap_or(EntryId(0, 0));
            Some(Group {
                name,
                last_delivered,
            })
        })
        .collect()
}

/// The oldest pending id of an XPENDING summary: `[count, min, max,
/// consumers]`.
fn oldest_pending(v: &Value) -> Option<EntryId> {
    let Value::Array(parts) = v else {
        return None;
    };
    match parts.first() {
        Some(Value::Int(n)) if *n > 0 => {}
        _ => return None,
    }
    parts.get(1).and_then(text).and_then(|s| EntryId::parse(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_groups_and_pending_summaries() {
        let info = Value::Array(vec![Value::Array(vec![
            b("name"),
            b("bridge"),
            b("consumers"),
            Value::Int(1),
            b("pending"),
            Value::Int(2),
            b("last-delivered-id"),
            b("12-3"),
        ])]);
        let g = parse_groups(&info);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].name, "bridge");
        assert_eq!(g[0].last_delivered, EntryId(12, 3));
        let summary = Value::Array(vec![Value::Int(2), b("10-0"), b("12-3"), Value::Nil]);
        assert_eq!(oldest_pending(&summary), Some(EntryId(10, 0)));
        let none = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]);
        assert_eq!(oldest_pending(&none), None);
        assert!(parse_groups(&Value::Nil).is_empty());
    }
}
