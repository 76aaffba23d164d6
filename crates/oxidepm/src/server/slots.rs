//! Who holds the connections of a socket: a total cap, a cap per peer,
//! slots kept for a person, and which idle connection gives way when the
//! socket is full.
//!
//! A cap alone is first come, first served: whoever opens connections first
//! keeps everybody else out for as long as it holds them. So when the
//! socket is full, a newcomer whose peer holds fewer connections than the
//! largest holder takes the place of that holder's longest-idle connection
//! (max-min fairness). A connection that is answering a request is never
//! taken, and only a person may take a person's connection or one of the
//! slots kept for persons.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
// tokio's clock: the tests of idle timeouts run it paused.
use tokio::sync::Notify;
use tokio::time::Instant;

/// Who holds a connection: connections with equal keys share one quota.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerKey(pub String);

/// What the caps need to know about a new connection's peer.
#[derive(Debug, Clone)]
pub struct Holder {
    /// Whose quota the connection counts against.
    pub key: PeerKey,
    /// A person: may take the slots kept for persons.
    pub person: bool,
}

/// The caps of one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Connections open at once, over all peers.
    pub max_conns: usize,
    /// Connections open at once by one peer.
    pub per_peer: usize,
    /// Of `max_conns`, slots only a person may take.
    pub reserved: usize,
}

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its peer already holds `per_peer` connections.
    PeerFull,
    /// Every slot it may take is held, and none can be given up for it.
    SocketFull,
}

/// One connection's activity, shared by its task and the table.
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    busy: AtomicBool,
    /// Milliseconds from `epoch` to the last request received or answered.
    last_ms: AtomicU64,
    /// The socket's activity counter when this connection last did
    /// something: which of two connections was idle longer is decided by
    /// this order, never by a clock (two connections may act within one
    /// tick of any clock).
    last_seq: AtomicU64,
    seq: Arc<AtomicU64>,
    evicted: Notify,
}

impl Activity {
    fn new(seq: Arc<AtomicU64>) -> Activity {
        Activity {
            epoch: Instant::now(),
            busy: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
            last_seq: AtomicU64::new(seq.fetch_add(1, Ordering::Relaxed)),
            seq,
            evicted: Notify::new(),
        }
    }

    /// Records a request received or answered (blank lines are not).
    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        self.last_seq.store(n, Ordering::Relaxed);
    }

    /// Where the connection's last activity stands in the socket's order
    /// (smaller: longer ago); `None` while it answers a request.
    fn idle_since(&self) -> Option<u64> {
        if self.busy.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.last_seq.load(Ordering::Relaxed))
    }

    /// Marks the connection as answering a request (never idle meanwhile).
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
    }

    /// How long the connection has done nothing; `None` while it answers a
    /// request.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.busy.load(Ordering::Relaxed) {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Some(self.epoch.elapsed().saturating_sub(last))
    }

    /// Completes when the connection's slot was given to another peer.
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }
}

struct Conn {
    key: PeerKey,
    person: bool,
    activity: Arc<Activity>,
}

/// What to do with a newcomer.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Admit,
    /// Admit after closing this connection.
    Evict(u64),
    Refuse(Refusal),
}

#[derive(Default)]
struct Table {
    next_id: u64,
    /// The activity order shared by every connection of the socket.
    seq: Arc<AtomicU64>,
    conns: HashMap<u64, Conn>,
    per_key: HashMap<PeerKey, usize>,
}

impl Table {
    fn held_by(&self, key: &PeerKey) -> usize {
        self.per_key.get(key).copied().unwrap_or(0)
    }

