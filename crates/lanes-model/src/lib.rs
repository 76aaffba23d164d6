//! The vocabulary of oxidepm's message lanes, shared by the daemon, the
//! auth proxy, the bridge and the benchmark so that each rule exists once:
//! agent names, stream keys, ACL users and their rules, secrets, and the
//! configuration files the daemon writes for the proxy and the bridge,
//! with each bridge source's settings (one type, read from daemon.toml and
//! written into the bridge's file as is). No sockets, no async.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]
#![deny(missing_docs)]

pub mod acl;
pub mod bridge_config;
pub mod bridge_routes;
pub mod config;
pub mod consult;
pub mod lane_commands;
pub mod name;
pub mod proxy_config;
pub mod redis_url;
pub mod responder;
pub mod secret;
pub mod shared_routes;
pub mod source_status;
pub mod sources;
pub mod stream_key;

pub use acl::{AclUser, UserError};
pub use bridge_config::{BridgeConfig, BridgeConfigError};
pub use config::{load_json, ConfigError};
pub use name::{AgentName, NameError};
pub use proxy_config::{AgentConfig, LimitsConfig, ProxyConfig, ProxyConfigError};
pub use redis_url::{RedisUrl, TlsFiles};
pub use secret::{Secret, SecretError};
pub use stream_key::{Dir, KeyForm, StreamKey};
