//! One outbox's worker: delivers its entries one at a time, in order,
//! through the outbox's source; acknowledges each only after delivery;
//! retries with exponential backoff; moves an entry that keeps failing (or
//! fails permanently) to `<agent>:<source>:outbox:dead` with the error and
//! its original id, then acknowledges it. An entry too large or malformed
//! to deliver is dead-lettered at once, without a delivery being built.
//! Once its queue is empty (or every [`TRIM_EVERY`] entries) the worker
//! trims what is done from its outbox ([`crate::trim`]).
//!
//! The agent of every delivery is the one named by the outbox key, never a
//! field of the entry.

use crate::conn::Con;
use crate::entries::{Body, Entry};
use crate::message::Outbound;
use crate::shutdown::Shutdown;
use crate::source::{DeliveryError, Source};
use crate::stats::Counter;
use oxidepm_lanes::bridge_config::RetryConfig;
use oxidepm_lanes::stream_key::dead_letter;
use oxidepm_lanes::StreamKey;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify, Semaphore};

/// The consumer group every outbox is drained with.
pub const GROUP: &str = oxidepm_lanes::stream_key::BRIDGE_GROUP;

/// The shortest wait before an entry the far end asked to wait is sent
/// again: a far end answering "now" forever is not hammered.
const MIN_WAIT: Duration = Duration::from_millis(50);

/// Entries finished between two trims of a busy outbox.
pub const TRIM_EVERY: usize = 256;

/// Settings a reload may change.
#[derive(Clone, Debug)]
pub struct DeliverySettings {
    /// Retries.
    pub retry: RetryConfig,
    /// Timeout of one delivery.
    pub deliver_timeout: Duration,
    /// Largest entry delivered, in bytes (for the dead letter's reason).
    pub max_entry_bytes: usize,
    /// Cap (`MAXLEN ~`) of each dead-letter stream.
    pub dead_maxlen: u64,
    /// Bytes of an entry's fields a dead letter keeps.
    pub dead_entry_bytes: usize,
    /// `MAXLEN ~` of the inboxes a refusal is told in.
    pub inbox_maxlen: u64,
}

/// What every worker shares.
pub struct DeliveryContext {
    /// The shared (non-blocking) Redis connection.
    pub con: Con,
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
    /// `<agent>:<source>:inbox`, where a source that tells its senders
    /// ([`Source::tells_sender`]) reports what it dead-lettered.
    pub inbox: String,
    /// Entries handed to the worker and not yet done.
    queued: AtomicUsize,
    /// Their bytes.
    bytes: AtomicUsize,
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
            inbox: StreamKey::inbox(&key.agent, &key.family).to_string(),
            queued: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
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

    /// Bytes of the entries queued or being delivered.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// The ids of the entries queued or being delivered.
    pub fn held(&self) -> HashSet<String> {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
        let (id, bytes) = (e.id.clone(), held_bytes(&e));
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if tx.send(e).is_err() {
            self.done(&id, bytes);
            return false;
        }
        true
    }

