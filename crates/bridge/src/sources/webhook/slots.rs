//! The webhook's connections: a cap over all of them and one per source
//! address, where a connection that has not yet sent the token gives way.
//!
//! A cap alone lets whoever connects first hold every slot without ever
//! authenticating. So a newcomer that finds its address's share or the
//! whole listener full takes the place of the oldest connection that has
//! not yet carried a request with the right token (from its own address
//! when its address is at its cap; else from the address holding the
//! most). A connection that has authenticated keeps its place.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Notify;

/// The caps in force when a connection arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Connections open at once.
    pub max: usize,
    /// Connections open at once from one address.
    pub per_ip: usize,
}

/// A connection that has not shown the token yet.
const FRESH: u8 = 0;
/// A connection that has shown the token: it keeps its place.
const AUTHENTICATED: u8 = 1;
/// A connection whose place was given to a newcomer.
const EVICTED: u8 = 2;

/// One connection, as its task and the table see it.
#[derive(Debug)]
pub struct ConnState {
    accepted: Instant,
    /// [`FRESH`], [`AUTHENTICATED`] or [`EVICTED`]: the one change from
    /// fresh decides between a request taken and a place given away, so a
    /// request is never taken on a connection that is then closed before
    /// it is answered (its sender would send it again).
    stage: AtomicU8,
    evicted: Notify,
}

impl ConnState {
    /// Marks the connection as having sent a request with the right token;
    /// false when its place was given away first (the request must not be
    /// taken: the connection is closing).
    pub fn authenticated(&self) -> bool {
        match self
            .stage
            .compare_exchange(FRESH, AUTHENTICATED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == AUTHENTICATED,
        }
    }

    /// Whether it has sent a request with the right token.
    pub fn is_authenticated(&self) -> bool {
        self.stage.load(Ordering::Acquire) == AUTHENTICATED
    }

    /// Gives the place away, unless the connection authenticated first.
    fn evict(&self) -> bool {
        self.stage
            .compare_exchange(FRESH, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Completes when the connection's slot was given to a newcomer.
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }
}

struct Conn {
    ip: IpAddr,
    state: Arc<ConnState>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    conns: HashMap<u64, Conn>,
    per_ip: HashMap<IpAddr, usize>,
}

impl Table {
    fn held_by(&self, ip: &IpAddr) -> usize {
        self.per_ip.get(ip).copied().unwrap_or(0)
    }

    /// The oldest unauthenticated connection among those `from` allows.
    fn oldest_unauthenticated(&self, from: impl Fn(&IpAddr) -> bool) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| from(&c.ip) && !c.state.is_authenticated())
            .min_by_key(|(id, c)| (c.state.accepted, **id))
            .map(|(id, _)| *id)
    }

    /// The oldest unauthenticated connection of the address that holds
    /// the most connections among those that have one.
    fn oldest_of_the_largest(&self) -> Option<u64> {
        let mut oldest: HashMap<IpAddr, (Instant, u64)> = HashMap::new();
        for (id, c) in &self.conns {
            if c.state.is_authenticated() {
                continue;
            }
            let this = (c.state.accepted, *id);
            let e = oldest.entry(c.ip).or_insert(this);
            *e = (*e).min(this);
        }
        oldest
            .into_iter()
            .max_by_key(|(ip, _)| self.held_by(ip))
            .map(|(_, (_, id))| id)
    }

    fn remove(&mut self, id: u64) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        if let Some(n) = self.per_ip.get_mut(&c.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&c.ip);
            }
        }
        Some(c)
    }
}

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its address holds its share, all authenticated.
    AddressFull,
    /// The listener is full of authenticated connections.
    Full,
}

/// The listener's connections.
#[derive(Default)]
pub struct Slots {
    table: Mutex<Table>,
}

impl Slots {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Every statement leaves the table consistent: a poisoned lock is
        // still a usable table.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives a connection from `ip` a slot under `caps`, closing an
    /// unauthenticated one when that is what makes room.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, caps: Caps) -> Result<Slot, Refusal> {
        let ip = ip.to_canonical();
        let mut t = self.table();
        // A candidate that authenticates while it is chosen keeps its
        // place, and the next one is chosen.
        while t.held_by(&ip) >= caps.per_ip {
            let id = t
                .oldest_unauthenticated(|a| *a == ip)
                .ok_or(Refusal::AddressFull)?;
            evict(&mut t, id);
        }
        while t.conns.len() >= caps.max {
            let id = t.oldest_of_the_largest().ok_or(Refusal::Full)?;
            evict(&mut t, id);
        }
        let id = t.next_id;
        t.next_id += 1;
        let state = Arc::new(ConnState {
            accepted: Instant::now(),
            stage: AtomicU8::new(FRESH),
            evicted: Notify::new(),
        });
        *t.per_ip.entry(ip).or_insert(0) += 1;
        t.conns.insert(
            id,
            Conn {
                ip,
                state: state.clone(),
            },
        );
        Ok(Slot {
            slots: self.clone(),
            id,
            state,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.table().conns.len()
    }
}

/// Closes connection `id` if it has still not authenticated; otherwise it
/// stays (and is no longer a candidate).
fn evict(t: &mut Table, id: u64) {
    let Some(c) = t.conns.get(&id) else { return };
    if !c.state.evict() {
        return;
    }
    if let Some(c) = t.remove(id) {
        c.state.evicted.notify_one();
    }
}

/// A connection's place; dropping it frees the place.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// The connection's state.
    pub state: Arc<ConnState>,
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

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    const CAPS: Caps = Caps { max: 4, per_ip: 2 };

    #[test]
    fn an_address_at_its_cap_gives_way_only_from_its_unauthenticated_connections() {
        let s = Arc::new(Slots::default());
        let a1 = s.admit(ip(1), CAPS).unwrap();
        let a2 = s.admit(ip(1), CAPS).unwrap();
        a2.state.authenticated();
        // The third from 127.0.0.1 takes a1's place (never authenticated).
        let a3 = s.admit(ip(1), CAPS).unwrap();
        assert_eq!(s.open(), 2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(a1.state.evicted());
        a3.state.authenticated();
        assert_eq!(s.admit(ip(1), CAPS).err(), Some(Refusal::AddressFull));
        drop(a1);
        assert_eq!(s.open(), 2, "an evicted slot is freed once");
    }

    #[test]
    fn a_full_listener_takes_from_the_address_holding_the_most() {
        let s = Arc::new(Slots::default());
        let caps = Caps { max: 4, per_ip: 3 };
        let _a: Vec<_> = (0..3).map(|_| s.admit(ip(1), caps).unwrap()).collect();
        let b = s.admit(ip(2), caps).unwrap();
        let c = s.admit(ip(3), caps).unwrap();
        assert_eq!(s.open(), 4);
        assert!(!b.state.is_authenticated());
        // 127.0.0.1 held 3: one of its connections made room.
        drop(c);
        assert_eq!(s.open(), 3);
    }

    #[test]
    fn authenticated_connections_keep_their_place() {
        let s = Arc::new(Slots::default());
        let held: Vec<_> = (0..4)
            .map(|i| {
                let slot = s.admit(ip(i), CAPS).unwrap();
                slot.state.authenticated();
                slot
            })
            .collect();
        assert_eq!(s.admit(ip(9), CAPS).err(), Some(Refusal::Full));
        drop(held);
        assert_eq!(s.open(), 0);
    }
}
