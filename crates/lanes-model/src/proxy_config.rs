//! The lane proxy's configuration file (JSON), written by the daemon.
//!
//! ```json
//! {
//!   "upstream": "/home/u/.oxidepm/redis/redis.sock",
//!   "lanes_dir": "/home/u/.oxidepm/lanes",
//!   "families": ["webhook", "email", "ops"],
//!   "agents": [
//!     { "name": "alice", "password_file": "/home/u/.oxidepm/secrets/agent_alice",
//!       "uid": 1001, "socket_mode": 384, "rate_limit": null, "maxlen": null,
//!       "quota": 134217728 }
//!   ]
//! }
//! ```
//!
//! Optional top-level keys: `check_peer_uid` (default true), `families`
//! (the outbox families agents may append to; default none),
//! `meter_interval_ms` (how often a busy lane's outboxes are measured) and
//! `limits` (see [`LimitsConfig`]). Optional agent keys: `uid` (owner of
//! the socket and the uid allowed to connect; default: the proxy's own),
//! `socket_mode` (default 0o600), `rate_limit` (commands per second, burst
//! of one second's worth), `maxlen` (undelivered entries an outbox may
//! hold), `quota` (bytes the agent's outboxes may hold), `max_connections`
//! (default 16). Unknown keys are errors, so a typo does not silently turn
//! a limit off.

use crate::config::{load_json, ConfigError};
use crate::name::AgentName;
use crate::stream_key::is_family_name;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The socket of `agent`'s lane in `lanes_dir`: `<agent>.sock`.
pub fn agent_socket(lanes_dir: &Path, agent: &AgentName) -> PathBuf {
    lanes_dir.join(format!("{agent}.sock"))
}

/// The whole file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The lanes' Redis: the private one's unix socket, or `[lanes]
    /// redis_url` (see [`crate::redis_url`]).
    pub upstream: crate::redis_url::RedisUrl,
    /// TLS files for a `rediss` upstream.
    #[serde(default, skip_serializing_if = "crate::redis_url::TlsFiles::is_empty")]
    pub tls: crate::redis_url::TlsFiles,
    /// How keys name their agent (see [`crate::stream_key::KeyForm`]).
    #[serde(default)]
    pub key_form: crate::stream_key::KeyForm,
    /// Where `<agent>.sock` files are created.
    pub lanes_dir: PathBuf,
    /// The lanes served.
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    /// Refuse peers whose uid (SO_PEERCRED) is neither the agent's nor the
    /// proxy's own. Turn off only where uids are remapped (containers with
    /// user namespaces), where the socket's bind-mount is the guard.
    #[serde(default = "yes")]
    pub check_peer_uid: bool,
    /// Bounds on what clients send and what the proxy holds for them.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// The outbox families (sources and responders): an agent may append
    /// to `<agent>:<family>:outbox` for these and no other. Absent: none.
    #[serde(default)]
    pub families: Vec<String>,
    /// How often, in milliseconds, the outboxes of a lane in use are
    /// measured (their length and memory, for `maxlen` and `quota`), and
    /// the entries every consumer group has acknowledged removed.
    #[serde(default = "default_meter_interval_ms")]
    pub meter_interval_ms: u64,
    /// The responders' lanes (apps of kind `responder`), served in the
    /// proxy's responder mode. Absent: none.
    #[serde(default)]
    pub responders: Vec<ResponderConfig>,
}

fn yes() -> bool {
    true
}

fn default_meter_interval_ms() -> u64 {
    1000
}