    fn done(&self, id: &str, bytes: usize) {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        self.queued.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// The bytes an entry holds in memory (a too-large one holds none of its
/// fields).
fn held_bytes(e: &Entry) -> usize {
    match e.body {
        Body::TooLarge | Body::Deleted => 0,
        Body::Fields(_) | Body::Malformed { .. } => e.bytes,
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
    let mut since_trim = 0usize;
    loop {
        let entry = tokio::select! {
            e = rx.recv() => match e { Some(e) => e, None => return },
            _ = shutdown.wait() => return,
        };
        let (id, bytes) = (entry.id.clone(), held_bytes(&entry));
        let finished = process(&ctx, &stream, entry).await;
        stream.done(&id, bytes);
        ctx.room.notify_one();
        if !finished {
            // Stopping: what is left stays pending in Redis and is
            // delivered again after a restart.
            return;
        }
        since_trim += 1;
        if rx.is_empty() || since_trim >= TRIM_EVERY {
            since_trim = 0;
            trim(&ctx, &stream).await;
        }
    }
}

/// Trims what is done from the outbox, counting it.
async fn trim(ctx: &DeliveryContext, stream: &OutboxStream) {
    let mut con = ctx.con.clone();
    match crate::trim::trim_delivered(&mut con, &stream.key).await {
        Ok(0) => {}
        Ok(n) => {
            if let Err(e) = crate::stats::bump(&mut con, Counter::Trimmed, n as i64).await {
                log::debug!("cannot count trimmed entries: {e}");
            }
        }
        // The next trim takes what this one left.
        Err(e) => log::warn!("{}: cannot trim delivered entries: {e}", stream.key),
    }
}

/// Delivers (or dead-letters) and acknowledges one entry. False when the
/// bridge stopped first: the entry stays pending.
async fn process(ctx: &DeliveryContext, stream: &OutboxStream, entry: Entry) -> bool {
    let fields = match entry.body {
        Body::Fields(f) => f,
        // Deleted while pending: nothing to deliver, only the ack is left.
        Body::Deleted => return finish(ctx, stream, &entry.id, Finish::Deleted).await,
        Body::TooLarge => {
            let max = ctx.settings().max_entry_bytes;
            let reason = format!(
                "entry of {} bytes is larger than outbox.max_entry_bytes ({max}): not delivered, \
                 and its fields are not copied here",
                entry.bytes
            );
            log::warn!("{} {}: {reason}", stream.key, entry.id);
            let how = Finish::Refused(reason, Vec::new(), Counter::TooLarge, entry.bytes);
            return finish(ctx, stream, &entry.id, how).await;
        }
        Body::Malformed { reason, raw } => {
            log::warn!("{} {}: {reason}", stream.key, entry.id);
            let how = Finish::Refused(reason, raw, Counter::Malformed, entry.bytes);
            return finish(ctx, stream, &entry.id, how).await;
        }
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
    let mut attempt = 0;
    let mut waited = false;
    while attempt < attempts {
        attempt += 1;
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
            Err(DeliveryError::Wait(reason, wait)) => {
                // Not a failed try: the same entry again once the far end
                // allows it (at least a little later, whatever it said).
                attempt -= 1;
                let wait = wait.max(MIN_WAIT);
                // Said once: a wait for open questions to close may last
                // hours, looked at again four times a second.
                if waited {
                    log::debug!("{} {}: {reason}", stream.key, msg.id);
                } else {
                    log::info!("{} {}: {reason}", stream.key, msg.id);
                }
                waited = true;
                let mut con = ctx.con.clone();
                if let Err(e) = crate::stats::bump(&mut con, Counter::Waited, 1).await {
                    log::debug!("cannot count a wait: {e}");
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.wait() => return false,
                }
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
    /// Delivery failed: the message, the error, the tries.
    Dead(&'a Outbound, String, u32),
    /// Not deliverable as it is: why, the raw fields to copy, what it
    /// counts as, its size.
    Refused(String, Vec<(Vec<u8>, Vec<u8>)>, Counter, usize),
}

/// Milliseconds from an entry's XADD (its id's first part) to now, for the
/// delivery latency. An agent may choose its ids, so one entry counts at
/// most a day, and an id from the future counts nothing.
fn delivery_ms(id: &str) -> i64 {
    const DAY_MS: i64 = 86_400_000;
    let Some(added) = id.split('-').next().and_then(|ms| ms.parse::<i64>().ok()) else {
        return 0;
    };
    (chrono::Utc::now().timestamp_millis() - added).clamp(0, DAY_MS)
}

/// The fields a dead letter keeps of an entry: in order, until their names
/// and values reach `keep` bytes, the value that crosses it cut (at a
/// character boundary when it is text); then `truncated` with the bytes
/// the entry had. What an agent can make the bridge copy into Redis, where
/// it stays for operators, is bounded by that and the stream's length,
/// whatever the agent wrote (an entry refused by consult or a source can be
/// up to `max_entry_bytes`).
pub fn kept_fields<'a>(
    fields: impl Iterator<Item = Field<'a>>,
    keep: usize,
) -> (Vec<Field<'a>>, Option<usize>) {
    let mut out = Vec::new();
    let mut left = keep;
    let mut total = 0usize;
    let mut cut = false;
    for (k, v) in fields {
        total = total.saturating_add(k.len() + v.len());
        if cut {
            continue;
        }
        if k.len() + v.len() <= left {
            left -= k.len() + v.len();
            out.push((k, v));
        } else {
            cut = true;
            if k.len() < left {
                out.push((k, prefix(v, left - k.len())));
            }
        }
    }
    (out, cut.then_some(total))
}

/// A field of an entry: its name and value.
pub type Field<'a> = (&'a [u8], &'a [u8]);

/// The field a cut dead letter ends with: how many bytes the entry had.
pub const TRUNCATED: &str = "truncated";

/// The longest prefix of `v` of at most `n` bytes, not splitting a UTF-8
/// character when `v` is text.
fn prefix(v: &[u8], n: usize) -> &[u8] {
    let mut end = n.min(v.len());
    if std::str::from_utf8(v).is_ok() {
        while end > 0 && end < v.len() && (v[end] & 0xC0) == 0x80 {
            end -= 1;
        }
    }
    &v[..end]
}

/// Adds to `pipe` the entry that tells the sender, in its inbox of the
/// source, that its outbox entry `id` was not delivered and why: an agent
/// cannot read its dead-letter stream, and a refusal after its XADD was
/// taken must not go unsaid. Only the id and the reason are copied (the
/// sender has the rest), so the entry is bounded whatever it wrote.
fn add_refusal(
    pipe: &mut redis::Pipeline,
    stream: &OutboxStream,
    id: &str,
    reason: &str,
    maxlen: u64,
    at: &str,
) {
    let x = pipe.cmd("XADD").arg(&stream.inbox);
    if maxlen > 0 {
        x.arg("MAXLEN").arg("~").arg(maxlen);
    }
    x.arg("*");
    x.arg("source").arg(&stream.source);
    x.arg("kind").arg("refused");
    x.arg("re").arg(id);
    x.arg("error").arg(reason);
    x.arg("received_at").arg(at);
    x.ignore();
}

/// Writes the outcome (dead letter, ack, counter) in one pipeline, trying
/// again until Redis takes it: an entry is never acknowledged without
/// having been delivered or dead-lettered. False if the bridge stopped
/// first.
async fn finish(ctx: &DeliveryContext, stream: &OutboxStream, id: &str, how: Finish<'_>) -> bool {
    let mut pipe = redis::pipe();
    let (dead_maxlen, keep, inbox_maxlen) = {
        let s = ctx.settings();
        (s.dead_maxlen, s.dead_entry_bytes, s.inbox_maxlen)
    };
    let failed_at = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    match &how {
        Finish::Dead(msg, reason, attempts) => {
            let x = pipe.cmd("XADD").arg(stream.dead_key());
            x.arg("MAXLEN").arg("~").arg(dead_maxlen).arg("*");
            x.arg("original_id").arg(id);
            x.arg("error").arg(reason);
            x.arg("attempts").arg(*attempts);
            x.arg("failed_at").arg(failed_at());
            let fields = msg.fields.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes()));
            let (kept, cut) = kept_fields(fields, keep);
            for (k, v) in kept {
                x.arg(k).arg(v);
            }
            if let Some(total) = cut {
                x.arg(TRUNCATED).arg(total);
            }
            x.ignore();
        }
        Finish::Refused(reason, raw, _, bytes) => {
            let x = pipe.cmd("XADD").arg(stream.dead_key());
            x.arg("MAXLEN").arg("~").arg(dead_maxlen).arg("*");
            x.arg("original_id").arg(id);
            x.arg("error").arg(reason);
            x.arg("attempts").arg(0);
            x.arg("failed_at").arg(failed_at());
            x.arg("bytes").arg(*bytes);
            let fields = raw.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
            let (kept, cut) = kept_fields(fields, keep);
            for (k, v) in kept {
                x.arg(k).arg(v);
            }
            if let Some(total) = cut {
                x.arg(TRUNCATED).arg(total);
            }
            x.ignore();
        }
        Finish::Delivered | Finish::Deleted => {}
    }
    if let Finish::Dead(_, reason, _) | Finish::Refused(reason, ..) = &how {
        let tells = ctx
            .deliverer(&stream.source)
            .is_some_and(|s| s.tells_sender());
        if tells {
            add_refusal(&mut pipe, stream, id, reason, inbox_maxlen, &failed_at());
        }
    }
    pipe.cmd("XACK")
        .arg(&stream.key)
        .arg(GROUP)
        .arg(id)
        .ignore();
    // On one server the counters go in the same write; on a cluster they
    // are in another slot than the outbox, so in a write of their own.
    let mut stats = redis::pipe();
    let counters = if ctx.con.is_cluster() {
        &mut stats
    } else {
        &mut pipe
    };
    match how {
        Finish::Delivered => {
            Counter::Delivered.add_to(counters, 1);
            Counter::DeliveryMs.add_to(counters, delivery_ms(id));
        }
        Finish::Dead(..) => Counter::Dead.add_to(counters, 1),
        Finish::Refused(_, _, what, _) => {
            Counter::Dead.add_to(counters, 1);
            what.add_to(counters, 1);
        }
        Finish::Deleted => {}
    }
    let mut shutdown = ctx.shutdown.clone();
    let mut wait = Duration::from_millis(50);
    loop {
        let mut con = ctx.con.clone();
        match pipe.query_async::<()>(&mut con).await {
            Ok(()) => {
                if !stats.is_empty() {
                    if let Err(e) = stats.query_async::<()>(&mut con).await {
                        log::warn!("{} {id}: cannot count the outcome ({e})", stream.key);
                    }
                }
                return true;
            }
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

#[cfg(test)]
mod latency_tests {
    use super::delivery_ms;

    #[test]
    fn delivery_latency_is_bounded_whatever_id_an_agent_chose() {
        let now = chrono::Utc::now().timestamp_millis();
        let recent = delivery_ms(&format!("{}-0", now - 250));
        assert!((250..60_000).contains(&recent), "{recent}");
        assert_eq!(delivery_ms("0-1"), 86_400_000);
        assert_eq!(delivery_ms(&format!("{}-0", now + 3_600_000)), 0);
        assert_eq!(delivery_ms("not-an-id"), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::kept_fields;

    #[test]
    fn a_dead_letter_keeps_fields_up_to_its_bound() {
        let f: Vec<(&[u8], &[u8])> = vec![(b"a", b"12345"), (b"b", "ééé".as_bytes()), (b"c", b"x")];
        let (kept, cut) = kept_fields(f.iter().copied(), 100);
        assert_eq!(kept, f);
        assert_eq!(cut, None);
        // 6 for a, then b and 3 of ééé's 6 bytes: one whole character.
        let (kept, cut) = kept_fields(f.iter().copied(), 10);
        assert_eq!(
            kept,
            vec![(&b"a"[..], &b"12345"[..]), (b"b", "é".as_bytes())]
        );
        assert_eq!(cut, Some(15));
        // Not text: cut anywhere.
        let raw: Vec<(&[u8], &[u8])> = vec![(b"k", &[0x80, 0x80, 0x80])];
        assert_eq!(
            kept_fields(raw.iter().copied(), 3).0,
            vec![(&b"k"[..], &[0x80u8, 0x80][..])]
        );
        // A name that does not fit is not kept at all.
        assert_eq!(kept_fields(f.iter().copied(), 1).0, vec![]);
    }
}
