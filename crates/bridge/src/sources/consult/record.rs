//! The consult router's writes: a question or an answer into the other
//! agent's consult inbox, together (one MULTI) with the record of open
//! questions that answers are checked against.
//!
//! The record of what `asker` asked `answerer` is one sorted set,
//! `bridge:consult:open:<asker>:<answerer>`: each member a request id,
//! scored by the time (ms) the question stops being open; an answered
//! question stays as long as it would have been open, scored by minus
//! that time, so it is not taken for a new one. It is bounded (`max_open`
//! open members; what has expired, open or answered, is removed before
//! counting) and the key expires with its newest question, so a pair that
//! goes quiet leaves nothing behind. Being in Redis, it survives a restart
//! of the bridge.
//!
//! Because the inbox entry and the record change in one transaction (on
//! one server; on a cluster they are in two slots and the record is
//! written first, so a question read again is delivered at least once), a
//! question delivered before a crash and read again after it is found in
//! the record and not delivered twice — answered in between too, which
//! would otherwise open it again for a second answer; an answer is
//! delivered once (its question is marked answered with it), and one read
//! again after a crash goes to the dead stream rather than twice into the
//! inbox.

use super::judge::passed_on;
use crate::conn::Con;
use crate::message::Outbound;
use crate::source::DeliveryError;
use oxidepm_lanes::consult::{self, open_key, ConsultLimits};
use oxidepm_lanes::{AgentName, StreamKey};
use std::time::Duration;

/// What the router needs to write one message.
pub struct Write<'a> {
    /// The agent that wrote the outbox entry (from the key).
    pub sender: &'a AgentName,
    /// The agent whose inbox it goes to.
    pub to: &'a AgentName,
    /// The entry.
    pub msg: &'a Outbound,
    /// The bounds.
    pub limits: &'a ConsultLimits,
    /// `MAXLEN ~` of the inbox.
    pub inbox_maxlen: u64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How long a question waits before `max_open` is looked at again.
const OPEN_WAIT: Duration = Duration::from_millis(250);

/// How long a write waits for Redis to be back.
const OUTAGE_WAIT: Duration = Duration::from_millis(250);

/// A write Redis did not take. The outbox and the inbox are in the same
/// Redis, so while it is down or failing over nothing is lost by waiting
/// for it, and the entry must not spend its tries (and be dead-lettered)
/// on an outage; any other error is tried again as usual.
fn unavailable(e: redis::RedisError) -> DeliveryError {
    let reason = format!("the private Redis did not take it: {e}");
    if is_outage(&e) {
        DeliveryError::Wait(reason, OUTAGE_WAIT)
    } else {
        DeliveryError::Retry(reason)
    }
}

/// Whether `e` says Redis is away for now (down, loading, failing over,
/// out of memory) rather than that the write is wrong.
fn is_outage(e: &redis::RedisError) -> bool {
    use redis::ErrorKind as K;
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            K::BusyLoadingError | K::TryAgain | K::ClusterDown | K::MasterDown | K::ReadOnly
        )
        || matches!(e.code(), Some("OOM") | Some("LOADING") | Some("MASTERDOWN"))
}

/// Adds the inbox entry to `pipe`: the fields the router sets, then the
/// sender's others.
fn add_xadd(pipe: &mut redis::Pipeline, w: &Write<'_>, kind: &str, link: (&str, &str)) {
    let x = pipe
        .cmd("XADD")
        .arg(StreamKey::inbox(w.to, consult::CONSULT).to_string());
    if w.inbox_maxlen > 0 {
        x.arg("MAXLEN").arg("~").arg(w.inbox_maxlen);
    }
    x.arg("*");
    x.arg("source").arg(consult::CONSULT);
    x.arg(consult::KIND).arg(kind);
    x.arg(consult::FROM).arg(w.sender.as_str());
    x.arg(consult::TO).arg(w.to.as_str());
    x.arg(link.0).arg(link.1);
    x.arg(consult::TEXT)
        .arg(w.msg.field(consult::TEXT).unwrap_or(""));
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    x.arg(consult::RECEIVED_AT).arg(at);
    for (k, v) in passed_on(w.msg) {
        x.arg(k).arg(v);
    }
    x.ignore();
}

