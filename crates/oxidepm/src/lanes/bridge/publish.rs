//! The only way into an inbox.
//!
//! [`publish`] routes one inbound message and writes it, in one pipeline:
//!
//! ```text
//! XADD <agent>:<source>:inbox * source … channel … sender … text …
//!      received_at <RFC 3339> external_id … [guild …] [address …] [extra …]
//! HINCRBY bridge:stats routed 1
//! ```
//!
//! or, when no route and no default agent matches, the same fields to
//! `bridge:unrouted` and `unrouted` counted. Nothing is dropped: when Redis
//! cannot take the message, `publish` fails and the source must answer its
//! sender with a failure.

use super::routing::{RouteKey, Routes};
use super::source::Inbound;
use super::stats::{Counter, UNROUTED_KEY};
use redis::aio::ConnectionManager;
use std::fmt;
use std::sync::{Arc, RwLock};

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
];

/// What routing needs: the table and the configured sources.
#[derive(Clone, Debug, Default)]
pub struct RoutingTable {
    /// The routes and the default agent.
    pub routes: Routes,
    /// Source names messages may be published under.
    pub sources: Vec<String>,
}

impl RoutingTable {
    /// The table of a configuration.
    pub fn from_config(cfg: &super::BridgeConfig) -> Result<RoutingTable, String> {
        let specs = cfg
            .routes
            .iter()
            .map(|r| r.spec())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RoutingTable {
            routes: Routes::new(&specs, cfg.default_agent.clone()),
            sources: cfg.sources.clone(),
        })
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

/// Routes `m` by `table` and writes it to its inbox (or `bridge:unrouted`),
/// counting it. The one function that writes inboxes.
pub async fn publish(
    con: &mut ConnectionManager,
    table: &RoutingTable,
    m: &Inbound,
) -> Result<Published, PublishError> {
    if !table.sources.contains(&m.source) {
        return Err(PublishError::UnknownSource(m.source.clone()));
    }
    let key = RouteKey {
        source: &m.source,
        channel: Some(m.channel.as_str()),
        guild: m.guild.as_deref(),
        address: m.address.as_deref(),
    };
    let agent = table.routes.route(&key).map(|(a, _)| a.to_string());
    let (stream, counter) = match &agent {
        Some(a) => (format!("{a}:{}:inbox", m.source), Counter::Routed),
        None => (UNROUTED_KEY.to_string(), Counter::Unrouted),
    };
    let received_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);

    let mut pipe = redis::pipe();
    let xadd = pipe.cmd("XADD").arg(&stream).arg("*");
    xadd.arg("source").arg(&m.source);
    xadd.arg("channel").arg(&m.channel);
    xadd.arg("sender").arg(&m.sender);
    xadd.arg("text").arg(&m.text);
    xadd.arg("received_at").arg(&received_at);
    xadd.arg("external_id")
        .arg(m.external_id.as_deref().unwrap_or(""));
    if let Some(g) = &m.guild {
        xadd.arg("guild").arg(g);
    }
    if let Some(a) = &m.address {
        xadd.arg("address").arg(a);
    }
    for (k, v) in &m.extra {
        if !OWN_FIELDS.contains(&k.as_str()) && !k.is_empty() {
            xadd.arg(k).arg(v);
        }
    }
    counter.add_to(&mut pipe, 1);
    let (id,): (String,) = pipe
        .query_async(con)
        .await
        .map_err(|e| PublishError::Unavailable(e.to_string()))?;
    Ok(Published { agent, stream, id })
}

/// What sources hold to publish: a shared connection and the current
/// routing table, which a reload replaces.
#[derive(Clone)]
pub struct Publisher {
    con: ConnectionManager,
    table: Arc<RwLock<Arc<RoutingTable>>>,
}

impl Publisher {
    /// A publisher over `con`, routing by `table`.
    pub fn new(con: ConnectionManager, table: RoutingTable) -> Publisher {
        Publisher {
            con,
            table: Arc::new(RwLock::new(Arc::new(table))),
        }
    }

    /// Routes and writes one message (see [`publish`]).
    pub async fn publish(&self, m: &Inbound) -> Result<Published, PublishError> {
        let table = self.table();
        let mut con = self.con.clone();
        publish(&mut con, &table, m).await
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
