//! Reaching the lanes' Redis: where it is (a unix socket, TCP, TLS,
//! Sentinel, a cluster node), the stream that reaches it, and the
//! connections on which the proxy asks Redis things itself.

pub mod cluster_map;
pub mod connection;
pub mod link;
pub mod redis_version;
pub mod route;
pub mod tls;
