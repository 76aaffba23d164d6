//! The `ops` responder: an agent asks the daemon for what its grant allows
//! (itself, and the apps `[agents.<name>]` grants it) through its own lane.
//! It is the first responder of the contract every responder app keeps
//! (`oxidepm_lanes::responder`: keys, group, `request_id`, ACL user), and
//! the one built into the daemon: it talks to Redis as `resp_ops` directly,
//! where an app's replies pass the lane proxy's check.
//! It writes a request to `<agent>:ops:outbox`; the responder (ACL user
//! `resp_ops`) takes the agent from the KEY it read, never from the
//! payload, and has the daemon answer it as `ai:<agent>` through the same
//! gate, tiers and audit as the sockets (this file decides nothing about
//! authority); it replies into `<agent>:ops:inbox` with the same result or
//! error code a socket would give.
//!
//! A request is an entry with a field `request` holding a protocol request
//! (`{"op":"restart","target":"web"}`), or the request's fields themselves
//! (`op restart target web`). The reply has `request_id` (the outbox entry
//! id) and `response` (a protocol response as JSON).
//!
//! Each agent's outbox is served by its own thread and connection, in
//! order: one agent's slow request (a restart waiting out a long kill
//! timeout) never delays another's. An entry that cannot be read as a
//! request gets an error reply and is acknowledged like any other, so it
//! cannot stop the lane, not even after a restart. A request the daemon
//! has not answered within `ops_timeout_secs` gets an `E_TIMEOUT` reply,
//! and a reply over `ops_max_reply_bytes` is cut (a list, oldest items
//! first) with a `truncated` field saying so.
//!
//! A `subscribe` through the lane makes the agent's feed (one at most; a
//! new one replaces it): the records it may see are added to its `ops`
//! inbox as entries with a `stream` field (a `subscribe` record as JSON),
//! within a second, under the inbox's length bound.

mod entry;

use super::error::{ConnectError, Error};
use super::handle::Lanes;
use super::server::Con;
use crate::bus::{Feeds, Next, Published};
use crate::supervise::{lock, Shared};
use entry::Entry;
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::{AclUser, AgentName, Secret, SecretError, StreamKey};
use oxidepm_proto::{AppKind, ErrorBody, Request, Response, Streamed};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// The responder's name (stream family and ACL user suffix).
pub const NAME: &str = "ops";
/// Consumer group of the responder on every `<agent>:ops:outbox`: its
/// name, as the contract has it.
const GROUP: &str = NAME;
/// Its consumer name; stable, so a restarted daemon finds its pending entries.
const CONSUMER: &str = "oxidepmd";
/// Entries read at once from one outbox.
const BATCH: usize = 16;
/// How long one read waits for new entries, in milliseconds; also how
/// soon a worker notices that it is to stop.
const BLOCK_MS: u64 = 1000;
/// Answers kept in an agent's `ops` inbox (`MAXLEN ~`): an agent that
/// never reads them loses the oldest instead of filling Redis, which all
/// agents share (at most about this many × `ops_max_reply_bytes`).
const INBOX_MAXLEN: u64 = 100;
/// The field naming the request a reply answers.
const REQUEST_ID: &str = oxidepm_lanes::responder::REQUEST_ID_FIELDS[0];
/// Feed records moved into an inbox at once.
const FEED_BATCH: usize = 64;

/// One request for the daemon to answer.
pub struct OpsRequest {
    /// The agent, from the stream key.
    pub agent: String,
    /// What it asks.
    pub req: Request,
    /// Where the answer goes.
    pub reply: std::sync::mpsc::Sender<Response>,
}

/// The responder's bounds (daemon.toml).
#[derive(Debug, Clone, Copy)]
pub struct OpsSettings {
    /// How long a request may take before the agent gets `E_TIMEOUT`.
    pub timeout: Duration,
    /// The largest reply, in bytes.
    pub max_reply: usize,
}

/// Requests go to the daemon through this.
type ToDaemon = tokio::sync::mpsc::UnboundedSender<OpsRequest>;

/// Wakes the responder's managing thread (see `manage`).
type Kick = SyncSender<()>;

