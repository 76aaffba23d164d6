//! Why the lanes' Redis could not be reached.

use crate::sentinel::SentinelError;
use crate::tls::TlsError;

/// A connection that could not be had.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TLS settings cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// No sentinel named the primary.
    #[error(transparent)]
    Sentinel(#[from] SentinelError),
    /// A server did not answer, or refused the user.
    #[error("{at}: {source}")]
    Redis {
        /// The server or node.
        at: String,
        /// What Redis (or the network) said.
        source: redis::RedisError,
    },
    /// No node of the cluster answered.
    #[error("no node of {at} answers")]
    NoNode {
        /// The URL.
        at: String,
    },
    /// A cluster asked for as one server.
    #[error("{at} is a cluster, which has no single server")]
    NoSingle {
        /// The URL.
        at: String,
    },
}
