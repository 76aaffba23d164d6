//! oxidepm's one way to reach the lanes' Redis, for the daemon, the bridge
//! and the proxy: where it is ([`RedisUrl`], from `oxidepm-lanes`, which
//! every process reads alike), whom TLS trusts ([`tls`]: one strict rule),
//! which primary the sentinels name ([`sentinel`]), and async connections
//! as one ACL user to one server or a cluster ([`connect`]). The proxy
//! takes the TLS and Sentinel parts and keeps its own relay; the daemon and
//! the bridge take connections.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod connect;
pub mod error;
pub mod sentinel;
pub mod tls;

pub use connect::{cluster_nodes, Con, Options, Target};
pub use error::Error;
pub use oxidepm_lanes::redis_url::{HostPort, Topology};
pub use oxidepm_lanes::{RedisUrl, TlsFiles};
pub use redis;
pub use sentinel::SentinelError;
pub use tls::TlsError;