    fn decide(&self, caps: &Caps, newcomer: &Holder) -> Decision {
        let held = self.held_by(&newcomer.key);
        if held >= caps.per_peer {
            return Decision::Refuse(Refusal::PeerFull);
        }
        let room = if newcomer.person {
            caps.max_conns
        } else {
            caps.max_conns.saturating_sub(caps.reserved)
        };
        if self.conns.len() < room {
            return Decision::Admit;
        }
        // The longest-idle connection of the largest holder that holds
        // more than the newcomer would give up.
        let victim = self
            .conns
            .iter()
            .filter(|(_, c)| newcomer.person || !c.person)
            .filter_map(|(id, c)| {
                let count = self.held_by(&c.key);
                let since = c.activity.idle_since()?;
                (count > held).then_some((count, std::cmp::Reverse(since), *id))
            })
            .max();
        match victim {
            Some((_, _, id)) => Decision::Evict(id),
            None => Decision::Refuse(Refusal::SocketFull),
        }
    }

    fn insert(&mut self, holder: Holder) -> (u64, Arc<Activity>) {
        let id = self.next_id;
        self.next_id += 1;
        let activity = Arc::new(Activity::new(self.seq.clone()));
        *self.per_key.entry(holder.key.clone()).or_insert(0) += 1;
        self.conns.insert(
            id,
            Conn {
                key: holder.key,
                person: holder.person,
                activity: activity.clone(),
            },
        );
        (id, activity)
    }

    fn remove(&mut self, id: u64) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        if let Some(n) = self.per_key.get_mut(&c.key) {
            *n -= 1;
            if *n == 0 {
                self.per_key.remove(&c.key);
            }
        }
        Some(c)
    }
}

/// The connections of one socket.
pub struct Slots {
    caps: Caps,
    table: Mutex<Table>,
}

/// What admitting a connection did.
#[derive(Debug)]
pub struct Admitted {
    /// The newcomer's slot.
    pub slot: Slot,
    /// The peer whose idle connection was closed to make room, if any.
    pub evicted: Option<PeerKey>,
}

