//! The event bus: what the daemon records, fanned out as it happens to the
//! live subscribers (`subscribe`, `events --follow`).
//!
//! The publisher never waits: each subscriber has its own queue, bounded in
//! records and bytes, filled under a short lock and drained by the
//! subscriber's task. A record that does not fit is dropped for that
//! subscriber only and counted into a gap marker, which the subscriber
//! receives in its place (never a silent gap). With no subscriber a
//! publish costs one lock and nothing else. Who may see what is decided by
//! the filter each subscriber brings; the bus knows nothing of callers.

use oxidepm_proto::{AuditRecord, EventRecord};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// Records one subscriber may hold queued, unread.
pub const QUEUE_RECORDS: usize = 1024;
/// Bytes (roughly, as encoded) one subscriber may hold queued, unread.
pub const QUEUE_BYTES: usize = 256 * 1024;
/// Subscribers at once, over both sockets.
pub const MAX_SUBSCRIBERS: usize = 64;

/// One published record.
#[derive(Debug)]
pub enum Published {
    /// A lifecycle event, with the tags its app had (for grants by `@tag`).
    Event {
        /// The event as `events` shows it.
        record: EventRecord,
        /// The app's tags when it happened.
        tags: Vec<String>,
    },
    /// A refused request, as audited.
    Refusal(AuditRecord),
}

impl Published {
    /// Roughly the bytes the record takes once encoded.
    fn weight(&self) -> usize {
        const FIXED: usize = 160;
        match self {
            Published::Event { record, tags } => {
                FIXED
                    + record.app.len()
                    + record.detail.len()
                    + record.actor.label.len()
                    + tags.iter().map(|t| t.len() + 3).sum::<usize>()
            }
            Published::Refusal(a) => {
                FIXED
                    + a.message.len()
                    + a.actor.label.len()
                    + a.apps.iter().map(|n| n.len() + 3).sum::<usize>()
            }
        }
    }
}

/// What a subscriber receives next.
#[derive(Debug)]
pub enum Next {
    /// A record.
    Record(Arc<Published>),
    /// This many records were dropped here: the subscriber was too slow.
    Missed(u64),
}

/// Whether a subscriber wants (and may see) a record.
pub type Filter = Box<dyn Fn(&Published) -> bool + Send + Sync>;

/// Of `MAX_SUBSCRIBERS`, places only a person may take (as connection
/// slots are kept for persons): apps and agents cannot take them all.
pub const KEPT_FOR_PERSONS: usize = 8;
/// Subscribers at once of one peer (its quota key, as for connections).
pub const MAX_PER_PEER: usize = 4;

/// Why a subscription was not made.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    /// Every subscriber slot is taken.
    #[error("{MAX_SUBSCRIBERS} subscribers are already streaming; close one (or poll `events`) and try again")]
    All,
    /// The peer already holds its share.
    #[error("{MAX_PER_PEER} subscriptions of {0} are already streaming; close one and try again")]
    Peer(String),
}

enum Entry {
    Record(Arc<Published>),
    Gap(u64),
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    records: usize,
    bytes: usize,
}

struct Subscriber {
    owner: String,
    filter: Filter,
    queue: Mutex<Queue>,
    ready: Notify,
}

impl Subscriber {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A queue is only pushed to and popped from: whatever a panic
        // elsewhere left in it is still whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fan-out of published records to the subscribers.
#[derive(Default)]
pub struct Bus {
    subscribers: Mutex<Vec<Arc<Subscriber>>>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bus({} subscribers)", self.subscribers().len())
    }
}

impl Bus {
    /// A bus without subscribers.
    pub fn new() -> Arc<Bus> {
        Arc::new(Bus::default())
    }

    fn subscribers(&self) -> MutexGuard<'_, Vec<Arc<Subscriber>>> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `record` to every subscriber whose filter takes it; never
    /// waits for any of them.
    pub fn publish(&self, record: Published) {
        let subs = self.subscribers();
        if subs.is_empty() {
            return;
        }
        let weight = record.weight();
        let record = Arc::new(record);
        for s in subs.iter() {
            if !(s.filter)(&record) {
                continue;
            }
            let mut q = s.queue();
            if q.records >= QUEUE_RECORDS || q.bytes + weight > QUEUE_BYTES {
                match q.entries.back_mut() {
                    Some(Entry::Gap(n)) => *n += 1,
                    _ => q.entries.push_back(Entry::Gap(1)),
                }
            } else {
                q.records += 1;
                q.bytes += weight;
                q.entries.push_back(Entry::Record(record.clone()));
            }
            drop(q);
            s.ready.notify_one();
        }
    }

    /// Adds a subscriber of `owner` (whose quota it counts against; a
    /// `person` may take the places kept for persons) that receives what
    /// `filter` takes from now on; it is removed when the returned handle
    /// is dropped.
    pub fn subscribe(
        self: &Arc<Self>,
        owner: &str,
        person: bool,
        filter: Filter,
    ) -> Result<Subscription, Full> {
        let mut subs = self.subscribers();
        let cap = if person {
            MAX_SUBSCRIBERS
        } else {
            MAX_SUBSCRIBERS - KEPT_FOR_PERSONS
        };
        if subs.len() >= cap {
            return Err(Full::All);
        }
        if subs.iter().filter(|s| s.owner == owner).count() >= MAX_PER_PEER {
            return Err(Full::Peer(owner.to_string()));
        }
        let sub = Arc::new(Subscriber {
            owner: owner.to_string(),
            filter,
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        });
        subs.push(sub.clone());
        Ok(Subscription {
            bus: self.clone(),
            sub,
        })
    }
}

