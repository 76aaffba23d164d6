//! The outbox reader: drains every `<agent>:<source>:outbox` of the
//! configured agents and sources with the consumer group `bridge`.
//!
//! One task reads, over a connection of its own ([`crate::wire`]) on which
//! replies are read piece by piece: each outbox may hold at most
//! `buffer_bytes` of entries in the bridge (read, not yet done; one entry
//! more when it alone is larger), and no entry over `max_entry_bytes` is
//! ever kept — it is dead-lettered unread. What a read brings past an
//! outbox's budget is skipped and stays pending; the reader reads it again,
//! in order, once there is room. Every outbox has a worker
//! ([`crate::delivery`]) that delivers its entries in order, so a slow sink
//! or one agent's backlog holds back only its own outbox.
//!
//! Fairness: every read starts from the next outbox in turn, and outboxes
//! whose entries are large are read one entry at a time, in a read of
//! their own that alternates with the others'. The blocking
//! multi-stream `XREADGROUP … BLOCK` (whose timeout is also how soon a new
//! set of outboxes is taken up after a reload) is used only when every
//! outbox is waiting for new entries.
//!
//! At-least-once: an entry is acknowledged only by its worker, after
//! delivery. When an outbox is taken up (at start, or when a reload adds
//! it), after a failed read, and for entries skipped over budget, the
//! reader reads this consumer's own pending entries (from a cursor) before
//! new ones; every `claim_idle_ms` it claims entries pending that long with
//! any consumer (XAUTOCLAIM), e.g. after the consumer name changed.

use crate::conn::RedisTarget;
use crate::delivery::{run_worker, DeliveryContext, OutboxStream, GROUP};
use crate::entries::{cmp_ids, read_streams, Budget, Entry, EntryId, Seen};
use crate::wire::{Small, Wire, WireError};
use oxidepm_lanes::redis_url::HostPort;
use oxidepm_lanes::{AgentName, StreamKey};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Bound on one command other than a read.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on a read beyond its BLOCK time: a reply skipped over budget may
/// be large.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What the reader drains; a reload sends a new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxPlan {
    /// Every outbox.
    pub outboxes: Vec<StreamKey>,
    /// This bridge's consumer name.
    pub consumer: String,
    /// Timeout of the blocking read.
    pub block: Duration,
    /// Entries read per stream at once.
    pub batch: usize,
    /// Idle time after which pending entries are claimed.
    pub claim_idle: Duration,
    /// Largest entry kept, in bytes.
    pub max_entry_bytes: usize,
    /// Bytes of one outbox's entries held at once.
    pub buffer_bytes: usize,
}

/// The reader's view of one outbox.
struct Drained {
    stream: Arc<OutboxStream>,
    /// Its worker's queue.
    tx: mpsc::UnboundedSender<Entry>,
    /// `Some(id)` while its pending entries are being read again, from
    /// after `id`; `None` once only new entries are read.
    cursor: Option<String>,
    /// Whether its group exists (creating it may have failed).
    ready: bool,
    /// Where the next XAUTOCLAIM starts.
    claim_cursor: String,
    /// Whether its entries are large: it is read one entry at a time.
    large: bool,
}

/// The reader.
pub struct Reader {
    ctx: Arc<DeliveryContext>,
    target: RedisTarget,
    /// Its own connection (a blocking read holds it); `None` after an
    /// error, until it is made again.
    wire: Option<Wire>,
    /// On a cluster, the node its outboxes' slot was last said to be on
    /// (by a `MOVED`); `None`: a seed, which redirects.
    node: Option<HostPort>,
    /// On a cluster, the one agent whose outboxes this reader drains: a
    /// command's keys must share a slot, and an agent's keys share its
    /// hash tag's.
    only: Option<AgentName>,
    plan_rx: watch::Receiver<OutboxPlan>,
    plan: OutboxPlan,
    drained: BTreeMap<String, Drained>,
    workers: JoinSet<()>,
    last_claim: Option<Instant>,
    error_wait: Duration,
    /// Where the next read starts in the list of outboxes.
    turn: usize,
    /// Whether the last read was of the large outboxes.
    large_turn: bool,
}