impl Slots {
    /// An empty table under `caps`.
    pub fn new(caps: Caps) -> Arc<Slots> {
        Arc::new(Slots {
            caps,
            table: Mutex::new(Table::default()),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table is consistent after every statement; a panic elsewhere
        // does not make it unusable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives `holder` a slot, closing another peer's idle connection when
    /// that is fair, or says why it gets none.
    pub fn admit(self: &Arc<Self>, holder: Holder) -> Result<Admitted, Refusal> {
        let mut t = self.table();
        let evicted = match t.decide(&self.caps, &holder) {
            Decision::Admit => None,
            Decision::Evict(id) => t.remove(id).map(|c| {
                c.activity.evicted.notify_one();
                c.key
            }),
            Decision::Refuse(r) => return Err(r),
        };
        let (id, activity) = t.insert(holder);
        Ok(Admitted {
            slot: Slot {
                slots: self.clone(),
                id,
                activity,
            },
            evicted,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.table().conns.len()
    }
}

/// A connection's place in the table; dropping it frees the place.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// The connection's activity.
    pub activity: Arc<Activity>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // An evicted connection was removed when it was chosen.
        self.slots.table().remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(key: &str, person: bool) -> Holder {
        Holder {
            key: PeerKey(key.into()),
            person,
        }
    }

    const CAPS: Caps = Caps {
        max_conns: 6,
        per_peer: 4,
        reserved: 2,
    };

    #[test]
    fn a_peer_gets_no_more_than_its_cap() {
        let s = Slots::new(CAPS);
        let held: Vec<_> = (0..4)
            .map(|_| s.admit(holder("a", false)).unwrap())
            .collect();
        assert_eq!(s.admit(holder("a", false)).unwrap_err(), Refusal::PeerFull);
        drop(held);
        assert_eq!(s.open(), 0);
        assert!(s.admit(holder("a", false)).is_ok());
    }

    #[test]
    fn the_reserved_slots_are_for_persons_only() {
        let s = Slots::new(CAPS);
        let _a: Vec<_> = (0..2)
            .map(|_| s.admit(holder("a", false)).unwrap())
            .collect();
        let _b: Vec<_> = (0..2)
            .map(|_| s.admit(holder("b", false)).unwrap())
            .collect();
        // 4 of 6 taken: an AI peer holding none gets only an idle
        // connection of a larger holder; a person gets a reserved slot.
        let c = s.admit(holder("c", false)).unwrap();
        assert!(c.evicted.is_some());
        assert_eq!(s.open(), 4);
        let p = s.admit(holder("p", true)).unwrap();
        assert!(p.evicted.is_none());
        assert_eq!(s.open(), 5);
    }

    #[test]
    fn a_full_socket_takes_the_largest_holders_idle_connection() {
        let caps = Caps {
            max_conns: 4,
            per_peer: 4,
            reserved: 0,
        };
        let s = Slots::new(caps);
        let a: Vec<_> = (0..3)
            .map(|_| s.admit(holder("a", false)).unwrap())
            .collect();
        let b = s.admit(holder("b", false)).unwrap();
        // Only a's first connection is idle; the others are answering.
        a[1].slot.activity.set_busy(true);
        a[2].slot.activity.set_busy(true);
        let c = s.admit(holder("c", false)).unwrap();
        assert_eq!(c.evicted, Some(PeerKey("a".into())));
        assert_eq!(s.open(), 4);
        // Now a holds 2 (busy), b and c 1 each: d takes the longest-idle
        // of those larger than it.
        let d = s.admit(holder("d", false)).unwrap();
        assert_eq!(d.evicted, Some(PeerKey("b".into())));
        // The largest holder takes nothing from itself.
        a[1].slot.activity.set_busy(false);
        assert_eq!(
            s.admit(holder("a", false)).unwrap_err(),
            Refusal::SocketFull
        );
        drop((b, c, d));
    }

    #[test]
    fn busy_connections_and_persons_are_not_taken_by_ai_peers() {
        let caps = Caps {
            max_conns: 3,
            per_peer: 3,
            reserved: 0,
        };
        let s = Slots::new(caps);
        let _p: Vec<_> = (0..3)
            .map(|_| s.admit(holder("p", true)).unwrap())
            .collect();
        assert_eq!(
            s.admit(holder("a", false)).unwrap_err(),
            Refusal::SocketFull
        );
        // Another person may take one of them.
        let q = s.admit(holder("q", true)).unwrap();
        assert_eq!(q.evicted, Some(PeerKey("p".into())));
    }

    #[test]
    fn an_evicted_connection_is_told_and_its_slot_freed_once() {
        let caps = Caps {
            max_conns: 1,
            per_peer: 1,
            reserved: 0,
        };
        let s = Slots::new(caps);
        let a = s.admit(holder("a", false)).unwrap();
        let b = s.admit(holder("b", false)).unwrap();
        assert_eq!(b.evicted, Some(PeerKey("a".into())));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(a.slot.activity.evicted());
        drop(a);
        assert_eq!(s.open(), 1, "dropping an evicted slot frees nothing more");
    }

    #[test]
    fn the_connection_that_acted_last_is_kept() {
        let caps = Caps {
            max_conns: 2,
            per_peer: 2,
            reserved: 0,
        };
        let s = Slots::new(caps);
        let a0 = s.admit(holder("a", false)).unwrap();
        let a1 = s.admit(holder("a", false)).unwrap();
        // Within the same clock tick: the order alone says a0 acted last.
        a0.slot.activity.touch();
        let b = s.admit(holder("b", false)).unwrap();
        assert_eq!(b.evicted, Some(PeerKey("a".into())));
        assert_eq!(s.open(), 2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(a1.slot.activity.evicted());
        drop((a0, a1, b));
    }

    #[test]
    fn a_connection_answering_a_request_is_not_idle() {
        let a = Activity::new(Arc::default());
        assert!(a.idle_for().is_some());
        a.set_busy(true);
        assert_eq!(a.idle_for(), None);
        a.set_busy(false);
        a.touch();
        assert!(a.idle_for().unwrap() < Duration::from_secs(60));
    }
}