/// Runs the responder until `tx` is closed: a thread that keeps one
/// worker thread per agent with a lane.
pub fn spawn(lanes: Lanes, shared: Shared, tx: ToDaemon, settings: OpsSettings, feeds: Feeds) {
    let (kick, changed) = std::sync::mpsc::sync_channel(1);
    lock(&shared).specs_changed = Some(kick.clone());
    let spawned = std::thread::Builder::new()
        .name("ops-responder".into())
        .spawn(move || manage(&lanes, &shared, &tx, settings, &feeds, (kick, changed)));
    if let Err(e) = spawned {
        log::error!("cannot start the ops responder: {e}");
    }
}

/// One agent's worker: told to stop by its flag.
struct Worker {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

// On the ops responder's own thread (see `spawn`).
#[allow(clippy::disallowed_methods)]
fn manage(
    lanes: &Lanes,
    shared: &Shared,
    tx: &ToDaemon,
    settings: OpsSettings,
    feeds: &Feeds,
    (kick, changed): (Kick, Receiver<()>),
) {
    let mut workers: HashMap<AgentName, Worker> = HashMap::new();
    // Looked for among the apps again only when one is defined, changed or
    // deleted, or a worker ends (a look each second was a pass over every
    // app of an idle daemon).
    let mut defined = agents(shared);
    while !tx.is_closed() {
        // The private Redis's socket exists once its lanes are set up.
        let ready = lanes.is_shared() || lanes.layout.redis_socket().exists();
        let current = if ready { defined.clone() } else { Vec::new() };
        workers.retain(|agent, w| {
            let keep = current.contains(agent) && !w.thread.is_finished();
            if !keep {
                w.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
        for agent in &current {
            if workers.contains_key(agent) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let run = Lane {
                agent: agent.clone(),
                lanes: lanes.clone(),
                shared: shared.clone(),
                tx: tx.clone(),
                settings,
                stop: stop.clone(),
                feeds: feeds.clone(),
                kick: kick.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("ops-{agent}"))
                .spawn(move || run.serve_until_stopped());
            match spawned {
                Ok(thread) => {
                    workers.insert(agent.clone(), Worker { stop, thread });
                }
                Err(e) => log::warn!("ops responder: no thread for {agent}: {e}"),
            }
        }
        // Every second while an agent waits for Redis's socket or for a
        // thread; else asleep until told.
        let waiting = (!ready && !defined.is_empty()) || workers.len() < current.len();
        let told = if waiting {
            match changed.recv_timeout(Duration::from_secs(1)) {
                Ok(()) => true,
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else if changed.recv().is_ok() {
            true
        } else {
            break;
        };
        if told {
            defined = agents(shared);
        }
    }
    for w in workers.values() {
        w.stop.store(true, Ordering::Relaxed);
    }
}

fn user() -> AclUser {
    AclUser::Responder(NAME.to_string())
}

/// Why a worker stopped serving; it logs this and starts again.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("no password for {user}: {source}")]
    NoPassword { user: AclUser, source: SecretError },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("XGROUP CREATE {key}: {source}")]
    Group {
        key: String,
        source: redis::RedisError,
    },
    #[error("XREADGROUP {key}: {source}")]
    Read {
        key: String,
        source: redis::RedisError,
    },
    #[error("reply to {agent}: {source}")]
    Reply {
        agent: AgentName,
        source: redis::RedisError,
    },
    #[error("XACK {key}: {source}")]
    Ack {
        key: String,
        source: redis::RedisError,
    },
}

async fn connect(lanes: &Lanes) -> Result<Con, ServeError> {
    let user = user();
    let pw = match Secret::read(&secrets::path(&lanes.layout.secrets_dir(), &user)) {
        Ok(pw) => pw,
        Err(source) => return Err(ServeError::NoPassword { user, source }),
    };
    // A read blocks for BLOCK_MS at most; longer means Redis is stuck.
    let timeout = Duration::from_millis(BLOCK_MS) * 10;
    Ok(lanes
        .server()
        .connect_timed(&lanes.user_name(&user), &pw, Some(timeout))
        .await?)
}

/// The agents, as far as they have a lane (see `Lanes::agents`).
fn agents(shared: &Shared) -> Vec<AgentName> {
    lock(shared)
        .apps()
        .filter(|a| a.spec.kind == AppKind::Agent)
        .filter_map(|a| a.spec.name.parse().ok())
        .collect()
}

/// One agent's outbox and what serving it needs.
struct Lane {
    agent: AgentName,
    lanes: Lanes,
    shared: Shared,
    tx: ToDaemon,
    settings: OpsSettings,
    stop: Arc<AtomicBool>,
    feeds: Feeds,
    /// Told when this worker ends, so that it is started again at once.
    kick: Kick,
}

impl Lane {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    // On the lane's own thread (see `manage`).
    #[allow(clippy::disallowed_methods)]
    fn serve_until_stopped(self) {
        // The worker's own runtime, on its own thread: its wait for the
        // daemon's answer (`ask`) holds up this agent's lane alone, never
        // the daemon's runtime nor another agent's.
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                log::warn!("ops responder: no runtime for {}: {e}", self.agent);
                return;
            }
        };
        while !self.stopped() {
            if let Err(e) = rt.block_on(self.serve()) {
                log::debug!("ops responder for {}: {e}; retrying", self.agent);
            }
            // Not for an agent deleted meanwhile: its keys are gone, and
            // making the group again would make its outbox again.
            std::thread::sleep(Duration::from_secs(1));
            if !agents(&self.shared).contains(&self.agent) {
                break;
            }
        }
        self.feeds.remove(self.agent.as_str());
        let _ = self.kick.try_send(());
    }

    async fn serve(&self) -> Result<(), ServeError> {
        let mut con = connect(&self.lanes).await?;
        let key = StreamKey::outbox(&self.agent, NAME).to_string();
        let made: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut con)
            .await;
        match made {
            Ok(()) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(source) => return Err(ServeError::Group { key, source }),
        }
        // Entries read but not answered before a crash come first, all of
        // them: each is acknowledged once answered, so this ends.
        loop {
            let pending = self.read(&mut con, &key, "0", None).await?;
            if pending.is_empty() {
                break;
            }
            self.answer_all(&mut con, &key, pending).await?;
        }
        while !self.stopped() {
            let fresh = self.read(&mut con, &key, ">", Some(BLOCK_MS)).await?;
            self.answer_all(&mut con, &key, fresh).await?;
            self.forward_feed(&mut con).await?;
        }
        Ok(())
    }

    async fn read(
        &self,
        con: &mut Con,
        key: &str,
        from: &str,
        block: Option<u64>,
    ) -> Result<Vec<Entry>, ServeError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(CONSUMER)
            .arg("COUNT")
            .arg(BATCH);
        if let Some(ms) = block {
            cmd.arg("BLOCK").arg(ms);
        }
        cmd.arg("STREAMS").arg(key).arg(from);
        // Raw values: a typed read would fail the whole batch (and again
        // at every restart) on one field name that is not UTF-8.
        let reply: redis::Value =
            cmd.query_async(con)
                .await
                .map_err(|source| ServeError::Read {
                    key: key.to_string(),
                    source,
                })?;
        Ok(entry::entries(reply))
    }

