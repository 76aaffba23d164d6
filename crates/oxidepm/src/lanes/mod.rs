//! Layer 3 — lanes: each AI agent's private slice of the message bus.
//!
//! The daemon side is [`admin`] (Redis, ACL users, the proxy app) and
//! [`bridge_admin`] (the bridge app and its routes); [`ops`] is the ops
//! responder. The rest of this module is the per-agent Redis **auth proxy**
//! (`oxidepm-lane-proxy`): one process listening on one unix socket per
//! agent, `<lanes_dir>/<agent>.sock`. The socket a connection arrives on is
//! its identity: the proxy opens a connection of its own to the private
//! Redis, authenticates it as `agent_<name>` before reading anything from
//! the client, and then relays the client's commands — parsed, checked
//! against an allowlist, re-encoded — and Redis's replies. The agent holds
//! no credential.
//!
//! * [`resp`] — the RESP command parser and encoder;
//! * [`reply_scanner`] — finds reply boundaries in Redis's byte stream;
//! * [`command_filter`] — the allowlist and the outbox-name mapping;
//! * [`rate_limit`] — the per-agent token bucket;
//! * [`config`] — the JSON configuration file the daemon writes;
//! * [`activation`] — sockets inherited from systemd (LISTEN_FDS);
//! * [`connection`] — one client connection, both directions;
//! * [`proxy`] — the listeners, reload on SIGHUP, shutdown.

pub mod acl;
pub mod activation;
pub mod admin;
pub mod bridge;
pub mod bridge_admin;
pub mod command_filter;
pub mod config;
pub mod connection;
pub mod email;
pub mod layout;
pub mod names;
pub mod ops;
pub mod proxy;
pub mod rate_limit;
pub mod reply_scanner;
pub mod resp;
pub mod secrets;
pub mod settings;

pub use config::{AgentConfig, ConfigError, ProxyConfig};
pub use proxy::{run, Proxy, ReloadReport};

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

/// The tokio runtime of a lanes process: one thread, or `threads` workers.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}
