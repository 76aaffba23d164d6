//! Reaching the lanes' Redis: where it is ([`route`]: a unix socket, TCP,
//! TLS, Sentinel, a cluster node), the stream that reaches it ([`link`]),
//! and the connections on which the proxy asks Redis things itself
//! ([`connection`]). TLS ([`tls`]), the sentinels' lookup ([`sentinel`])
//! and opening a stream ([`dial`]) are files of their own, each small.

pub mod auth;
pub mod cluster_map;
pub mod connection;
pub mod dial;
pub mod exchange;
pub mod link;
pub mod redis_version;
pub mod reply;
pub mod route;
pub mod sentinel;
pub mod tls;