/// Bounds on client input and on what the proxy holds, the same for every
/// lane. Sizes are in bytes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest argument (a value), in bytes (default 1 MiB).
    pub max_bulk: usize,
    /// Most arguments in one command (default 16,384).
    pub max_elements: usize,
    /// Largest command, in bytes (default 1 MiB + 64 KiB: a value of
    /// `max_bulk` and room for its key and field names).
    pub max_command: usize,
    /// Most commands read from one client and not yet answered (default
    /// 1024); past it the proxy stops reading that client.
    pub max_pipeline: usize,
    /// Bytes of client commands the proxy buffers for one lane, across all
    /// its connections (default 4 MiB). A connection that needs more waits
    /// (within `command_timeout_ms`) and reads nothing meanwhile.
    pub lane_buffer: usize,
    /// Milliseconds a client has to finish a command once its first byte
    /// arrived (default 10,000); then it gets an error and is closed.
    pub command_timeout_ms: u64,
    /// Bytes of Redis's replies the proxy reads for one connection before
    /// it waits for the client to take them (default 64 KiB).
    pub reply_buffer: usize,
    /// Longest consumer name an agent may give (XREADGROUP, XCLAIM,
    /// XAUTOCLAIM, XGROUP CREATECONSUMER), in bytes (default 64).
    pub max_consumer_name: usize,
    /// Distinct consumer names one agent may have in its inboxes' consumer
    /// groups (default 32): each is memory in Redis that no quota counts.
    pub max_consumers: usize,
    /// Most commands one transaction (MULTI … EXEC) may queue (default
    /// 1024): Redis holds them, unbounded, until EXEC.
    pub max_transaction_commands: usize,
    /// Most bytes of commands a lane's open transactions may queue together,
    /// each argument weighed with what Redis keeps for it (default 4 MiB).
    pub max_transaction_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_bulk: 1 << 20,
            max_elements: 16 << 10,
            max_command: (1 << 20) + (64 << 10),
            max_pipeline: 1024,
            lane_buffer: 4 << 20,
            command_timeout_ms: 10_000,
            reply_buffer: 64 << 10,
            max_consumer_name: 64,
            max_consumers: 32,
            max_transaction_commands: 1024,
            max_transaction_bytes: 4 << 20,
        }
    }
}

/// One agent's lane.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent.
    pub name: AgentName,
    /// File holding the clear password of ACL user `agent_<name>`.
    pub password_file: PathBuf,
    /// Owner of the socket and the uid allowed to connect (default: the
    /// proxy's own).
    #[serde(default)]
    pub uid: Option<u32>,
    /// Mode of the socket file.
    #[serde(default = "default_socket_mode")]
    pub socket_mode: u32,
    /// Commands per second (burst of one second's worth).
    #[serde(default)]
    pub rate_limit: Option<f64>,
    /// Undelivered entries one outbox may hold; an XADD beyond is refused
    /// (nothing is trimmed).
    #[serde(default)]
    pub maxlen: Option<u64>,
    /// Bytes the agent's outboxes may hold together; an XADD beyond is
    /// refused.
    #[serde(default)]
    pub quota: Option<u64>,
    /// Client connections at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

impl AgentConfig {
    /// The lane of `name` with the defaults of every optional key.
    pub fn new(name: AgentName, password_file: PathBuf) -> AgentConfig {
        AgentConfig {
            name,
            password_file,
            uid: None,
            socket_mode: default_socket_mode(),
            rate_limit: None,
            maxlen: None,
            quota: None,
            max_connections: default_max_connections(),
        }
    }
}

fn default_socket_mode() -> u32 {
    0o600
}

/// Connections per lane: enough for an agent's reader, writer and a few
/// tools; each may hold a command in `lane_buffer`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

