//! Opening a TCP stream to one server (a shared Redis, a sentinel, a
//! cluster node), with TLS when the route has it, within a short timeout.

use crate::upstream::link::Link;
use crate::upstream::tls;
use oxidepm_lanes::redis_url::HostPort;
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one TCP connect (and TLS handshake) may take, so that one
/// unreachable seed or sentinel leaves time to try the next.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Opens a TCP connection to `hp`, with TLS when `tls` is given.
pub async fn open(hp: &HostPort, tls: Option<&Arc<ClientConfig>>) -> io::Result<Link> {
    let work = async {
        let tcp = TcpStream::connect((hp.host.as_str(), hp.port))
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {hp}: {e}")))?;
        // Commands are small and answered one by one: no Nagle delay.
        tcp.set_nodelay(true)?;
        Ok(match tls {
            Some(cfg) => Link::Tls(Box::new(tls::handshake(cfg, &hp.host, tcp).await?)),
            None => Link::Tcp(tcp),
        })
    };
    tokio::time::timeout(CONNECT_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{hp} did not answer within {CONNECT_TIMEOUT:?}"),
            ))
        })
}