impl Reader {
    /// A reader connecting to `target` for the plans of `plan_rx`.
    pub fn new(
        ctx: Arc<DeliveryContext>,
        target: RedisTarget,
        plan_rx: watch::Receiver<OutboxPlan>,
    ) -> Reader {
        Self::of_agent(ctx, target, plan_rx, None)
    }

    /// A reader of the outboxes of `only` (every agent's if `None`).
    pub fn of_agent(
        ctx: Arc<DeliveryContext>,
        target: RedisTarget,
        plan_rx: watch::Receiver<OutboxPlan>,
        only: Option<AgentName>,
    ) -> Reader {
        let plan = plan_rx.borrow().clone();
        Reader {
            ctx,
            target,
            wire: None,
            node: None,
            only,
            plan_rx,
            plan: OutboxPlan {
                outboxes: Vec::new(),
                ..plan
            },
            drained: BTreeMap::new(),
            workers: JoinSet::new(),
            last_claim: None,
            error_wait: Duration::from_millis(100),
            turn: 0,
            large_turn: false,
        }
    }

    /// Reads until the bridge stops; then waits up to `grace` for the
    /// workers to finish the delivery they are in.
    pub async fn run(mut self, grace: Duration) {
        let mut shutdown = self.ctx.shutdown.clone();
        self.take_plan().await;
        while !shutdown.is_set() {
            tokio::select! {
                _ = self.step() => {}
                _ = shutdown.wait() => break,
            }
        }
        // Workers stop after their current delivery; what they hold stays
        // pending in Redis.
        let _ = tokio::time::timeout(grace, async {
            while self.workers.join_next().await.is_some() {}
        })
        .await;
        self.workers.abort_all();
    }

    /// One round: take up a new plan, claim, read pending or new entries.
    async fn step(&mut self) {
        if self.plan_rx.has_changed().unwrap_or(false) {
            self.take_plan().await;
        }
        if !self.connected().await {
            return;
        }
        let claim_due = self
            .last_claim
            .is_none_or(|t| t.elapsed() >= self.plan.claim_idle / 2);
        if claim_due {
            self.last_claim = Some(Instant::now());
            self.ensure_groups().await;
            self.claim_idle().await;
        }
        let mut open: Vec<(&String, &Drained)> =
            self.drained.iter().filter(|(_, d)| self.room(d)).collect();
        if open.is_empty() {
            self.idle(self.plan.block).await;
            return;
        }
        // Round robin: a read's budget and Redis's reply order favour
        // the first streams named.
        let start = self.turn % open.len();
        open.rotate_left(start);
        self.turn = self.turn.wrapping_add(1);
        let (large, normal): (Vec<_>, Vec<_>) = open.into_iter().partition(|(_, d)| d.large);
        self.large_turn = !self.large_turn && !large.is_empty();
        let read_large = !large.is_empty() && (normal.is_empty() || self.large_turn);
        let (set, count) = if read_large {
            (large, 1)
        } else {
            (normal, self.plan.batch)
        };
        // Block only when every outbox waits for new entries: a blocked
        // read would not see room freed in a full one, nor pending ones.
        let block = !read_large
            && set.len() == self.drained.len()
            && set.iter().all(|(_, d)| d.cursor.is_none());
        let keys: Vec<String> = set.into_iter().map(|(k, _)| k.clone()).collect();
        let got = self.read(&keys, count, block).await;
        if !block && got == 0 {
            self.idle(Duration::from_millis(20)).await;
        }
    }

    /// Whether an outbox may be read: its group exists and its worker
    /// holds less than its budget.
    fn room(&self, d: &Drained) -> bool {
        d.ready && d.stream.queued() <= self.plan.batch && d.stream.bytes() < self.plan.buffer_bytes
    }

