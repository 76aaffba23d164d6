//! The consumer groups of an outbox, as far as removing what they are done
//! with needs them: an entry may go once every group has read it and none
//! still has it pending. The oldest entry a group may still need is its
//! oldest pending one, else the first after the last it read.

use crate::upstream::reply::Reply;

/// One consumer group of an outbox, as far as trimming needs it.
#[derive(Debug)]
pub struct Group {
    /// Its name.
    pub name: Vec<u8>,
    /// How many entries it has read and not acknowledged.
    pub pending: i64,
    /// The last entry it read.
    pub last_delivered: StreamId,
    /// Its oldest pending entry, once asked (`XPENDING`).
    pub oldest_pending: Option<StreamId>,
}

impl Group {
    /// The oldest entry the group may still need: its oldest pending one,
    /// else the first after the last it read.
    pub fn keep_from(&self) -> StreamId {
        match self.oldest_pending {
            Some(p) if p <= self.last_delivered => p,
            _ => self.last_delivered.next(),
        }
    }
}

/// `XINFO GROUPS` (RESP2: a list of flat name/value lists).
pub fn parse_groups(r: &Reply) -> Result<Vec<Group>, String> {
    let Reply::Array(Some(list)) = r else {
        return Err(format!("not a list: {r:?}"));
    };
    let mut out = Vec::with_capacity(list.len());
    for g in list {
        let fields = g.items();
        let get = |name: &[u8]| {
            fields
                .chunks(2)
                .find(|kv| kv[0].bytes() == Some(name))
                .and_then(|kv| kv.get(1))
        };
        let name = get(b"name")
            .and_then(Reply::bytes)
            .ok_or("a group without a name")?;
        let pending = get(b"pending")
            .and_then(Reply::int)
            .ok_or("a group without pending")?;
        let last = get(b"last-delivered-id")
            .and_then(Reply::bytes)
            .and_then(StreamId::parse)
            .ok_or("a group without last-delivered-id")?;
        out.push(Group {
            name: name.to_vec(),
            pending,
            last_delivered: last,
            oldest_pending: None,
        });
    }
    Ok(out)
}

/// A stream entry ID, `<ms>-<seq>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamId(u64, u64);

impl StreamId {
    /// Parses `<ms>-<seq>`.
    pub fn parse(b: &[u8]) -> Option<StreamId> {
        let s = std::str::from_utf8(b).ok()?;
        let (ms, seq) = s.split_once('-')?;
        Some(StreamId(ms.parse().ok()?, seq.parse().ok()?))
    }

    /// The smallest ID after this one.
    pub fn next(self) -> StreamId {
        match self.1.checked_add(1) {
            Some(seq) => StreamId(self.0, seq),
            None => StreamId(self.0.saturating_add(1), 0),
        }
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_order_and_follow() {
        let a = StreamId::parse(b"5-3").unwrap();
        assert_eq!(a.next(), StreamId(5, 4));
        assert_eq!(StreamId(5, u64::MAX).next(), StreamId(6, 0));
        assert!(StreamId(4, 9) < a && a < StreamId(6, 0));
        assert_eq!(StreamId::parse(b"x-1"), None);
        let g = Group {
            name: b"bridge".to_vec(),
            pending: 1,
            last_delivered: StreamId(9, 0),
            oldest_pending: Some(StreamId(3, 0)),
        };
        assert_eq!(g.keep_from(), StreamId(3, 0));
        let g = Group {
            oldest_pending: None,
            ..g
        };
        assert_eq!(g.keep_from(), StreamId(9, 1));
    }
}
