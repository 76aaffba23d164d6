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
//! The crate is laid out by what each part is about:
//!
//! * [`resp`] — the RESP command parser and encoder;
//! * [`filter`] — what a lane may send, and how it is rewritten: pure
//!   verdicts, for an agent's lane and a responder's;
//! * [`conn`] — one client connection: its set-up, its two pumps (client →
//!   Redis, Redis → client), what one command does, and the transaction;
//! * [`lane`] — what a lane's connections share: settings, byte budget,
//!   rate limit, and the meter and consumer names of what it holds in Redis;
//! * [`server`] — the listeners (bound, or inherited from systemd),
//!   reload on SIGHUP, shutdown;
//! * [`upstream`] — reaching the lanes' Redis (unix socket, TCP, TLS,
//!   Sentinel, a cluster node) and the connections the proxy asks on.
//!
//! Its configuration file is [`oxidepm_lanes::ProxyConfig`], written by the
//! daemon.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod conn;
mod filter;
mod lane;
mod resp;
mod server;
mod upstream;

pub use lane::settings::LaneError;
pub use oxidepm_lanes::{AgentConfig, ConfigError, ProxyConfig};
pub use server::activation::take_from_env;
pub use server::proxy::{run, Proxy, ReloadReport, RunError};

pub use oxidepm_sys::runtime::runtime;
