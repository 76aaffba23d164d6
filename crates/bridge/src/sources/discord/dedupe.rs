//! The message ids seen lately, to drop a message the gateway sends twice
//! (a RESUME replays what the bridge may already have taken). Bounded: the
//! oldest id is forgotten when a new one does not fit.
//!
//! The ids are also kept in Redis ([`SEEN_KEY`], a sorted set scored by the
//! id's time, trimmed to `dedupe_ids`), each written in one transaction
//! with its message ([`once`]), and read back at start ([`load`]): a
//! bridge killed with SIGKILL, whose successor resumes the session from
//! before its last messages, publishes none of them twice.

use crate::conn::Con;
use crate::publish::Once;
use std::collections::{HashSet, VecDeque};

/// The sorted set of the message ids taken.
pub const SEEN_KEY: &str = "bridge:discord:seen";

/// The record written with message `id`, in a set that keeps `keep` ids.
pub fn once(id: u64, keep: usize) -> Once {
    Once {
        key: SEEN_KEY.to_string(),
        member: id.to_string(),
        // A snowflake's time (ms since Discord's epoch): exact as a score.
        score: id >> 22,
        keep,
    }
}

/// Remembers the ids kept in Redis, oldest first; an error leaves `seen`
/// as it was (the in-memory record still drops what this bridge takes twice).
pub async fn load(con: &mut Con, seen: &mut Seen) -> redis::RedisResult<usize> {
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(SEEN_KEY)
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await?;
    let mut n = 0;
    for id in ids.iter().filter_map(|i| i.parse::<u64>().ok()) {
        seen.insert(id);
        n += 1;
    }
    Ok(n)
}

/// The last `cap` message ids, oldest first.
#[derive(Debug)]
pub struct Seen {
    order: VecDeque<u64>,
    set: HashSet<u64>,
    cap: usize,
}

impl Seen {
    /// Remembers at most `cap` ids (at least one).
    pub fn new(cap: usize) -> Seen {
        let cap = cap.max(1);
        Seen {
            order: VecDeque::with_capacity(cap.min(1 << 16)),
            set: HashSet::with_capacity(cap.min(1 << 16)),
            cap,
        }
    }

    /// Whether `id` was remembered.
    pub fn contains(&self, id: u64) -> bool {
        self.set.contains(&id)
    }

    /// Remembers `id`, forgetting the oldest when full.
    pub fn insert(&mut self, id: u64) {
        if !self.set.insert(id) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    /// How many ids are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_ones_only() {
        let mut s = Seen::new(3);
        for id in 1..=3 {
            assert!(!s.contains(id));
            s.insert(id);
        }
        s.insert(2);
        assert_eq!(s.len(), 3);
        s.insert(4);
        assert!(!s.contains(1));
        assert!(s.contains(2) && s.contains(3) && s.contains(4));
        assert_eq!(s.len(), 3);
    }
}