    /// Makes the connection if there is none; false (after a pause) if it
    /// cannot be made.
    async fn connected(&mut self) -> bool {
        if self.wire.is_some() {
            return true;
        }
        match tokio::time::timeout(
            COMMAND_TIMEOUT,
            Wire::connect(&self.target, self.node.as_ref()),
        )
        .await
        {
            Ok(Ok(w)) => {
                self.wire = Some(w);
                // What was read on the lost connection may be pending
                // unseen: read the pending entries again.
                for d in self.drained.values_mut() {
                    d.cursor = Some("0".into());
                    d.ready = false;
                }
                self.ensure_groups().await;
                true
            }
            Ok(Err(e)) => {
                self.node = None;
                self.failed(&format!("cannot connect to Redis: {e}")).await;
                false
            }
            Err(_) => {
                self.node = None;
                self.failed("cannot connect to Redis: no answer").await;
                false
            }
        }
    }

    /// Logs a failure and waits before the next try, longer each time.
    async fn failed(&mut self, what: &str) {
        log::warn!("{what}; trying again in {:?}", self.error_wait);
        tokio::time::sleep(self.error_wait).await;
        self.error_wait = (self.error_wait * 2).min(Duration::from_secs(2));
    }

    /// Waits for room in a worker, a new plan, or `at_most`.
    async fn idle(&mut self, at_most: Duration) {
        let ctx = self.ctx.clone();
        let new_plan = tokio::select! {
            _ = ctx.room.notified() => false,
            r = self.plan_rx.changed() => match r {
                Ok(()) => true,
                Err(_) => {
                    // No more plans: the bridge is stopping.
                    tokio::time::sleep(at_most).await;
                    false
                }
            },
            _ = tokio::time::sleep(at_most) => false,
        };
        if new_plan {
            self.take_plan().await;
        }
    }

    /// Makes the drained outboxes those of the newest plan.
    async fn take_plan(&mut self) {
        let mut plan = self.plan_rx.borrow_and_update().clone();
        if let Some(a) = &self.only {
            plan.outboxes.retain(|k| &k.agent == a);
        }
        let wanted: BTreeMap<String, &StreamKey> =
            plan.outboxes.iter().map(|k| (k.to_string(), k)).collect();
        // Removed outboxes: dropping the stream closes its worker's queue
        // once the worker has finished what it holds.
        self.drained.retain(|k, _| wanted.contains_key(k));
        for (key, outbox) in wanted {
            if self.drained.contains_key(&key) {
                continue;
            }
            let (stream, tx, rx) = OutboxStream::new(outbox);
            self.workers
                .spawn(run_worker(self.ctx.clone(), stream.clone(), rx));
            log::info!("draining {key}");
            self.drained.insert(
                key,
                Drained {
                    stream,
                    tx,
                    cursor: Some("0".into()),
                    ready: false,
                    claim_cursor: "0-0".into(),
                    large: false,
                },
            );
        }
        let consumer_changed = plan.consumer != self.plan.consumer;
        self.plan = plan;
        if consumer_changed {
            // Pending entries are per consumer: look again under the new name.
            for d in self.drained.values_mut() {
                d.cursor = Some("0".into());
            }
        }
        self.ensure_groups().await;
    }

    /// Sends one command and reads its whole (small) reply, within
    /// [`COMMAND_TIMEOUT`]; a connection out of step is dropped.
    async fn small(&mut self, args: &[&str]) -> Result<Small, WireError> {
        let Some(w) = self.wire.as_mut() else {
            return Err(WireError::Io(std::io::ErrorKind::NotConnected.into()));
        };
        let r = tokio::time::timeout(COMMAND_TIMEOUT, async {
            w.send(args).await?;
            w.small().await
        })
        .await
        .unwrap_or_else(|_| Err(WireError::Io(std::io::ErrorKind::TimedOut.into())));
        if r.as_ref().is_err_and(WireError::is_fatal) {
            self.wire = None;
        }
        if let Err(e) = &r {
            self.follow(e);
        }
        r
    }

