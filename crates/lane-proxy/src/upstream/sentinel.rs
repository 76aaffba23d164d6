//! Sentinel: which server is the primary now, asked as `oxidepm-lanes-net`
//! asks it for the daemon and the bridge (each sentinel in turn, over the
//! same TLS rule).

use oxidepm_lanes::redis_url::HostPort;
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;

/// Asks each sentinel in turn for the primary `master`.
pub async fn primary(
    sentinels: &[HostPort],
    master: &str,
    tls: Option<&Arc<ClientConfig>>,
) -> io::Result<HostPort> {
    oxidepm_lanes_net::sentinel::primary(sentinels, master, tls)
        .await
        .map_err(io::Error::other)
}
