//! Where the lanes' files are, and what an agent is told about its lane.

use crate::paths::Home;
use oxidepm_lanes::{AclUser, AgentName, StreamKey};
use std::path::PathBuf;

/// Name of the system app running the private Redis.
pub const REDIS_APP: &str = "oxidepm-redis";
/// Name of the system app running the auth proxy.
pub const PROXY_APP: &str = "oxidepm-lanes";
/// Name of the adapter app running the bridge.
pub const BRIDGE_APP: &str = "oxidepm-bridge";

/// The files of the lanes under a home.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The home.
    pub home: Home,
}

impl Layout {
    /// The private Redis's directory (0700): config, ACL, append-only file, socket.
    pub fn redis_dir(&self) -> PathBuf {
        self.home.redis_dir()
    }
    /// The private Redis's unix socket.
    pub fn redis_socket(&self) -> PathBuf {
        self.redis_dir().join("redis.sock")
    }
    /// redis.conf.
    pub fn redis_conf(&self) -> PathBuf {
        self.redis_dir().join("redis.conf")
    }
    /// The ACL file.
    pub fn acl_file(&self) -> PathBuf {
        self.redis_dir().join("users.acl")
    }
    /// The proxy's configuration.
    pub fn proxy_conf(&self) -> PathBuf {
        self.redis_dir().join("proxy.json")
    }
    /// The bridge's files: everything it reads, and nothing else (0700, or
    /// 0710 with the group of the bridge's own user).
    pub fn bridge_dir(&self) -> PathBuf {
        self.home.root().join("bridge")
    }
    /// The bridge's configuration.
    pub fn bridge_conf(&self) -> PathBuf {
        self.bridge_dir().join("bridge.json")
    }
    /// The bridge's copy of its Redis password.
    pub fn bridge_password(&self) -> PathBuf {
        self.bridge_dir().join("password")
    }
    /// Where earlier versions kept the bridge's configuration.
    pub fn old_bridge_conf(&self) -> PathBuf {
        self.redis_dir().join("bridge.json")
    }
    /// Lane passwords (0700).
    pub fn secrets_dir(&self) -> PathBuf {
        self.home.secrets_dir()
    }
    /// Agent sockets and lane descriptions (0711: agents may reach their own
    /// socket by name, nobody may list the directory).
    pub fn lanes_dir(&self) -> PathBuf {
        self.home.lanes_dir()
    }
    /// An agent's socket.
    pub fn agent_socket(&self, agent: &AgentName) -> PathBuf {
        oxidepm_lanes::proxy_config::agent_socket(&self.lanes_dir(), agent)
    }
    /// An agent's lane description.
    pub fn agent_json(&self, agent: &AgentName) -> PathBuf {
        self.lanes_dir().join(format!("{agent}.json"))
    }
}

/// The streams of an agent: `(inboxes, outboxes)` for every family.
pub fn streams(agent: &AgentName, families: &[String]) -> (Vec<String>, Vec<String>) {
    let inboxes = families
        .iter()
        .map(|f| StreamKey::inbox(agent, f).to_string())
        .collect();
    let outboxes = families
        .iter()
        .map(|f| StreamKey::outbox(agent, f).to_string())
        .collect();
    (inboxes, outboxes)
}

/// The scheme of the URL an agent gets in `OXIDEPM_LANE`
/// (`[lanes] lane_url_scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum LaneUrlScheme {
    /// `unix:///…`: the one form redis-py, redis-rs, ioredis and node-redis
    /// all parse (the default).
    #[default]
    Unix,
    /// `redis+unix:///…`, what earlier versions gave; deprecated, because
    /// redis-py's `from_url` and node-redis's `url` refuse it.
    RedisUnix,
}

impl LaneUrlScheme {
    /// The URL of the socket at `path`.
    pub fn url(self, path: &std::path::Path) -> String {
        let scheme = match self {
            LaneUrlScheme::Unix => "unix",
            LaneUrlScheme::RedisUnix => "redis+unix",
        };
        format!("{scheme}://{}", path.display())
    }
}

impl TryFrom<String> for LaneUrlScheme {
    type Error = String;
    fn try_from(s: String) -> Result<LaneUrlScheme, String> {
        match s.as_str() {
            "unix" => Ok(LaneUrlScheme::Unix),
            "redis+unix" => Ok(LaneUrlScheme::RedisUnix),
            _ => Err(format!(
                "lane_url_scheme = {s:?} is not a scheme agents are given: use \"unix\" \
                 (the default) or, until agents stop expecting it, the deprecated \"redis+unix\""
            )),
        }
    }
}

/// What an agent app is told about its lane, as environment variables:
/// `OXIDEPM_LANE` is a URL for client libraries, `OXIDEPM_LANE_SOCKET` the
/// plain path for those that take a path.
pub fn agent_env(
    layout: &Layout,
    agent: &AgentName,
    families: &[String],
    scheme: LaneUrlScheme,
) -> Vec<(String, String)> {
    let (inboxes, outboxes) = streams(agent, families);
    let socket = layout.agent_socket(agent);
    vec![
        ("OXIDEPM_AGENT".into(), agent.to_string()),
        ("OXIDEPM_LANE".into(), scheme.url(&socket)),
        ("OXIDEPM_LANE_SOCKET".into(), socket.display().to_string()),
        ("OXIDEPM_INBOXES".into(), inboxes.join(",")),
        ("OXIDEPM_OUTBOXES".into(), outboxes.join(",")),
        ("OXIDEPM_GROUP".into(), agent.to_string()),
        (
            "OXIDEPM_SOCKET".into(),
            layout.home.agent_socket().display().to_string(),
        ),
    ]
}

/// The same facts as JSON, for programs that prefer a file.
pub fn agent_description(
    layout: &Layout,
    agent: &AgentName,
    families: &[String],
    scheme: LaneUrlScheme,
) -> serde_json::Value {
    let (inboxes, outboxes) = streams(agent, families);
    serde_json::json!({
        "agent": agent,
        "lane": scheme.url(&layout.agent_socket(agent)),
        "socket": layout.agent_socket(agent),
        "inboxes": inboxes,
        "outboxes": outboxes,
        "group": agent,
        "acl_user": AclUser::Agent(agent.clone()).to_string(),
        "oxidepm_socket": layout.home.agent_socket(),
    })
}
