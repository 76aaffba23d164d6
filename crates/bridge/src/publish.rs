//! The only way into an inbox from the outside world (agents' consult
//! inboxes are written by the consult router alone: see
//! `sources::consult`).
//!
//! [`publish`] routes messages and writes them, in one pipeline:
//!
//! ```text
//! XADD <agent>:<source>:inbox MAXLEN ~ <inbox_maxlen> * source … channel …
//!      sender … text … received_at <RFC 3339> external_id … [guild …]
//!      [address …] [extra …]
//! …
//! HINCRBY bridge:stats routed <n>
//! ```
//!
//! or, for a message no route and no default agent matches (or whose route
//! is parked), the same fields and an `unrouted_reason` to
//! `bridge:unrouted`, counted in `unrouted`. When Redis does not take a
//! message, its result is an error and the source must answer its sender
//! with a failure. Every stream written is capped (`MAXLEN ~`): an agent
//! that never reads its inbox loses its oldest messages, not the host its
//! memory.
//!
//! Sources publish through a [`Publisher`], which gathers the messages of
//! concurrent callers into one call of [`publish`] (one pipeline, one
//! write to Redis: group commit) while earlier ones are in flight. Each
//! write wakes Redis and each answer wakes the bridge, and on a small
//! (virtual) machine those wake-ups, not the commands, are most of the
//! cost; a lone message still costs one round trip.

use crate::conn::Con;
use crate::message::Inbound;
use crate::routing::{RouteKey, Routes, Target};
use crate::stats::{Counter, UNROUTED_KEY};
use oxidepm_lanes::StreamKey;
use redis::aio::ConnectionLike;
use redis::Value;
use std::fmt;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Fields the bridge writes itself; an `extra` field of the same name is
/// left out so that a source cannot forge them.
const OWN_FIELDS: &[&str] = &[
    "source",
    "channel",
    "sender",
    "text",
    "received_at",
    "external_id",
    "guild",
    "address",
    "unrouted_reason",
];

/// Why a message is in `bridge:unrouted` when no route matched it.
const NO_ROUTE: &str = "no route matches and there is no default agent";

/// Most messages in one pipeline.
const MAX_BATCH: usize = 512;
/// Messages waiting for the next pipeline; past it, publishing waits.
const QUEUE: usize = 8192;
/// Pipelines in flight at once.
const IN_FLIGHT: usize = 2;

/// What routing needs: the table, the configured sources and the cap of
/// the streams written.
#[derive(Clone, Debug, Default)]
pub struct RoutingTable {
    /// The routes and the default agent.
    pub routes: Routes,
    /// Source names messages may be published under.
    pub sources: Vec<String>,
    /// `MAXLEN ~` of every XADD (0: none, only in tests).
    pub maxlen: u64,
}

impl RoutingTable {
    /// The table of a configuration; a route that cannot be in force is
    /// parked (see `oxidepm_lanes::bridge_routes`), never an error.
    pub fn from_config(cfg: &crate::BridgeConfig) -> RoutingTable {
        RoutingTable {
            routes: Routes::from_plan(&cfg.route_plan()),
            // Consult inboxes are written by the consult router alone, with
            // the sender taken from an outbox key: never by routing, where
            // a source names the sender.
            sources: cfg
                .sources
                .iter()
                .filter(|s| *s != oxidepm_lanes::consult::CONSULT)
                .cloned()
                .collect(),
            maxlen: cfg.inbox_maxlen,
        }
    }
}

/// Where a message went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The agent, or `None` for `bridge:unrouted`.
    pub agent: Option<String>,
    /// The stream written.
    pub stream: String,
    /// The new entry's id.
    pub id: String,
}

/// Why a message was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// The source is not one of the configured sources.
    UnknownSource(String),
    /// Redis did not take it; the sender should try again later.
    Unavailable(String),
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::UnknownSource(s) => write!(f, "unknown source {s:?}"),
            PublishError::Unavailable(e) => {
                write!(
                    f,
                    "the message bus is unavailable ({e}); the message was not taken"
                )
            }
        }
    }
}

impl std::error::Error for PublishError {}