    async fn answer_all(
        &self,
        con: &mut Con,
        key: &str,
        entries: Vec<Entry>,
    ) -> Result<(), ServeError> {
        for e in entries {
            // The answer and the ack in one transaction: a daemon that dies
            // between them answers the request again after its restart, and
            // a reader that sees the answer sees the request done.
            let mut pipe = redis::pipe();
            pipe.atomic();
            // A deleted entry still pending has nothing to answer.
            let answered = e.fields.is_some();
            if let Some(fields) = e.fields {
                let response = match fields.and_then(|f| parse_request(&f)) {
                    Err(err) => Response::err(0, err.into()),
                    Ok(req) => ask(&self.tx, self.agent.as_str(), req, self.settings.timeout),
                };
                pipe.add_command(self.reply(&e.id, response)).ignore();
            }
            pipe.cmd("XACK").arg(key).arg(GROUP).arg(&e.id).ignore();
            pipe.query_async::<()>(con).await.map_err(|source| {
                if answered {
                    ServeError::Reply {
                        agent: self.agent.clone(),
                        source,
                    }
                } else {
                    ServeError::Ack {
                        key: key.to_string(),
                        source,
                    }
                }
            })?;
        }
        Ok(())
    }

    /// Moves what the agent's feed holds into its inbox, oldest first.
    async fn forward_feed(&self, con: &mut Con) -> Result<(), ServeError> {
        loop {
            let batch = self.feeds.drain(self.agent.as_str(), FEED_BATCH);
            if batch.is_empty() {
                return Ok(());
            }
            let mut pipe = redis::pipe();
            for next in batch {
                let json = match serde_json::to_string(&streamed(next)) {
                    Ok(j) => j,
                    Err(e) => {
                        log::warn!("ops feed of {}: a record not encoded: {e}", self.agent);
                        continue;
                    }
                };
                pipe.cmd("XADD")
                    .arg(StreamKey::inbox(&self.agent, NAME).to_string())
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(INBOX_MAXLEN)
                    .arg("*")
                    .arg("stream")
                    .arg(json)
                    .ignore();
            }
            pipe.query_async::<()>(con)
                .await
                .map_err(|source| ServeError::Reply {
                    agent: self.agent.clone(),
                    source,
                })?;
        }
    }

