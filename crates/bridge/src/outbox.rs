//! The outbox reader: drains every `<agent>:<source>:outbox` of the
//! configured agents and sources with the consumer group `bridge`.
//!
//! One task reads, with one blocking multi-stream `XREADGROUP … BLOCK`
//! whose timeout is also how soon a new set of outboxes (after a reload) is
//! taken up; each outbox has a worker ([`crate::delivery`]) that delivers
//! its entries in order. The reader hands a worker at most two batches at a
//! time, so a slow sink holds back only its own outbox, and memory stays
//! bounded.
//!
//! At-least-once: an entry is acknowledged only by its worker, after
//! delivery. When an outbox is taken up (at start, or when a reload adds
//! it) the reader first reads this consumer's own pending entries (id `0`:
//! what a killed bridge had read but not acknowledged) before any new one;
//! and every `claim_idle_ms` it claims entries pending that long with any
//! consumer (XAUTOCLAIM), e.g. after the consumer name changed.

use crate::conn::{ensure_group, is_nogroup};
use crate::delivery::{run_worker, DeliveryContext, OutboxStream, GROUP};
use crate::entries::{parse_autoclaim, parse_read, Entry};
use oxidepm_lanes::StreamKey;
use redis::aio::ConnectionManager;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

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
}

/// The reader.
pub struct Reader {
    ctx: Arc<DeliveryContext>,
    /// A connection of its own: a blocking read holds it.
    con: ConnectionManager,
    plan_rx: watch::Receiver<OutboxPlan>,
    plan: OutboxPlan,
    drained: BTreeMap<String, Drained>,
    workers: JoinSet<()>,
    last_claim: Option<Instant>,
    error_wait: Duration,
}