/// A message to be written at most once: its id joins a sorted set of the
/// source's own (under `bridge:`) in the same transaction (MULTI/EXEC) as
/// its XADD, so a bridge killed at any moment has either written both or
/// neither, and the next one can tell what it already took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Once {
    /// The sorted set.
    pub key: String,
    /// The message's id in it.
    pub member: String,
    /// Its score: the set keeps the `keep` highest.
    pub score: u64,
    /// How many ids the set keeps.
    pub keep: usize,
}

/// Where one message goes.
struct Destination {
    /// The agent, or `None` for `bridge:unrouted`.
    agent: Option<String>,
    /// The stream.
    stream: String,
    /// Why it is unrouted, if it is.
    unrouted: Option<Arc<str>>,
}

/// Where one message goes.
fn destination(table: &RoutingTable, m: &Inbound) -> Result<Destination, PublishError> {
    if !table.sources.contains(&m.source) {
        return Err(PublishError::UnknownSource(m.source.clone()));
    }
    let key = RouteKey {
        source: &m.source,
        channel: Some(m.channel.as_str()),
        guild: m.guild.as_deref(),
        address: m.address.as_deref(),
    };
    let unrouted = |why: Arc<str>| Destination {
        agent: None,
        stream: UNROUTED_KEY.to_string(),
        unrouted: Some(why),
    };
    Ok(match table.routes.route(&key) {
        Some((Target::Agent(a), _)) => Destination {
            agent: Some(a.to_string()),
            stream: StreamKey::inbox(a, &m.source).to_string(),
            unrouted: None,
        },
        Some((Target::Parked(why), _)) => unrouted(why.clone()),
        None => unrouted(NO_ROUTE.into()),
    })
}

/// Adds the XADD of one message to `pipe`.
fn add_xadd(
    pipe: &mut redis::Pipeline,
    table: &RoutingTable,
    d: &Destination,
    m: &Inbound,
    received_at: &str,
) {
    let x = pipe.cmd("XADD").arg(&d.stream);
    if table.maxlen > 0 {
        x.arg("MAXLEN").arg("~").arg(table.maxlen);
    }
    x.arg("*");
    x.arg("source").arg(&m.source);
    x.arg("channel").arg(&m.channel);
    x.arg("sender").arg(&m.sender);
    x.arg("text").arg(&m.text);
    x.arg("received_at").arg(received_at);
    x.arg("external_id")
        .arg(m.external_id.as_deref().unwrap_or(""));
    if let Some(g) = &m.guild {
        x.arg("guild").arg(g);
    }
    if let Some(a) = &m.address {
        x.arg("address").arg(a);
    }
    if let Some(why) = &d.unrouted {
        x.arg("unrouted_reason").arg(&**why);
    }
    for (k, v) in &m.extra {
        if !k.is_empty() && !OWN_FIELDS.contains(&k.as_str()) {
            x.arg(k).arg(v);
        }
    }
}

/// Routes every message by `table` and writes each to its inbox (or
/// `bridge:unrouted`), counting them. The one function that writes
/// inboxes; one result per message, in order.
pub async fn publish(
    con: &mut Con,
    table: &RoutingTable,
    msgs: &[(&Inbound, Option<&Once>)],
) -> Vec<Result<Published, PublishError>> {
    if con.is_cluster() {
        publish_each(con, table, msgs).await
    } else {
        publish_batch(con, table, msgs).await
    }
}