    /// After a cluster's redirection, connects to the node it names next
    /// (the slot moved, or its primary failed over).
    fn follow(&mut self, e: &WireError) {
        if let Some(node) = e.redirect() {
            log::info!("the outboxes' slot is served by {node} now");
            self.node = Some(node);
            self.wire = None;
        }
    }

    /// Creates the group of every outbox that lacks one.
    async fn ensure_groups(&mut self) {
        if self.wire.is_none() {
            // Done once connected.
            return;
        }
        let keys: Vec<String> = self
            .drained
            .iter()
            .filter(|(_, d)| !d.ready)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let r = self
                .small(&["XGROUP", "CREATE", &key, GROUP, "0", "MKSTREAM"])
                .await;
            match r {
                Ok(_) => {}
                Err(WireError::Server(e)) if e.starts_with("BUSYGROUP") => {}
                Err(e) => {
                    log::error!("cannot create consumer group {GROUP} on {key}: {e}");
                    continue;
                }
            }
            if let Some(d) = self.drained.get_mut(&key) {
                d.ready = true;
            }
        }
    }

    /// Claims entries idle for `claim_idle` with any consumer. Only their
    /// ids are claimed; they are then read, under budget, as pending
    /// entries of this consumer.
    async fn claim_idle(&mut self) {
        let idle_ms = self.plan.claim_idle.as_millis().to_string();
        let count = self.plan.batch.to_string();
        let consumer = self.plan.consumer.clone();
        let keys: Vec<String> = self
            .drained
            .iter()
            .filter(|(_, d)| self.room(d))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(from) = self.drained.get(&key).map(|d| d.claim_cursor.clone()) else {
                continue;
            };
            let args = [
                "XAUTOCLAIM",
                &key,
                GROUP,
                &consumer,
                &idle_ms,
                &from,
                "COUNT",
                &count,
                "JUSTID",
            ];
            let reply = match self.small(&args).await {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("XAUTOCLAIM {key}: {e}");
                    continue;
                }
            };
            let parts = reply.items();
            let next = parts.first().and_then(Small::text);
            let ids: Vec<String> = parts
                .get(1)
                .map(|l| l.items().iter().filter_map(Small::text).collect())
                .unwrap_or_default();
            let Some(d) = self.drained.get_mut(&key) else {
                continue;
            };
            if let Some(next) = next {
                d.claim_cursor = next;
            }
            let Some(low) = ids.iter().min_by(|a, b| cmp_ids(a, b)) else {
                continue;
            };
            log::info!("{key}: claimed {} idle pending entries", ids.len());
            let from = EntryId::parse(low)
                .map(|i| i.pred().to_string())
                .unwrap_or_else(|| "0".into());
            d.cursor = Some(match d.cursor.take() {
                Some(c) if cmp_ids(&c, &from).is_le() => c,
                _ => from,
            });
        }
    }

    /// One XREADGROUP over `keys`: each outbox's pending entries from its
    /// cursor, or new entries; at most `count` per outbox and its budget
    /// of bytes. Returns the number of entries read.
    async fn read(&mut self, keys: &[String], count: usize, block: bool) -> usize {
        let mut args: Vec<String> = vec![
            "XREADGROUP".into(),
            "GROUP".into(),
            GROUP.into(),
            self.plan.consumer.clone(),
            "COUNT".into(),
            count.to_string(),
        ];
        if block {
            args.push("BLOCK".into());
            args.push(self.plan.block.as_millis().to_string());
        }
        args.push("STREAMS".into());
        args.extend(keys.iter().cloned());
        let mut budgets = HashMap::with_capacity(keys.len());
        for k in keys {
            let Some(d) = self.drained.get(k) else {
                continue;
            };
            args.push(d.cursor.clone().unwrap_or_else(|| ">".into()));
            budgets.insert(
                k.clone(),
                Budget {
                    room: self.plan.buffer_bytes.saturating_sub(d.stream.bytes()),
                    max_entry: self.plan.max_entry_bytes,
                    held: d.stream.held(),
                },
            );
        }
        let Some(w) = self.wire.as_mut() else {
            return 0;
        };
        let limit = if block {
            self.plan.block
        } else {
            Duration::ZERO
        } + READ_TIMEOUT;
        let reply = tokio::time::timeout(limit, async {
            w.send(&args).await?;
            read_streams(w, &budgets).await
        })
        .await
        .unwrap_or_else(|_| Err(WireError::Io(std::io::ErrorKind::TimedOut.into())));
        let streams = match reply {
            Ok(s) => s,
            Err(e) if e.is_nogroup() => {
                // The stream (and its group) was deleted: make them again
                // and start over from the pending entries.
                log::warn!("a consumer group is missing ({e}); creating it again");
                self.recover(keys);
                self.ensure_groups().await;
                return 0;
            }
            Err(e) if e.redirect().is_some() => {
                self.follow(&e);
                self.recover(keys);
                return 0;
            }
            Err(e) => {
                if e.is_fatal() {
                    self.wire = None;
                    // A cluster node that failed: start again from a seed.
                    self.node = None;
                    // Entries of the lost reply are pending, unseen.
                    self.recover(keys);
                }
                self.failed(&format!("reading the outboxes failed: {e}"))
                    .await;
                return 0;
            }
        };
        self.error_wait = Duration::from_millis(100);
        let mut n = 0;
        let mut seen_keys: Vec<String> = Vec::with_capacity(streams.len());
        for (key, seen) in streams {
            let Some(d) = self.drained.get_mut(&key) else {
                continue;
            };
            n += seen.len();
            took(d, seen, &self.plan);
            seen_keys.push(key);
        }
        // An outbox absent from the reply has nothing pending left, or
        // nothing new.
        for k in keys {
            if !seen_keys.contains(k) {
                if let Some(d) = self.drained.get_mut(k) {
                    d.cursor = None;
                    d.large = false;
                }
            }
        }
        n
    }

    /// Marks `keys` to be read again from their first pending entry.
    fn recover(&mut self, keys: &[String]) {
        for k in keys {
            if let Some(d) = self.drained.get_mut(k) {
                d.ready = false;
                d.cursor = Some("0".into());
            }
        }
    }
}

