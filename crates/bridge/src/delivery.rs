//! One outbox's worker: delivers its entries one at a time, in order,
//! through the outbox's source; acknowledges each only after delivery;
//! retries with exponential backoff; moves an entry that keeps failing (or
//! fails permanently) to `<agent>:<source>:outbox:dead` with the error and
//! its original id, then acknowledges it.
//!
//! The agent of every delivery is the one named by the outbox key, never a
//! field of the entry.

use crate::config::RetryConfig;
use crate::entries::Entry;
use crate::source::{DeliveryError, Outbound, Shutdown, Source};
use crate::stats::Counter;
use oxidepm_lanes::stream_key::dead_letter;
use oxidepm_lanes::StreamKey;
use redis::aio::ConnectionManager;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify, Semaphore};

/// The consumer group every outbox is drained with.
pub const GROUP: &str = oxidepm_lanes::stream_key::BRIDGE_GROUP;

/// Settings a reload may change.
#[derive(Clone, Debug)]
pub struct DeliverySettings {
    /// Retries.
    pub retry: RetryConfig,
    /// Timeout of one delivery.
    pub deliver_timeout: Duration,
}

/// What every worker shares.
pub struct DeliveryContext {
    /// The shared (non-blocking) Redis connection.
    pub con: ConnectionManager,
    /// Source name → the source that delivers its outboxes.
    pub deliverers: RwLock<HashMap<String, Arc<dyn Source>>>,
    /// Retry and timeout settings.
    pub settings: RwLock<DeliverySettings>,
    /// Bounds the deliveries in flight over all outboxes.
    pub slots: Semaphore,
    /// Woken when a worker has room for more entries.
    pub room: Notify,
    /// Set when the bridge stops.
    pub shutdown: Shutdown,
}

impl DeliveryContext {
    fn deliverer(&self, source: &str) -> Option<Arc<dyn Source>> {
        self.deliverers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(source)
            .cloned()
    }