/// One subscriber's end: its records, in the order they were published.
pub struct Subscription {
    bus: Arc<Bus>,
    sub: Arc<Subscriber>,
}

impl Subscription {
    /// The next record or gap marker, waiting for one.
    pub async fn next(&self) -> Next {
        loop {
            if let Some(n) = self.try_next() {
                return n;
            }
            self.sub.ready.notified().await;
        }
    }

    /// The next record or gap marker, if one is queued.
    pub fn try_next(&self) -> Option<Next> {
        let mut q = self.sub.queue();
        match q.entries.pop_front()? {
            Entry::Gap(n) => Some(Next::Missed(n)),
            Entry::Record(r) => {
                q.records -= 1;
                q.bytes -= r.weight();
                Some(Next::Record(r))
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.bus
            .subscribers()
            .retain(|s| !Arc::ptr_eq(s, &self.sub));
    }
}

/// Each agent's subscription through its `ops` lane (one at most: a new
/// one replaces the old), drained into its `ops` inbox by the lane's
/// worker.
#[derive(Clone, Default)]
pub struct Feeds {
    by_agent: Arc<Mutex<std::collections::HashMap<String, Subscription>>>,
}

impl Feeds {
    fn map(&self) -> MutexGuard<'_, std::collections::HashMap<String, Subscription>> {
        self.by_agent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets `agent`'s subscription, ending the one it had.
    pub fn set(&self, agent: &str, sub: Subscription) {
        self.map().insert(agent.to_string(), sub);
    }

    /// Ends `agent`'s subscription, if any.
    pub fn remove(&self, agent: &str) {
        self.map().remove(agent);
    }

    /// Up to `max` records (or gap markers) queued for `agent`.
    pub fn drain(&self, agent: &str, max: usize) -> Vec<Next> {
        let map = self.map();
        let Some(sub) = map.get(agent) else {
            return Vec::new();
        };
        std::iter::from_fn(|| sub.try_next()).take(max).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_proto::{Actor, EventKind};

    fn event(app: &str, seq: u64) -> Published {
        Published::Event {
            record: EventRecord {
                seq,
                at: String::new(),
                app_id: 1,
                app: app.into(),
                kind: EventKind::Started,
                actor: Actor::system("test"),
                detail: String::new(),
            },
            tags: Vec::new(),
        }
    }

    fn seq(n: Next) -> u64 {
        match n {
            Next::Record(r) => match &*r {
                Published::Event { record, .. } => record.seq,
                Published::Refusal(_) => panic!("refusal"),
            },
            Next::Missed(m) => panic!("missed {m}"),
        }
    }

    #[test]
    fn a_full_queue_ends_in_one_gap_marker_then_goes_on() {
        let bus = Bus::new();
        let sub = bus.subscribe("p", true, Box::new(|_| true)).unwrap();
        let over = 10;
        for i in 0..(QUEUE_RECORDS + over) as u64 {
            bus.publish(event("web", i));
        }
        for i in 0..QUEUE_RECORDS as u64 {
            assert_eq!(seq(sub.try_next().unwrap()), i);
        }
        assert!(matches!(sub.try_next(), Some(Next::Missed(n)) if n == over as u64));
        assert!(sub.try_next().is_none());
        bus.publish(event("web", 9999));
        assert_eq!(seq(sub.try_next().unwrap()), 9999);
    }

    #[test]
    fn filters_decide_and_a_dropped_subscription_is_removed() {
        let bus = Bus::new();
        let sub = bus
            .subscribe(
                "p",
                true,
                Box::new(|p| matches!(p, Published::Event { record, .. } if record.app == "web")),
            )
            .unwrap();
        bus.publish(event("db", 1));
        bus.publish(event("web", 2));
        assert_eq!(seq(sub.try_next().unwrap()), 2);
        assert!(sub.try_next().is_none());
        drop(sub);
        assert!(bus.subscribers().is_empty());
    }

    #[test]
    fn subscribers_are_bounded_per_peer_and_in_all() {
        let bus = Bus::new();
        let all = |_: &Published| true;
        let mine: Vec<_> = (0..MAX_PER_PEER)
            .map(|_| bus.subscribe("me", false, Box::new(all)).unwrap())
            .collect();
        assert!(matches!(
            bus.subscribe("me", false, Box::new(all)),
            Err(Full::Peer(_))
        ));
        let others: Vec<_> = (MAX_PER_PEER..MAX_SUBSCRIBERS - KEPT_FOR_PERSONS)
            .map(|i| {
                bus.subscribe(&format!("p{i}"), false, Box::new(all))
                    .unwrap()
            })
            .collect();
        assert!(matches!(
            bus.subscribe("app", false, Box::new(all)),
            Err(Full::All)
        ));
        let persons: Vec<_> = (0..KEPT_FOR_PERSONS)
            .map(|i| {
                bus.subscribe(&format!("person{i}"), true, Box::new(all))
                    .unwrap()
            })
            .collect();
        assert!(matches!(
            bus.subscribe("person", true, Box::new(all)),
            Err(Full::All)
        ));
        drop(persons);
        drop(others);
        drop(mine);
        assert!(bus.subscribe("me", false, Box::new(all)).is_ok());
    }
}
