//! Where a Redis Cluster keeps a lane: the agent's slot (every key of an
//! agent carries the hash tag `{<agent>}`, so the slot is the CRC16 of the
//! name alone), the node serving it (from `CLUSTER SLOTS`, or learnt from
//! a `-MOVED`), and the errors by which a server says the lane is no
//! longer where the proxy thought.

use crate::upstream::reply::Reply;
use oxidepm_lanes::redis_url::HostPort;

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of every key of `name`'s lane (its keys' hash tag is the name).
pub fn slot_of(name: &str) -> u16 {
    crc16(name.as_bytes()) % SLOTS
}

/// One range of slots and the primary serving it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (included).
    pub end: u16,
    /// The primary.
    pub node: HostPort,
}

/// The ranges of a `CLUSTER SLOTS` answer; `seed` stands for a node that
/// gives no address of its own (an empty host means "the one you asked").
pub fn parse_slots(reply: &Reply, seed: &HostPort) -> Result<Vec<SlotRange>, String> {
    if let Reply::Error(e) = reply {
        return Err(e.clone());
    }
    let mut out = Vec::new();
    for r in reply.items() {
        let items = r.items();
        let (Some(start), Some(end), Some(primary)) = (
            items.first().and_then(Reply::int),
            items.get(1).and_then(Reply::int),
            items.get(2),
        ) else {
            return Err(format!("unexpected entry in CLUSTER SLOTS: {r:?}"));
        };
        let host = primary
            .items()
            .first()
            .and_then(Reply::bytes)
            .map(|h| String::from_utf8_lossy(h).into_owned());
        let port = primary.items().get(1).and_then(Reply::int);
        let (Some(host), Some(port)) = (host, port) else {
            return Err(format!("unexpected node in CLUSTER SLOTS: {primary:?}"));
        };
        let in_range = |n: i64| (0..i64::from(SLOTS)).contains(&n);
        let (Ok(port), true, true) = (u16::try_from(port), in_range(start), in_range(end)) else {
            return Err(format!("slot or port out of range in CLUSTER SLOTS: {r:?}"));
        };
        let host = if host.is_empty() || host == "?" {
            seed.host.clone()
        } else {
            host
        };
        out.push(SlotRange {
            start: start as u16,
            end: end as u16,
            node: HostPort { host, port },
        });
    }
    Ok(out)
}

/// The node serving `slot` in `ranges`.
pub fn node_of(ranges: &[SlotRange], slot: u16) -> Option<&HostPort> {
    ranges
        .iter()
        .find(|r| r.start <= slot && slot <= r.end)
        .map(|r| &r.node)
}

/// What a server's error says about where the lane is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moved {
    /// `-MOVED <slot> <host>:<port>`: the slot is served there now.
    To(u16, HostPort),
    /// `-ASK …` (a slot in migration), `-READONLY` (a primary turned
    /// replica), `-UNBLOCKED … state changed` (a blocked read ended by a
    /// failover), `-CLUSTERDOWN`, `-TRYAGAIN`: ask the topology again.
    Elsewhere,
}

/// Whether the error line `line` (without its `-`) says the lane moved.
pub fn moved(line: &[u8]) -> Option<Moved> {
    let word = line.split(|&b| b == b' ').next().unwrap_or(line);
    match word {
        b"MOVED" => Some(parse_moved(line).unwrap_or(Moved::Elsewhere)),
        b"ASK" | b"READONLY" | b"CLUSTERDOWN" | b"TRYAGAIN" | b"MASTERDOWN" => {
            Some(Moved::Elsewhere)
        }
        // Not an UNBLOCKED of a deleted stream: only a role change.
        b"UNBLOCKED" if line.windows(13).any(|w| w == b"state changed") => Some(Moved::Elsewhere),
        _ => None,
    }
}

fn parse_moved(line: &[u8]) -> Option<Moved> {
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split(' ').skip(1);
    let slot: u16 = parts.next()?.parse().ok().filter(|s| *s < SLOTS)?;
    let addr = parts.next()?;
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some(Moved::To(
        slot,
        HostPort {
            host: host.to_string(),
            port: port.parse().ok()?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(slot_of("123456789"), 12739);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("alice"), slot_of("alice"));
    }

    #[test]
    fn reads_redirections() {
        assert_eq!(
            moved(b"MOVED 3999 127.0.0.1:6381"),
            Some(Moved::To(
                3999,
                HostPort {
                    host: "127.0.0.1".into(),
                    port: 6381
                }
            ))
        );
        assert_eq!(moved(b"MOVED nonsense"), Some(Moved::Elsewhere));
        assert_eq!(moved(b"ASK 1 h:1"), Some(Moved::Elsewhere));
        assert_eq!(
            moved(b"READONLY You can't write against a read only replica."),
            Some(Moved::Elsewhere)
        );
        assert_eq!(
            moved(b"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"),
            Some(Moved::Elsewhere)
        );
        assert_eq!(moved(b"UNBLOCKED the stream key no longer exists"), None);
        assert_eq!(moved(b"NOPERM no"), None);
        assert_eq!(moved(b"ERR MOVED"), None);
    }

    #[test]
    fn reads_cluster_slots() {
        let node = |h: &str, p| {
            Reply::Array(Some(vec![
                Reply::Bulk(Some(h.as_bytes().to_vec())),
                Reply::Int(p),
                Reply::Bulk(Some(b"id".to_vec())),
            ]))
        };
        let seed = HostPort {
            host: "seed".into(),
            port: 1,
        };
        let r = Reply::Array(Some(vec![Reply::Array(Some(vec![
            Reply::Int(0),
            Reply::Int(5460),
            node("", 7000),
            node("10.0.0.2", 7003),
        ]))]));
        let ranges = parse_slots(&r, &seed).unwrap();
        assert_eq!(node_of(&ranges, 10).unwrap().host, "seed");
        assert_eq!(node_of(&ranges, 6000), None);
        let bad = Reply::Array(Some(vec![Reply::Array(Some(vec![
            Reply::Int(0),
            Reply::Int(99999),
            node("h", 7000),
        ]))]));
        assert!(parse_slots(&bad, &seed).is_err());
        assert!(parse_slots(&Reply::Error("NOPERM".into()), &seed).is_err());
    }
}