impl Reader {
    /// A reader over `con` (used for nothing else) for the plans of `plan_rx`.
    pub fn new(
        ctx: Arc<DeliveryContext>,
        con: ConnectionManager,
        plan_rx: watch::Receiver<OutboxPlan>,
    ) -> Reader {
        let plan = plan_rx.borrow().clone();
        Reader {
            ctx,
            con,
            plan_rx,
            plan: OutboxPlan {
                outboxes: Vec::new(),
                ..plan
            },
            drained: BTreeMap::new(),
            workers: JoinSet::new(),
            last_claim: None,
            error_wait: Duration::from_millis(100),
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
        let claim_due = self
            .last_claim
            .is_none_or(|t| t.elapsed() >= self.plan.claim_idle / 2);
        if claim_due {
            self.last_claim = Some(Instant::now());
            self.ensure_groups().await;
            self.claim_idle().await;
        }
        let room = |d: &Drained| d.ready && d.stream.queued() <= self.plan.batch;
        let recovering: Vec<String> = self
            .drained
            .iter()
            .filter(|(_, d)| d.cursor.is_some() && room(d))
            .map(|(k, _)| k.clone())
            .collect();
        if !recovering.is_empty() {
            self.read(&recovering, false).await;
            return;
        }
        let fresh: Vec<String> = self
            .drained
            .iter()
            .filter(|(_, d)| d.cursor.is_none() && room(d))
            .map(|(k, _)| k.clone())
            .collect();
        if fresh.is_empty() {
            self.idle(self.plan.block).await;
            return;
        }
        // Block only when every outbox is being read: a blocked read would
        // not see room freed in a full one.
        let block = fresh.len() == self.drained.len();
        let got = self.read(&fresh, block).await;
        if !block && got == 0 {
            self.idle(Duration::from_millis(20)).await;
        }
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
        let plan = self.plan_rx.borrow_and_update().clone();
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

    /// Creates the group of every outbox that lacks one.
    async fn ensure_groups(&mut self) {
        for (key, d) in self.drained.iter_mut().filter(|(_, d)| !d.ready) {
            match ensure_group(&mut self.con, key, GROUP).await {
                Ok(()) => d.ready = true,
                Err(e) => log::error!("cannot create consumer group {GROUP} on {key}: {e}"),
            }
        }
    }

    /// Claims entries idle for `claim_idle` with any consumer.
    async fn claim_idle(&mut self) {
        let idle_ms = self.plan.claim_idle.as_millis().to_string();
        let keys: Vec<String> = self
            .drained
            .iter()
            .filter(|(_, d)| d.ready && d.stream.queued() <= self.plan.batch)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(d) = self.drained.get_mut(&key) else {
                continue;
            };
            let reply: redis::RedisResult<redis::Value> = redis::cmd("XAUTOCLAIM")
                .arg(&key)
                .arg(GROUP)
                .arg(&self.plan.consumer)
                .arg(&idle_ms)
                .arg(&d.claim_cursor)
                .arg("COUNT")
                .arg(self.plan.batch)
                .query_async(&mut self.con)
                .await;
            match reply.map(|v| parse_autoclaim(&v)) {
                Ok(Ok((next, entries))) => {
                    if !entries.is_empty() {
                        log::info!("{key}: claimed {} idle pending entries", entries.len());
                    }
                    d.claim_cursor = next;
                    dispatch(d, entries);
                }
                Ok(Err(e)) => log::warn!("XAUTOCLAIM {key}: {e}"),
                Err(e) => log::warn!("XAUTOCLAIM {key}: {e}"),
            }
        }
    }

    /// One XREADGROUP over `keys`: their pending entries (from their
    /// cursors) when `block` is false and they are recovering, else new
    /// entries. Returns the number of entries read.
    async fn read(&mut self, keys: &[String], block: bool) -> usize {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.plan.consumer)
            .arg("COUNT")
            .arg(self.plan.batch);
        if block {
            cmd.arg("BLOCK").arg(self.plan.block.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(keys);
        for k in keys {
            let id = self
                .drained
                .get(k)
                .and_then(|d| d.cursor.clone())
                .unwrap_or_else(|| ">".into());
            cmd.arg(id);
        }
        let reply: redis::RedisResult<redis::Value> = cmd.query_async(&mut self.con).await;
        let reply = match reply {
            Ok(v) => v,
            Err(e) if is_nogroup(&e) => {
                // The stream (and its group) was deleted: make them again
                // and start over from the pending entries.
                log::warn!("a consumer group is missing ({e}); creating it again");
                for k in keys {
                    if let Some(d) = self.drained.get_mut(k) {
                        d.ready = false;
                        d.cursor = Some("0".into());
                    }
                }
                self.ensure_groups().await;
                return 0;
            }
            Err(e) => {
                log::warn!(
                    "reading the outboxes failed: {e}; trying again in {:?}",
                    self.error_wait
                );
                tokio::time::sleep(self.error_wait).await;
                self.error_wait = (self.error_wait * 2).min(Duration::from_secs(2));
                return 0;
            }
        };
        self.error_wait = Duration::from_millis(100);
        let streams = match parse_read(&reply) {
            Ok(s) => s,
            Err(e) => {
                log::error!("{e}");
                return 0;
            }
        };
        let mut n = 0;
        let mut seen: Vec<&String> = Vec::new();
        for (key, entries) in streams {
            let Some(d) = self.drained.get_mut(&key) else {
                continue;
            };
            n += entries.len();
            if d.cursor.is_some() {
                if !entries.is_empty() {
                    log::info!(
                        "{key}: {} entries already pending with {} are delivered again",
                        entries.len(),
                        self.plan.consumer
                    );
                }
                match entries.last() {
                    Some(last) => d.cursor = Some(last.id.clone()),
                    None => d.cursor = None,
                }
            }
            dispatch(d, entries);
            if let Some(k) = keys.iter().find(|k| **k == key) {
                seen.push(k);
            }
        }
        // A recovering outbox absent from the reply has no pending entry
        // left.
        for k in keys {
            if !seen.contains(&k) {
                if let Some(d) = self.drained.get_mut(k) {
                    d.cursor = None;
                }
            }
        }
        n
    }
}

fn dispatch(d: &Drained, entries: Vec<Entry>) {
    for e in entries {
        if !d.stream.push(&d.tx, e) {
            log::warn!("{}: its worker is gone; entries stay pending", d.stream.key);
            return;
        }
    }
}
