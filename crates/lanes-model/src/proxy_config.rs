//! The lane proxy's configuration file (JSON), written by the daemon.
//!
//! ```json
//! {
//!   "upstream": "/home/u/.oxidepm/redis/redis.sock",
//!   "lanes_dir": "/home/u/.oxidepm/lanes",
//!   "agents": [
//!     { "name": "alice", "password_file": "/home/u/.oxidepm/secrets/agent_alice",
//!       "uid": 1001, "socket_mode": 384, "rate_limit": null, "maxlen": null }
//!   ]
//! }
//! ```
//!
//! Optional top-level keys: `check_peer_uid` (default true) and `limits`
//! (`max_bulk`, `max_elements`, `max_command`, `max_pipeline`). Optional
//! agent keys: `uid` (owner of the socket and the uid allowed to connect;
//! default: the proxy's own), `socket_mode` (default 0o600), `rate_limit`
//! (commands per second, burst of one second's worth), `maxlen` (XADD cap),
//! `max_connections` (default 256). Unknown keys are errors, so a typo does
//! not silently turn a limit off.

use crate::config::{load_json, ConfigError};
use crate::name::AgentName;
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
    /// The private Redis's unix socket.
    pub upstream: PathBuf,
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
    /// Bounds on what clients send.
    #[serde(default)]
    pub limits: LimitsConfig,
}

fn yes() -> bool {
    true
}

/// Bounds on client input, the same for every lane.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest argument, in bytes (default 64 MiB).
    pub max_bulk: usize,
    /// Most arguments in one command (default 1,048,576).
    pub max_elements: usize,
    /// Largest command, in bytes (default 128 MiB).
    pub max_command: usize,
    /// Most commands read from one client and not yet answered (default
    /// 1024); past it the proxy stops reading that client.
    pub max_pipeline: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_bulk: 64 << 20,
            max_elements: 1 << 20,
            max_command: 128 << 20,
            max_pipeline: 1024,
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
    /// Cap (`MAXLEN ~`) put on every XADD.
    #[serde(default)]
    pub maxlen: Option<u64>,
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
            max_connections: default_max_connections(),
        }
    }
}

fn default_socket_mode() -> u32 {
    0o600
}

fn default_max_connections() -> usize {
    256
}

impl ProxyConfig {
    /// A configuration with the defaults of every optional key.
    pub fn new(upstream: PathBuf, lanes_dir: PathBuf, agents: Vec<AgentConfig>) -> ProxyConfig {
        ProxyConfig {
            upstream,
            lanes_dir,
            agents,
            check_peer_uid: yes(),
            limits: LimitsConfig::default(),
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
        let l = &self.limits;
        if l.max_bulk == 0 || l.max_elements == 0 || l.max_command == 0 || l.max_pipeline == 0 {
            return Err(ProxyConfigError::Limits);
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
            if a.max_connections == 0 {
                return Err(ProxyConfigError::MaxConnections { agent: agent() });
            }
        }
        Ok(())
    }

    /// The lane of agent `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.name == name)
    }
}

/// Why the proxy's values do not fit together.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProxyConfigError {
    /// A limit is zero.
    #[error("limits must all be at least 1")]
    Limits,
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
    #[error("agent '{agent}': maxlen 0 would empty every stream it writes")]
    Maxlen {
        /// The agent.
        agent: AgentName,
    },
    /// `max_connections` 0.
    #[error("agent '{agent}': max_connections must be at least 1")]
    MaxConnections {
        /// The agent.
        agent: AgentName,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_form() {
        let cfg: ProxyConfig = serde_json::from_str(
            r#"{ "upstream": "/r.sock", "lanes_dir": "/l", "agents": [
                 {"name":"alice","password_file":"/s/a","uid":1001,"socket_mode":384,
                  "rate_limit": null, "maxlen": null} ] }"#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert!(cfg.check_peer_uid);
        assert_eq!(cfg.limits.max_pipeline, 1024);
        let a = cfg.agent("alice").unwrap();
        assert_eq!(
            (a.uid, a.socket_mode, a.max_connections),
            (Some(1001), 0o600, 256)
        );
    }

    #[test]
    fn rejects_bad_names() {
        for name in ["a*", "Alice", "bridge"] {
            let text = format!(
                r#"{{"upstream":"/r","lanes_dir":"/l","agents":[{{"name":"{name}","password_file":"/p"}}]}}"#
            );
            let e = serde_json::from_str::<ProxyConfig>(&text).unwrap_err();
            assert!(e.to_string().contains("agent name"), "{name}: {e}");
        }
    }

    #[test]
    fn writes_what_it_reads() {
        let mut a = AgentConfig::new("alice".parse().unwrap(), "/s/agent_alice".into());
        a.uid = Some(1001);
        a.rate_limit = Some(2.5);
        let cfg = ProxyConfig::new("/r.sock".into(), "/l".into(), vec![a]);
        let text = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<ProxyConfig>(&text).unwrap(), cfg);
        let minimal: ProxyConfig = serde_json::from_str(
            r#"{"upstream":"/r.sock","lanes_dir":"/l","agents":[
                {"name":"alice","password_file":"/s/agent_alice","uid":1001,"rate_limit":2.5}]}"#,
        )
        .unwrap();
        assert_eq!(minimal, cfg);
        assert_eq!(
            agent_socket(&cfg.lanes_dir, &cfg.agents[0].name),
            Path::new("/l/alice.sock")
        );
    }

    #[test]
    fn rejects_typos() {
        assert!(serde_json::from_str::<ProxyConfig>(
            r#"{"upstream":"/r","lanes_dir":"/l","agents":[{"name":"a","password_file":"/p","ratelimit":5}]}"#
        )
        .is_err());
    }

    #[test]
    fn rejects_duplicates_and_zero_limits() {
        let mut cfg: ProxyConfig = serde_json::from_str(
            r#"{"upstream":"/r","lanes_dir":"/l","agents":[
                {"name":"a","password_file":"/p"},{"name":"a","password_file":"/q"}]}"#,
        )
        .unwrap();
        assert!(cfg.validate().is_err());
        cfg.agents.pop();
        cfg.validate().unwrap();
        cfg.agents[0].maxlen = Some(0);
        assert!(cfg.validate().is_err());
    }
}