impl ProxyConfig {
    /// A configuration with the defaults of every optional key.
    pub fn new(
        upstream: impl Into<crate::redis_url::RedisUrl>,
        lanes_dir: PathBuf,
        agents: Vec<AgentConfig>,
    ) -> ProxyConfig {
        ProxyConfig {
            upstream: upstream.into(),
            tls: Default::default(),
            key_form: Default::default(),
            lanes_dir,
            agents,
            check_peer_uid: yes(),
            limits: LimitsConfig::default(),
            families: Vec::new(),
            meter_interval_ms: default_meter_interval_ms(),
            responders: Vec::new(),
        }
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
        let cfg: ProxyConfig = load_json(path)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what serde cannot: duplicates, ranges.
    pub fn validate(&self) -> Result<(), ProxyConfigError> {
        self.limits.validate()?;
        if !(10..=3_600_000).contains(&self.meter_interval_ms) {
            return Err(ProxyConfigError::MeterInterval {
                value: self.meter_interval_ms,
            });
        }
        for (i, f) in self.families.iter().enumerate() {
            if !is_family_name(f) || self.families[..i].contains(f) {
                return Err(ProxyConfigError::Family { name: f.clone() });
            }
        }
        let mut seen = std::collections::HashSet::new();
        for a in &self.agents {
            let agent = || a.name.clone();
            if !seen.insert(a.name.as_str()) {
                return Err(ProxyConfigError::Twice { agent: agent() });
            }
            if a.socket_mode & !0o777 != 0 {
                return Err(ProxyConfigError::SocketMode {
                    agent: agent(),
                    mode: a.socket_mode,
                });
            }
            if a.rate_limit.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
                return Err(ProxyConfigError::RateLimit { agent: agent() });
            }
            if a.maxlen == Some(0) {
                return Err(ProxyConfigError::Maxlen { agent: agent() });
            }
            if a.quota == Some(0) {
                return Err(ProxyConfigError::Quota { agent: agent() });
            }
            if a.max_connections == 0 {
                return Err(ProxyConfigError::MaxConnections { agent: agent() });
            }
        }
        validate_responders(&self.responders, &self.agents)
    }

    /// The lane of agent `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.name == name)
    }
}

impl LimitsConfig {
    /// Checks that every bound can be met: none is zero, and the largest
    /// command fits in a lane's buffer.
    pub fn validate(&self) -> Result<(), ProxyConfigError> {
        if self.max_bulk == 0
            || self.max_elements == 0
            || self.max_command == 0
            || self.max_pipeline == 0
            || self.command_timeout_ms == 0
            || self.max_consumer_name == 0
            || self.max_consumers == 0
            || self.max_transaction_commands == 0
            || self.max_transaction_bytes == 0
        {
            return Err(ProxyConfigError::Limits);
        }
        if self.max_command > self.lane_buffer {
            return Err(ProxyConfigError::LaneBuffer {
                lane_buffer: self.lane_buffer,
                max_command: self.max_command,
            });
        }
        if self.reply_buffer < MIN_REPLY_BUFFER {
            return Err(ProxyConfigError::ReplyBuffer {
                value: self.reply_buffer,
            });
        }
        Ok(())
    }
}

/// The smallest `reply_buffer`: below it a connection would read Redis a
/// few bytes at a time.
pub const MIN_REPLY_BUFFER: usize = 4 << 10;

/// Why the proxy's values do not fit together.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProxyConfigError {
    /// A limit is zero.
    #[error(
        "limits max_bulk, max_elements, max_command, max_pipeline, command_timeout_ms, max_consumer_name, max_consumers, max_transaction_commands and max_transaction_bytes must all be at least 1"
    )]
    Limits,
    /// The largest command does not fit in a lane's buffer.
    #[error(
        "limits: lane_buffer ({lane_buffer} bytes) must be at least max_command ({max_command} bytes), or no command of that size could ever be read"
    )]
    LaneBuffer {
        /// `lane_buffer` as given.
        lane_buffer: usize,
        /// `max_command` as given.
        max_command: usize,
    },
    /// A reply buffer too small to be useful.
    #[error("limits: reply_buffer {value} is below the minimum of {MIN_REPLY_BUFFER} bytes")]
    ReplyBuffer {
        /// The value as given.
        value: usize,
    },
    /// A measuring interval out of range.
    #[error("meter_interval_ms {value} must be between 10 and 3600000")]
    MeterInterval {
        /// The value as given.
        value: u64,
    },
    /// A family that cannot be one, or one listed twice.
    #[error("family {name:?} is listed twice or is not a family name (1 to 32 of a-z, 0-9, '_' and '-')")]
    Family {
        /// The name as given.
        name: String,
    },
    /// An agent has two lanes.
    #[error("agent '{agent}' is listed twice")]
    Twice {
        /// The agent.
        agent: AgentName,
    },
    /// A socket mode with more than permission bits.
    #[error("agent '{agent}': socket_mode {mode:o} is not a permission mode")]
    SocketMode {
        /// The agent.
        agent: AgentName,
        /// The mode as given.
        mode: u32,
    },
    /// A rate limit that is not a positive number.
    #[error("agent '{agent}': rate_limit must be a positive number of commands per second")]
    RateLimit {
        /// The agent.
        agent: AgentName,
    },
    /// `maxlen` 0.
    #[error("agent '{agent}': maxlen 0 would refuse every XADD; leave it out for no cap")]
    Maxlen {
        /// The agent.
        agent: AgentName,
    },
    /// `quota` 0.
    #[error("agent '{agent}': quota 0 would refuse every XADD; leave it out for no quota")]
    Quota {
        /// The agent.
        agent: AgentName,
    },
    /// `max_connections` 0.
    #[error("agent '{agent}': max_connections must be at least 1")]
    MaxConnections {
        /// The agent.
        agent: AgentName,
    },
    /// A responder's `reply_max_bytes` 0.
    #[error("responder '{agent}': reply_max_bytes 0 would refuse every reply")]
    ReplyMaxBytes {
        /// The responder.
        agent: AgentName,
    },
}

