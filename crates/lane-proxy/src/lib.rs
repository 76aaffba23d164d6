//! `oxidepm-lane-proxy`: the per-agent Redis auth proxy of oxidepm's lanes.
//!
//! One process listens on one unix socket per agent,
//! `<lanes_dir>/<agent>.sock`. The socket a connection arrives on is its
//! identity: the proxy opens a connection of its own to the lanes' Redis,
//! authenticates it as `agent_<name>` before reading anything from the
//! client, and then relays the client's commands — parsed, checked against
//! an allowlist, re-encoded — and Redis's replies. The agent holds no
//! credential.
//!
//! * [`resp`] — the RESP command parser and encoder;
//! * [`reply_scanner`] — finds reply boundaries in Redis's byte stream;
//! * [`command_filter`] — the allowlist and the outbox-name mapping;
//!   [`responder_filter`] — a responder's lane (responder mode), whose
//!   replies [`answer`] checks against the requests pending in Redis;
//!   [`consumer_arg`] — where a command names a consumer;
//!   [`group_scope`] — the streams and group a group command may name;
//!   [`handshake`] — what libraries send at connect, answered locally
//!   ([`redis_version`] for its INFO);
//! * [`transaction`] — a connection's client name, protocol and
//!   MULTI/EXEC state;
//! * [`rate_limit`] — the per-agent token bucket;
//! * [`budget`] — a lane's byte budget for buffered commands;
//! * [`meter`] — what an agent's outboxes hold: `maxlen` and `quota`;
//!   [`groups`] — what their consumers are done with;
//! * [`consumers`] — the consumer names a lane has in Redis: at most
//!   `max_consumers`;
//! * [`upstream`] — the proxy's own connections to Redis, as an agent;
//!   [`route`] — where the lanes' Redis is (a unix socket, TCP, TLS
//!   ([`tls`]), Sentinel, or the cluster node of a lane's slot
//!   ([`cluster_map`])), and [`link`], the stream that reaches it;
//! * [`activation`] — sockets inherited from systemd (LISTEN_FDS);
//! * [`lane_socket`] — the sockets' directory and files;
//! * [`connection`] — one client connection: its set-up and its two
//!   pumps, [`commands`] (client → Redis) and [`replies`] (Redis → client);
//! * [`server`] — the listeners, reload on SIGHUP, shutdown.
//!
//! Its configuration file is [`oxidepm_lanes::ProxyConfig`], written by the
//! daemon.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod activation;
mod answer;
mod budget;
mod cluster_map;
mod command_filter;
mod commands;
mod connection;
mod consumer_arg;
mod consumers;
mod group_scope;
mod groups;
mod handshake;
mod lane_settings;
mod lane_socket;
mod link;
mod meter;
mod rate_limit;
mod redis_version;
mod relay_socket;
mod replies;
mod reply_scanner;
mod resp;
mod responder_filter;
mod route;
mod server;
mod tls;
mod transaction;
mod upstream;
mod upstream_write;

pub use activation::take_from_env;
pub use oxidepm_lanes::{AgentConfig, ConfigError, ProxyConfig};
pub use server::{run, LaneError, Proxy, ReloadReport, RunError};

pub use oxidepm_sys::runtime::runtime;
