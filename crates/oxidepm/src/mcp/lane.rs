//! `lane_read` and `lane_send`: an agent's own message lane, for a server
//! started inside an agent app. It goes through the lane socket the daemon
//! gave that app (`OXIDEPM_LANE_SOCKET`), exactly as the agent's own code
//! would: the lane proxy behind it decides what the connection may touch
//! (its own keys, with its own ACL user), so this server adds no way to
//! another agent's keys and holds no credential. Outside an agent there is
//! no lane, and both tools say so.

use super::bounds::{json_len, Bounds};
use super::daemon::Failure;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest a `lane_read` blocks, in seconds.
pub const MAX_BLOCK_SECS: u64 = 30;
/// The most entries one `lane_read` returns.
pub const MAX_READ: usize = 100;
/// The most fields one `lane_send` writes.
pub const MAX_FIELDS: usize = 64;
/// The longest field name, in bytes.
const MAX_FIELD_NAME: usize = 64;
/// The consumer name this server reads as, in the agent's group.
const CONSUMER: &str = "mcp";

/// What to read from the agent's inbox.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaneReadArgs {
    /// The source whose inbox to read: `webhook`, `consult`, `email`,
    /// `discord`, `ops` or a responder's.
    pub source: String,
    /// Entries to return, default 10, at most 100.
    pub count: Option<usize>,
    /// Seconds to wait for an entry when none is there, default 0 (do not
    /// wait), at most 30.
    pub block_secs: Option<u64>,
    /// Acknowledge what is returned (the default); false leaves the
    /// entries pending, to read again with `pending`.
    #[serde(default = "yes")]
    pub ack: bool,
    /// Read the entries delivered to this server before and never
    /// acknowledged, instead of new ones.
    #[serde(default)]
    pub pending: bool,
}

fn yes() -> bool {
    true
}

/// What to send through the agent's outbox.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaneSendArgs {
    /// The source whose outbox to write: `webhook`, `consult`, …
    pub source: String,
    /// The entry's fields (for consult: `to` and `text`, or `to`, `re` and
    /// `text` for an answer; for webhook: what its route names).
    pub fields: BTreeMap<String, String>,
}

/// This process's lane: the agent, its group and its socket.
struct Lane {
    agent: String,
    group: String,
    socket: String,
}

impl Lane {
    /// From the environment the daemon gives an agent app.
    fn here() -> Result<Lane, Failure> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        match (var("OXIDEPM_AGENT"), var("OXIDEPM_LANE_SOCKET")) {
            (Some(agent), Some(socket)) => Ok(Lane {
                group: var("OXIDEPM_GROUP").unwrap_or_else(|| agent.clone()),
                agent,
                socket,
            }),
            _ => Err(Failure {
                code: "E_NO_LANE".into(),
                message: "this MCP server is not running inside an agent app with a lane \
                          (OXIDEPM_AGENT and OXIDEPM_LANE_SOCKET are not set): start it from \
                          the agent's own process (`oxidepm start --kind agent …`), with lanes \
                          on in daemon.toml"
                    .into(),
            }),
        }
    }

    fn connect(&self, read_timeout: Duration) -> Result<redis::Connection, Failure> {
        let unavailable = |e: redis::RedisError| Failure {
            code: "E_UNAVAILABLE".into(),
            message: format!("the lane at {} did not answer: {e}", self.socket),
        };
        let c =
            redis::Client::open(format!("redis+unix://{}", self.socket)).map_err(unavailable)?;
        let con = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(unavailable)?;
        con.set_read_timeout(Some(read_timeout))
            .map_err(unavailable)?;
        Ok(con)
    }

    fn key(&self, source: &str, dir: &str) -> Result<String, Failure> {
        let ok = !source.is_empty()
            && source.len() <= 32
            && source
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(Failure::bad(format!(
                "source {:?}: 1 to 32 of a-z, 0-9, - and _ (webhook, consult, …)",
                source.chars().take(40).collect::<String>()
            )));
        }
        Ok(format!("{}:{source}:{dir}", self.agent))
    }
}