/// The largest `MAXLEN` a reply may give by default (`[lanes]
/// responder_inbox_maxlen`): every reply caps the inbox it goes to, so a
/// responder cannot fill Redis through one agent's inbox.
pub const DEFAULT_INBOX_MAXLEN: u64 = 1000;

/// The largest reply by default (`[lanes] responder_reply_max_bytes`), in
/// bytes of field names and values: with the inbox's `MAXLEN`, it bounds
/// the memory a responder can fill in one agent's inbox (1000 replies of a
/// whole command each would be a gigabyte).
pub const DEFAULT_REPLY_MAX_BYTES: usize = 64 << 10;

/// One responder's lane in the proxy's configuration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResponderConfig {
    /// The responder (its family, group and socket name).
    pub name: AgentName,
    /// File holding the clear password of ACL user `resp_<name>`.
    pub password_file: PathBuf,
    /// Owner of the socket and the uid allowed to connect (default: the
    /// proxy's own).
    #[serde(default)]
    pub uid: Option<u32>,
    /// Client connections at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// The largest `MAXLEN` a reply may give (every reply gives one).
    #[serde(default = "default_inbox_maxlen")]
    pub inbox_maxlen: u64,
    /// The largest reply, in bytes of field names and values.
    #[serde(default = "default_reply_max_bytes")]
    pub reply_max_bytes: usize,
}

fn default_inbox_maxlen() -> u64 {
    DEFAULT_INBOX_MAXLEN
}

fn default_reply_max_bytes() -> usize {
    DEFAULT_REPLY_MAX_BYTES
}

impl ResponderConfig {
    /// The lane of responder `name` with the defaults of every optional key.
    pub fn new(name: AgentName, password_file: PathBuf) -> ResponderConfig {
        ResponderConfig {
            name,
            password_file,
            uid: None,
            max_connections: default_max_connections(),
            inbox_maxlen: DEFAULT_INBOX_MAXLEN,
            reply_max_bytes: DEFAULT_REPLY_MAX_BYTES,
        }
    }
}

/// Checks the responders against each other and the agents: a name is
/// one lane's only.
fn validate_responders(
    responders: &[ResponderConfig],
    agents: &[AgentConfig],
) -> Result<(), ProxyConfigError> {
    for (i, r) in responders.iter().enumerate() {
        let twice = responders[..i].iter().any(|o| o.name == r.name)
            || agents.iter().any(|a| a.name == r.name);
        if twice {
            return Err(ProxyConfigError::Twice {
                agent: r.name.clone(),
            });
        }
        if r.max_connections == 0 {
            return Err(ProxyConfigError::MaxConnections {
                agent: r.name.clone(),
            });
        }
        if r.inbox_maxlen == 0 {
            return Err(ProxyConfigError::Maxlen {
                agent: r.name.clone(),
            });
        }
        if r.reply_max_bytes == 0 {
            return Err(ProxyConfigError::ReplyMaxBytes {
                agent: r.name.clone(),
            });
        }
    }
    Ok(())
}

impl From<ProxyConfigError> for ConfigError {
    fn from(e: ProxyConfigError) -> ConfigError {
        ConfigError::Invalid(Box::new(e))
    }
}

#[cfg(test)]
mod tests;