    fn settings(&self) -> DeliverySettings {
        self.settings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One outbox being drained: what the reader and its worker share.
pub struct OutboxStream {
    /// `<agent>:<source>:outbox`.
    pub key: String,
    /// The agent, from the key.
    pub agent: String,
    /// The source.
    pub source: String,
    /// Entries handed to the worker and not yet done.
    queued: AtomicUsize,
    /// Their ids, so that an entry read twice (pending recovery, a claim)
    /// is not queued twice.
    in_flight: Mutex<HashSet<String>>,
}

impl OutboxStream {
    /// A stream, the sending end of its worker's queue (dropping it ends
    /// the worker once the queue is empty), and the receiving end.
    pub fn new(
        key: &StreamKey,
    ) -> (
        Arc<OutboxStream>,
        mpsc::UnboundedSender<Entry>,
        mpsc::UnboundedReceiver<Entry>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let s = OutboxStream {
            key: key.to_string(),
            agent: key.agent.to_string(),
            source: key.family.clone(),
            queued: AtomicUsize::new(0),
            in_flight: Mutex::new(HashSet::new()),
        };
        (Arc::new(s), tx, rx)
    }

    /// The dead-letter stream.
    pub fn dead_key(&self) -> String {
        dead_letter(&self.key)
    }

    /// Entries queued or being delivered.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Queues an entry on `tx` unless it is already queued; false if the
    /// worker is gone.
    pub fn push(&self, tx: &mpsc::UnboundedSender<Entry>, e: Entry) -> bool {
        let fresh = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(e.id.clone());
        if !fresh {
            return true;
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        let id = e.id.clone();
        if tx.send(e).is_err() {
            self.done(&id);
            return false;
        }
        true
    }

    fn done(&self, id: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs one outbox's worker until its queue is closed (the outbox was
/// removed by a reload) or the bridge stops.
pub async fn run_worker(
    ctx: Arc<DeliveryContext>,
    stream: Arc<OutboxStream>,
    mut rx: mpsc::UnboundedReceiver<Entry>,
) {
    let mut shutdown = ctx.shutdown.clone();
    loop {
        let entry = tokio::select! {
            e = rx.recv() => match e { Some(e) => e, None => return },
            _ = shutdown.wait() => return,
        };
        let id = entry.id.clone();
        let finished = process(&ctx, &stream, entry).await;
        stream.done(&id);
        ctx.room.notify_one();
        if !finished {
            // Stopping: what is left stays pending in Redis and is
            // delivered again after a restart.
            return;
        }
    }
}

/// Delivers (or dead-letters) and acknowledges one entry. False when the
/// bridge stopped first: the entry stays pending.
async fn process(ctx: &DeliveryContext, stream: &OutboxStream, entry: Entry) -> bool {
    let Some(fields) = entry.fields else {
        // Deleted while pending: nothing to deliver, only the ack is left.
        return finish(ctx, stream, &entry.id, Finish::Deleted).await;
    };
    let Some(source) = ctx.deliverer(&stream.source) else {
        log::warn!(
            "{} {}: no source delivers {:?} any more; the entry stays pending",
            stream.key,
            entry.id,
            stream.source
        );
        return true;
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let msg = Outbound {
        agent: stream.agent.clone(),
        source: stream.source.clone(),
        stream: stream.key.clone(),
        id: entry.id.clone(),
        channel: field("channel"),
        text: field("text"),
        fields: fields.clone(),
    };
    let settings = ctx.settings();
    let attempts = settings.retry.attempts.max(1);
    let mut shutdown = ctx.shutdown.clone();
    for attempt in 1..=attempts {
        let result = {
            let Ok(_slot) = ctx.slots.acquire().await else {
                return false;
            };
            match tokio::time::timeout(settings.deliver_timeout, source.deliver(&msg)).await {
                Ok(r) => r,
                Err(_) => Err(DeliveryError::Retry(format!(
                    "no answer within {} ms",
                    settings.deliver_timeout.as_millis()
                ))),
            }
        };
        match result {
            Ok(()) => return finish(ctx, stream, &msg.id, Finish::Delivered).await,
            Err(DeliveryError::Permanent(reason)) => {
                log::warn!(
                    "{} {}: {reason}; moved to the dead-letter stream",
                    stream.key,
                    msg.id
                );
                return finish(ctx, stream, &msg.id, Finish::Dead(&msg, reason, attempt)).await;
            }
            Err(DeliveryError::Retry(reason)) if attempt == attempts => {
                log::warn!(
                    "{} {}: {reason}; gave up after {attempts} tries, moved to the dead-letter stream",
                    stream.key,
                    msg.id
                );
                let reason = format!("gave up after {attempts} tries: {reason}");
                return finish(ctx, stream, &msg.id, Finish::Dead(&msg, reason, attempt)).await;
            }
            Err(DeliveryError::Retry(reason)) => {
                let wait = settings.retry.backoff(attempt);
                log::info!(
                    "{} {}: {reason}; try {} of {attempts} in {} ms",
                    stream.key,
                    msg.id,
                    attempt + 1,
                    wait.as_millis()
                );
                let mut con = ctx.con.clone();
                if let Err(e) = crate::stats::bump(&mut con, Counter::Retried, 1).await {
                    log::debug!("cannot count a retry: {e}");
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.wait() => return false,
                }
            }
        }
    }
    true
}

/// How an entry ends.
enum Finish<'a> {
    Delivered,
    Deleted,
    Dead(&'a Outbound, String, u32),
}

/// Writes the outcome (dead letter, ack, counter) in one pipeline, trying
/// again until Redis takes it: an entry is never acknowledged without
/// having been delivered or dead-lettered. False if the bridge stopped
/// first.
async fn finish(ctx: &DeliveryContext, stream: &OutboxStream, id: &str, how: Finish<'_>) -> bool {
    let mut pipe = redis::pipe();
    if let Finish::Dead(msg, reason, attempts) = &how {
        let failed_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let x = pipe.cmd("XADD").arg(stream.dead_key()).arg("*");
        x.arg("original_id").arg(id);
        x.arg("error").arg(reason);
        x.arg("attempts").arg(*attempts);
        x.arg("failed_at").arg(&failed_at);
        for (k, v) in &msg.fields {
            x.arg(k).arg(v);
        }
        x.ignore();
    }
    pipe.cmd("XACK")
        .arg(&stream.key)
        .arg(GROUP)
        .arg(id)
        .ignore();
    match how {
        Finish::Delivered => Counter::Delivered.add_to(&mut pipe, 1),
        Finish::Dead(..) => Counter::Dead.add_to(&mut pipe, 1),
        Finish::Deleted => {}
    }
    let mut shutdown = ctx.shutdown.clone();
    let mut wait = Duration::from_millis(50);
    loop {
        let mut con = ctx.con.clone();
        match pipe.query_async::<()>(&mut con).await {
            Ok(()) => return true,
            Err(e) => {
                log::warn!(
                    "{} {id}: cannot record the outcome in Redis ({e}); trying again",
                    stream.key
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.wait() => return false,
                }
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}
