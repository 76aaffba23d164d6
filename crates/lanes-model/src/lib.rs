//! The vocabulary of oxidepm's message lanes, shared by the daemon, the
//! auth proxy and the bridge so that each rule exists once: agent names,
//! ACL users and their rules, secrets, and the configuration files the
//! daemon writes for the proxy and the bridge. No sockets, no async.

pub mod acl;
pub mod config;
pub mod name;
pub mod proxy_config;
pub mod secret;

pub use config::{load_json, ConfigError};
pub use name::check_agent_name;
pub use proxy_config::{AgentConfig, LimitsConfig, ProxyConfig};