/// A refusal of the lane (NOPERM, a quota) as a tool error.
fn refused(e: redis::RedisError) -> Failure {
    Failure {
        code: e.code().unwrap_or("E_LANE").to_string(),
        message: format!("the lane refused it: {e}"),
    }
}

/// `lane_read`: entries of the agent's inbox of `source`, acknowledged
/// unless asked not to; what does not fit the result bound stays pending.
pub fn read(bounds: Bounds, a: LaneReadArgs) -> Result<Value, Failure> {
    let lane = Lane::here()?;
    let inbox = lane.key(&a.source, "inbox")?;
    let count = a.count.unwrap_or(10).clamp(1, MAX_READ);
    let block = a.block_secs.unwrap_or(0).min(MAX_BLOCK_SECS);
    let mut con = lane.connect(Duration::from_secs(block + 10))?;
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP").arg(&lane.group).arg(CONSUMER);
    cmd.arg("COUNT").arg(count);
    if block > 0 && !a.pending {
        cmd.arg("BLOCK").arg(block * 1000);
    }
    cmd.arg("STREAMS")
        .arg(&inbox)
        .arg(if a.pending { "0" } else { ">" });
    let reply: Option<redis::streams::StreamReadReply> = cmd.query(&mut con).map_err(refused)?;
    let mut entries = Vec::new();
    let mut size = 64;
    let mut left = 0;
    for e in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
        let fields: Map<String, Value> = e
            .map
            .iter()
            .map(|(k, v)| {
                let text = redis::from_redis_value::<String>(v).unwrap_or_default();
                (k.clone(), Value::String(text))
            })
            .collect();
        let entry = json!({ "id": e.id, "fields": fields });
        let n = json_len(&entry) + 1;
        if size + n > bounds.result_bytes || left > 0 {
            left += 1;
            continue;
        }
        size += n;
        entries.push(entry);
    }
    if a.ack && !entries.is_empty() {
        let mut ack = redis::cmd("XACK");
        ack.arg(&inbox).arg(&lane.group);
        for e in &entries {
            ack.arg(e["id"].as_str().unwrap_or_default());
        }
        ack.query::<i64>(&mut con).map_err(refused)?;
    }
    let mut out = json!({ "source": a.source, "entries": entries, "acked": a.ack });
    if left > 0 {
        out["left_pending"] = json!(left);
        out["hint"] = json!(format!(
            "{left} more entries did not fit the result bound and stay pending: \
             read them with pending = true and a smaller count"
        ));
    }
    Ok(out)
}

/// `lane_send`: one entry into the agent's outbox of `source`.
pub fn send(bounds: Bounds, a: LaneSendArgs) -> Result<Value, Failure> {
    let lane = Lane::here()?;
    let outbox = lane.key(&a.source, "outbox")?;
    if a.fields.is_empty() || a.fields.len() > MAX_FIELDS {
        return Err(Failure::bad(format!(
            "fields: 1 to {MAX_FIELDS} of them ({} given)",
            a.fields.len()
        )));
    }
    if let Some(k) = a
        .fields
        .keys()
        .find(|k| k.is_empty() || k.len() > MAX_FIELD_NAME)
    {
        return Err(Failure::bad(format!(
            "field name {:?}: 1 to {MAX_FIELD_NAME} bytes",
            k.chars().take(70).collect::<String>()
        )));
    }
    let size: usize = a.fields.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > bounds.result_bytes {
        return Err(Failure::bad(format!(
            "the entry is {size} bytes; at most {} through this server",
            bounds.result_bytes
        )));
    }
    let mut con = lane.connect(Duration::from_secs(10))?;
    let mut cmd = redis::cmd("XADD");
    cmd.arg(&outbox).arg("*");
    for (k, v) in &a.fields {
        cmd.arg(k).arg(v);
    }
    let id: String = cmd.query(&mut con).map_err(refused)?;
    Ok(json!({ "source": a.source, "id": id }))
}
