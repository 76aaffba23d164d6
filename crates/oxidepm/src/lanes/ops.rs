//! The `ops` responder: an agent asks the daemon for what its grant allows
//! (itself, and the apps `[agents.<name>]` grants it) through its own lane.
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

use super::error::{ConnectError, Error};
use super::layout::Layout;
use crate::supervise::{lock, Shared};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::{AclUser, AgentName, Secret, SecretError, StreamKey};
use oxidepm_proto::{AppKind, ErrorBody, Request, Response};
use redis::streams::{StreamReadOptions, StreamReadReply};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The responder's name (stream family and ACL user suffix).
pub const NAME: &str = "ops";
/// Consumer group of the responder on every `<agent>:ops:outbox`.
const GROUP: &str = "ops";
/// Its consumer name; stable, so a restarted daemon finds its pending entries.
const CONSUMER: &str = "oxidepmd";

/// One request for the daemon to answer.
pub struct OpsRequest {
    /// The agent, from the stream key.
    pub agent: String,
    /// What it asks.
    pub req: Request,
    /// Where the answer goes.
    pub reply: std::sync::mpsc::Sender<Response>,
}

/// Runs the responder on its own thread until `tx` is closed.
pub fn spawn(layout: Layout, shared: Shared, tx: tokio::sync::mpsc::UnboundedSender<OpsRequest>) {
    let spawned = std::thread::Builder::new()
        .name("ops-responder".into())
        .spawn(move || {
            while !tx.is_closed() {
                if let Err(e) = serve(&layout, &shared, &tx) {
                    log::debug!("ops responder: {e}; retrying");
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the ops responder: {e}");
    }
}

fn user() -> AclUser {
    AclUser::Responder(NAME.to_string())
}

/// Why the responder stopped serving; it logs this and starts again.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("no password for {user}: {source}")]
    NoPassword { user: AclUser, source: SecretError },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("no lanes yet")]
    NoLanes,
    #[error("no agents")]
    NoAgents,
    #[error("XGROUP CREATE {key}: {source}")]
    Group {
        key: String,
        source: redis::RedisError,
    },
    #[error("{0}")]
    Read(#[source] redis::RedisError),
    #[error("reply to {agent}: {source}")]
    Reply {
        agent: AgentName,
        source: redis::RedisError,
    },
    #[error("{0}")]
    Ack(#[source] redis::RedisError),
}

fn connect(layout: &Layout) -> Result<redis::Connection, ServeError> {
    let user = user();
    let pw = match Secret::read(&secrets::path(&layout.secrets_dir(), &user)) {
        Ok(pw) => pw,
        Err(source) => return Err(ServeError::NoPassword { user, source }),
    };
    Ok(super::admin::connect_as(
        &layout.redis_socket(),
        &user,
        &pw,
    )?)
}

/// The agents, as far as they have a lane (see `Lanes::agents`).
fn agents(shared: &Shared) -> Vec<AgentName> {
    lock(shared)
        .apps()
        .filter(|a| a.spec.kind == AppKind::Agent)
        .filter_map(|a| a.spec.name.parse().ok())
        .collect()
}

fn serve(
    layout: &Layout,
    shared: &Shared,
    tx: &tokio::sync::mpsc::UnboundedSender<OpsRequest>,
) -> Result<(), ServeError> {
    if !layout.redis_socket().exists() || agents(shared).is_empty() {
        return Err(ServeError::NoLanes);
    }
    let mut con = connect(layout)?;
    let mut ready: HashSet<String> = HashSet::new();
    loop {
        if tx.is_closed() {
            return Ok(());
        }
        let keys: Vec<String> = agents(shared)
            .iter()
            .map(|a| StreamKey::outbox(a, NAME).to_string())
            .collect();
        if keys.is_empty() {
            return Err(ServeError::NoAgents);
        }
        let mut fresh = Vec::new();
        for k in &keys {
            if !ready.contains(k) {
                let r: redis::RedisResult<()> = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(k)
                    .arg(GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query(&mut con);
                match r {
                    Ok(()) => {}
                    Err(e) if e.code() == Some("BUSYGROUP") => {}
                    Err(source) => {
                        return Err(ServeError::Group {
                            key: k.clone(),
                            source,
                        })
                    }
                }
                ready.insert(k.clone());
                fresh.push(k.clone());
            }
        }
        // Entries read but not answered before a crash come first.
        if !fresh.is_empty() {
            let ids = vec!["0"; fresh.len()];
            let opts = StreamReadOptions::default()
                .group(GROUP, CONSUMER)
                .count(64);
            let pending: StreamReadReply =
                redis::Commands::xread_options(&mut con, &fresh, &ids, &opts)
                    .map_err(ServeError::Read)?;
            handle(&mut con, tx, pending)?;
        }
        let ids = vec![">"; keys.len()];
        let opts = StreamReadOptions::default()
            .group(GROUP, CONSUMER)
            .count(32)
            .block(1000);
        let got: Option<StreamReadReply> =
            redis::Commands::xread_options(&mut con, &keys, &ids, &opts)
                .map_err(ServeError::Read)?;
        if let Some(got) = got {
            handle(&mut con, tx, got)?;
        }
    }
}

fn handle(
    con: &mut redis::Connection,
    tx: &tokio::sync::mpsc::UnboundedSender<OpsRequest>,
    reply: StreamReadReply,
) -> Result<(), ServeError> {
    for key in reply.keys {
        let Ok(outbox) = key.key.parse::<StreamKey>() else {
            continue;
        };
        let agent = outbox.agent;
        for entry in key.ids {
            let fields: BTreeMap<String, String> = entry
                .map
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), redis::from_redis_value::<String>(v).ok()?)))
                .collect();
            let response = match parse_request(&fields) {
                Err(e) => Response::err(0, e.into()),
                Ok(req) => ask(tx, agent.as_str(), req),
            };
            let json = serde_json::to_string(&response).unwrap_or_default();
            redis::cmd("XADD")
                .arg(StreamKey::inbox(&agent, NAME).to_string())
                .arg("*")
                .arg("request_id")
                .arg(&entry.id)
                .arg("response")
                .arg(json)
                .query::<String>(con)
                .map_err(|source| ServeError::Reply {
                    agent: agent.clone(),
                    source,
                })?;
            redis::cmd("XACK")
                .arg(&key.key)
                .arg(GROUP)
                .arg(&entry.id)
                .query::<i64>(con)
                .map_err(ServeError::Ack)?;
        }
    }
    Ok(())
}

fn ask(tx: &tokio::sync::mpsc::UnboundedSender<OpsRequest>, agent: &str, req: Request) -> Response {
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
    rrx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| unavailable(Error::DaemonTimeout))
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