    /// The XADD of the answer to `request_id`.
    fn reply(&self, request_id: &str, response: Response) -> redis::Cmd {
        let (json, truncated) = entry::bounded(response, self.settings.max_reply);
        let mut cmd = redis::cmd("XADD");
        cmd.arg(StreamKey::inbox(&self.agent, NAME).to_string())
            .arg("MAXLEN")
            .arg("~")
            .arg(INBOX_MAXLEN)
            .arg("*")
            .arg(REQUEST_ID)
            .arg(request_id)
            .arg("response")
            .arg(json);
        if let Some(note) = truncated {
            cmd.arg("truncated").arg(note);
        }
        cmd
    }
}

/// A feed's record as the `subscribe` stream has it.
fn streamed(next: Next) -> Streamed {
    match next {
        Next::Missed(n) => Streamed::Missed(n),
        Next::Record(r) => match &*r {
            Published::Event { record, .. } => Streamed::Event(record.clone()),
            Published::Refusal(a) => Streamed::Refusal(a.clone()),
        },
    }
}

fn ask(tx: &ToDaemon, agent: &str, req: Request, timeout: Duration) -> Response {
    let id = req.id;
    let (rtx, rrx) = std::sync::mpsc::channel();
    let sent = tx.send(OpsRequest {
        agent: agent.to_string(),
        req,
        reply: rtx,
    });
    // The agent gets the error a socket would give, converted where the
    // daemon converts all of its errors.
    let unavailable = |e: Error| Response::err(id, ErrorBody::from(e));
    if sent.is_err() {
        return unavailable(Error::DaemonStopping);
    }
    match rrx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => unavailable(Error::OpsTimeout {
            secs: timeout.as_secs(),
        }),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => unavailable(Error::DaemonTimeout),
    }
}

/// Reads a request from an entry's fields.
pub fn parse_request(fields: &BTreeMap<String, String>) -> Result<Request, Error> {
    let value = match fields.get("request") {
        Some(text) => {
            serde_json::from_str::<serde_json::Value>(text).map_err(Error::RequestNotJson)?
        }
        None => {
            let mut m = serde_json::Map::new();
            for (k, v) in fields {
                // Numbers (lines, limit, id) are sent as strings in a stream entry.
                let val = v
                    .parse::<u64>()
                    .map(serde_json::Value::from)
                    .unwrap_or_else(|_| serde_json::Value::String(v.clone()));
                m.insert(k.clone(), val);
            }
            serde_json::Value::Object(m)
        }
    };
    let mut req: Request = serde_json::from_value(value).map_err(Error::NotARequest)?;
    // The lane is the identity: a claim in the payload is ignored.
    req.claim = None;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_from_fields() {
        let mut f = BTreeMap::new();
        f.insert(
            "request".to_string(),
            r#"{"op":"restart","target":"web","claim":"human:x"}"#.to_string(),
        );
        let r = parse_request(&f).unwrap();
        assert_eq!(r.op.name(), "restart");
        assert!(r.claim.is_none());
        let mut f = BTreeMap::new();
        f.insert("op".to_string(), "logs".to_string());
        f.insert("target".to_string(), "web".to_string());
        f.insert("lines".to_string(), "5".to_string());
        assert_eq!(parse_request(&f).unwrap().op.name(), "logs");
        let mut f = BTreeMap::new();
        f.insert("request".to_string(), "nope".to_string());
        assert_eq!(
            ErrorBody::from(parse_request(&f).unwrap_err()).code,
            oxidepm_proto::ErrorCode::BadRequest
        );
    }
}