/// On a cluster: a pipeline must stay within one slot, so each message is
/// written on its own, its record ([`Once`]) and the counters after it.
/// Not in one transaction: a crash between the message and its record
/// lets a resumed gateway session publish the message once more (at least
/// once, as everywhere else); within one bridge the in-memory record
/// still drops it.
async fn publish_each(
    con: &mut Con,
    table: &RoutingTable,
    msgs: &[(&Inbound, Option<&Once>)],
) -> Vec<Result<Published, PublishError>> {
    let received_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (mut routed, mut unrouted) = (0i64, 0i64);
    let mut out = Vec::with_capacity(msgs.len());
    for (m, once) in msgs {
        let d = match destination(table, m) {
            Ok(d) => d,
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        let mut pipe = redis::pipe();
        add_xadd(&mut pipe, table, &d, m, &received_at);
        let id = match pipe.query_async::<(String,)>(con).await {
            Ok((id,)) => id,
            Err(e) => {
                out.push(Err(PublishError::Unavailable(e.to_string())));
                continue;
            }
        };
        match d.unrouted {
            None => routed += 1,
            Some(_) => unrouted += 1,
        }
        if let Some(o) = once {
            let mut rec = redis::pipe();
            add_once(&mut rec, o);
            if let Err(e) = rec.query_async::<()>(con).await {
                log::warn!("cannot record message {} as taken: {e}", o.member);
            }
        }
        out.push(Ok(Published {
            agent: d.agent,
            stream: d.stream,
            id,
        }));
    }
    let mut stats = redis::pipe();
    for (c, n) in [(Counter::Routed, routed), (Counter::Unrouted, unrouted)] {
        if n > 0 {
            c.add_to(&mut stats, n);
        }
    }
    if !stats.is_empty() {
        if let Err(e) = stats.query_async::<()>(con).await {
            log::warn!("cannot count published messages: {e}");
        }
    }
    out
}

/// Adds a message's record, and the trim of its set, to `pipe`.
fn add_once(pipe: &mut redis::Pipeline, o: &Once) {
    pipe.cmd("ZADD").arg(&o.key).arg(o.score).arg(&o.member);
    let keep = i64::try_from(o.keep).unwrap_or(i64::MAX);
    pipe.cmd("ZREMRANGEBYRANK")
        .arg(&o.key)
        .arg(0)
        .arg(-keep.saturating_add(1));
}

/// On one server: every message in one pipeline; a message with a
/// [`Once`] in a transaction with its record.
pub async fn publish_batch<C: ConnectionLike>(
    con: &mut C,
    table: &RoutingTable,
    msgs: &[(&Inbound, Option<&Once>)],
) -> Vec<Result<Published, PublishError>> {
    let received_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut pipe = redis::pipe();
    // Per message: where it goes, or why not; and its place in the pipeline.
    let mut plan = Vec::with_capacity(msgs.len());
    let (mut routed, mut unrouted) = (0i64, 0i64);
    for (m, once) in msgs {
        match destination(table, m) {
            Ok(d) => {
                // A message with a record: MULTI, XADD, ZADD, trim, EXEC
                // (five replies, the XADD's in EXEC's); else one reply.
                if once.is_some() {
                    pipe.cmd("MULTI");
                }
                add_xadd(&mut pipe, table, &d, m, &received_at);
                if let Some(o) = once {
                    add_once(&mut pipe, o);
                    pipe.cmd("EXEC");
                }
                match d.unrouted {
                    None => routed += 1,
                    Some(_) => unrouted += 1,
                }
                let replies = if once.is_some() { 5 } else { 1 };
                plan.push(Ok((d.agent, d.stream, replies)));
            }
            Err(e) => plan.push(Err(e)),
        }
    }
    // Counted in the same write as the messages: one HINCRBY per counter.
    for (c, n) in [(Counter::Routed, routed), (Counter::Unrouted, unrouted)] {
        if n > 0 {
            c.add_to(&mut pipe, n);
        }
    }
    // Per-command replies (a pipeline query would turn one error into an
    // error for all).
    let replies = if pipe.is_empty() {
        Ok(Vec::new())
    } else {
        con.req_packed_commands(&pipe, 0, pipe.len())
            .await
            .map_err(|e| PublishError::Unavailable(e.to_string()))
    };
    let mut ids = match replies {
        Ok(r) => r.into_iter(),
        Err(e) => {
            return plan
                .into_iter()
                .map(|p| p.and_then(|_| Err(e.clone())))
                .collect();
        }
    };
    plan.into_iter()
        .map(|p| {
            let (agent, stream, replies) = p?;
            let mut mine: Vec<Value> = ids.by_ref().take(replies).collect();
            let reply = match mine.pop() {
                // EXEC's answer: the XADD's comes first.
                Some(Value::Array(a)) if replies > 1 => a.into_iter().next(),
                other => other,
            };
            match reply {
                Some(Value::BulkString(b)) => Ok(Published {
                    agent,
                    stream,
                    id: String::from_utf8_lossy(&b).into_owned(),
                }),
                Some(Value::SimpleString(s)) => Ok(Published {
                    agent,
                    stream,
                    id: s,
                }),
                Some(Value::ServerError(e)) => Err(PublishError::Unavailable(format!(
                    "{}: {}",
                    e.code(),
                    e.details().unwrap_or("")
                ))),
                other => Err(PublishError::Unavailable(format!(
                    "unexpected reply to XADD: {other:?}"
                ))),
            }
        })
        .collect()
}

/// One message waiting to be published, and where its result goes.
struct Job {
    msg: Inbound,
    done: oneshot::Sender<Result<Published, PublishError>>,
    once: Option<Once>,
}

/// What sources hold to publish: the queue to the task that publishes in
/// batches, and the current routing table, which a reload replaces.
#[derive(Clone)]
pub struct Publisher {
    jobs: mpsc::Sender<Job>,
    table: Arc<RwLock<Arc<RoutingTable>>>,
    /// The bridge's connection, for a source's own keys under `bridge:`
    /// and the consult router's inbox writes.
    con: Con,
}

impl Publisher {
    /// A publisher over `con`, routing by `table`; starts its batching
    /// task (call inside a tokio runtime). The task ends when every
    /// `Publisher` clone is gone.
    pub fn new(con: Con, table: RoutingTable) -> Publisher {
        let (jobs, rx) = mpsc::channel(QUEUE);
        let table = Arc::new(RwLock::new(Arc::new(table)));
        tokio::spawn(batches(con.clone(), table.clone(), rx));
        Publisher { jobs, table, con }
    }

    /// The bridge's shared Redis connection, for what a source keeps under
    /// its own `bridge:` keys, and for the consult router, which writes
    /// inboxes without routing (every other source goes through
    /// [`Publisher::publish`]).
    pub fn connection(&self) -> Con {
        self.con.clone()
    }

    /// Routes and writes one message (see [`publish`]).
    pub async fn publish(&self, msg: Inbound) -> Result<Published, PublishError> {
        self.publish_job(msg, None).await
    }

    /// Routes and writes one message with its record (see [`Once`]).
    pub async fn publish_once(&self, msg: Inbound, once: Once) -> Result<Published, PublishError> {
        self.publish_job(msg, Some(once)).await
    }

    async fn publish_job(
        &self,
        msg: Inbound,
        once: Option<Once>,
    ) -> Result<Published, PublishError> {
        let (done, result) = oneshot::channel();
        let job = Job { msg, done, once };
        let gone = || PublishError::Unavailable("the bridge is stopping".into());
        self.jobs.send(job).await.map_err(|_| gone())?;
        result.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Whether `source` is a configured source.
    pub fn knows_source(&self, source: &str) -> bool {
        self.table().sources.iter().any(|s| s == source)
    }

    /// The configured sources.
    pub fn sources(&self) -> Vec<String> {
        self.table().sources.clone()
    }

    /// Replaces the routing table; messages published from now on use it.
    pub fn set_table(&self, table: RoutingTable) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        *t = Arc::new(table);
    }

    fn table(&self) -> Arc<RoutingTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Publishes whatever has gathered, at most `IN_FLIGHT` pipelines at a
/// time: while they are in flight, the next batch gathers. Two pipelines
/// may overtake each other; a sender's messages stay in order all the same,
/// since each waits for its answer before it sends the next.
async fn batches(con: Con, table: Arc<RwLock<Arc<RoutingTable>>>, mut rx: mpsc::Receiver<Job>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut last = 0;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut jobs: Vec<Job> = Vec::with_capacity(last.max(16));
        if rx.recv_many(&mut jobs, MAX_BATCH).await == 0 {
            return;
        }
        if last > 1 && jobs.len() < MAX_BATCH {
            // Under concurrent load, let the connections whose requests
            // have arrived meanwhile run first (a yield lets the runtime
            // poll its sockets): a bigger batch costs Redis, and us, one
            // wake-up and one write instead of several.
            tokio::task::yield_now().await;
            while jobs.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
        }
        last = jobs.len();
        let t = table.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut con = con.clone();
        tokio::spawn(async move {
            let msgs: Vec<(&Inbound, Option<&Once>)> =
                jobs.iter().map(|j| (&j.msg, j.once.as_ref())).collect();
            let results = publish(&mut con, &t, &msgs).await;
            drop(slot);
            for (job, r) in jobs.into_iter().zip(results) {
                // The caller may have gone (its client hung up): the
                // message is in its inbox all the same.
                let _ = job.done.send(r);
            }
        });
    }
}