/// Takes what one read brought for outbox `d`: moves its cursor, judges
/// whether its entries are large, and hands the entries to its worker.
fn took(d: &mut Drained, seen: Vec<Seen>, plan: &OutboxPlan) {
    let recovering = d.cursor.is_some();
    let first_deferred = seen.iter().find_map(|s| match s {
        Seen::Deferred(id) => Some(id.clone()),
        _ => None,
    });
    let mut over = first_deferred.is_some();
    let mut biggest = 0;
    for s in &seen {
        if let Seen::Entry(e) = s {
            biggest = biggest.max(e.bytes);
            over |= e.bytes > plan.max_entry_bytes;
        }
    }
    // Entries this size would not fit `batch` at a time.
    d.large = over || biggest > plan.buffer_bytes / plan.batch.max(1);
    if let Some(id) = first_deferred {
        // Read again from just before the first one skipped.
        let from = EntryId::parse(&id)
            .map(|i| i.pred().to_string())
            .unwrap_or_else(|| "0".into());
        d.cursor = Some(from);
    } else if recovering {
        d.cursor = seen.last().map(|s| s.id().to_string());
    }
    let entries: Vec<Entry> = seen
        .into_iter()
        .filter_map(|s| match s {
            Seen::Entry(e) => Some(e),
            _ => None,
        })
        .collect();
    if recovering && !entries.is_empty() {
        log::info!(
            "{}: {} entries already pending with this consumer are delivered again",
            d.stream.key,
            entries.len()
        );
    }
    for e in entries {
        if !d.stream.push(&d.tx, e) {
            log::warn!("{}: its worker is gone; entries stay pending", d.stream.key);
            return;
        }
    }
}