/// Delivers a question of `w.sender` to `w.to` and records it as open,
/// unless it was delivered before (a read after a crash), or the sender
/// already has `max_open` questions open with `w.to`.
pub async fn ask(con: &mut Con, w: &Write<'_>) -> Result<(), DeliveryError> {
    let key = open_key(w.sender, w.to);
    let id = w.msg.id.as_str();
    let now = now_ms();
    // Expired: open ones closing at or before now (scores up to now),
    // answered ones remembered until before now (scores above -now).
    let (score, open): (Option<f64>, usize) = redis::pipe()
        .cmd("ZREMRANGEBYSCORE")
        .arg(&key)
        .arg(format!("({}", -now))
        .arg(now)
        .ignore()
        .cmd("ZSCORE")
        .arg(&key)
        .arg(id)
        .cmd("ZCOUNT")
        .arg(&key)
        .arg(format!("({now}"))
        .arg("+inf")
        .query_async(con)
        .await
        .map_err(unavailable)?;
    let cluster = con.is_cluster();
    match score {
        // On a cluster the record is written before the question (see
        // below), so an open one read again may never have reached the
        // inbox: it goes again (at least once; its request id is the same).
        Some(s) if cluster && s > 0.0 => {
            let mut pipe = redis::pipe();
            add_xadd(&mut pipe, w, "question", (consult::REQUEST_ID, id));
            return pipe.query_async::<()>(con).await.map_err(unavailable);
        }
        Some(_) => {
            log::info!(
                "consult: question {id} of {} to {} was delivered before (open or answered)",
                w.sender,
                w.to
            );
            return Ok(());
        }
        None => {}
    }
    let max = w.limits.max_open;
    if open >= max {
        // Backpressure, not a refusal: the question goes once one of the
        // open ones is answered or closes, and the asker's outbox waits in
        // order meanwhile (a backlog after an outage reaches the limit in a
        // burst that answers would have drained).
        return Err(DeliveryError::Wait(
            format!(
                "{} already has {open} open questions to {} (lanes.consult_limits.max_open = \
                 {max}); the question waits for an answer, or for one to close after \
                 lanes.consult_limits.open_secs ({} s)",
                w.sender, w.to, w.limits.open_secs
            ),
            OPEN_WAIT,
        ));
    }
    let open_ms = w.limits.open_secs.saturating_mul(1000).min(i64::MAX as u64) as i64;
    let add_record = |p: &mut redis::Pipeline| {
        p.cmd("ZADD")
            .arg(&key)
            .arg(now.saturating_add(open_ms))
            .arg(id)
            .ignore();
        p.cmd("PEXPIRE").arg(&key).arg(open_ms).ignore();
    };
    let mut pipe = redis::pipe();
    add_xadd(&mut pipe, w, "question", (consult::REQUEST_ID, id));
    if cluster {
        // The record is in the asker's slot (where its answer closes it in
        // one transaction), the question goes to the answerer's inbox: two
        // writes, the record first, so an answer can never arrive before
        // the question it answers is open (another bridge may deliver it
        // within a millisecond). A crash between them delivers the
        // question when the entry is read again: at least once, never lost.
        let mut record = redis::pipe();
        add_record(&mut record);
        record.query_async::<()>(con).await.map_err(unavailable)?;
        return pipe.query_async::<()>(con).await.map_err(unavailable);
    }
    pipe.atomic();
    add_record(&mut pipe);
    pipe.query_async::<()>(con).await.map_err(unavailable)
}

/// Delivers `w.sender`'s answer to the question `re` that `w.to` asked it,
/// and closes the question; a question not open (never asked, answered
/// already, or past `open_secs`) is refused.
pub async fn answer(con: &mut Con, w: &Write<'_>, re: &str) -> Result<(), DeliveryError> {
    let key = open_key(w.to, w.sender);
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(&key)
        .arg(re)
        .query_async(con)
        .await
        .map_err(unavailable)?;
    if !score.is_some_and(|closes| closes > now_ms() as f64) {
        return Err(DeliveryError::Permanent(format!(
            "re {re:?} names no open question of {} to {}: never asked, answered already \
             (one answer per question), or asked more than lanes.consult_limits.open_secs \
             ({} s) ago",
            w.to, w.sender, w.limits.open_secs
        )));
    }
    let open_ms = w.limits.open_secs.saturating_mul(1000).min(i64::MAX as u64) as i64;
    let mut pipe = redis::pipe();
    pipe.atomic();
    add_xadd(&mut pipe, w, "answer", (consult::RE, re));
    // Answered, not forgotten: the question read again after a crash is
    // not delivered (and opened) again.
    pipe.cmd("ZADD")
        .arg(&key)
        .arg("XX")
        .arg(-now_ms().saturating_add(open_ms))
        .arg(re)
        .ignore();
    pipe.query_async::<()>(con).await.map_err(unavailable)
}
