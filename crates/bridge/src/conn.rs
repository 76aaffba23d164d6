//! Connections to the lanes' Redis, as the bridge's ACL user.
//!
//! On one server (the private one's unix socket, or `redis_url` over TCP,
//! TLS or through Sentinel) each is a redis-rs `ConnectionManager`: one
//! multiplexed connection that many tasks share (their commands are
//! pipelined on the socket) and that reconnects by itself after an error —
//! Redis 7.0/7.2 drops every client on `ACL LOAD`, and the daemon may
//! restart Redis. On a cluster it is redis-rs's cluster connection, which
//! sends each command to the node serving its slot. Both are made by
//! `oxidepm-lanes-net`, as every lanes process makes them; [`Con`] is either.

use oxidepm_lanes::{Secret, SecretError};
use oxidepm_lanes_net::Options;
pub use oxidepm_lanes_net::{Con, Target as RedisTarget};
use std::time::{Duration, Instant};

/// How long one connection may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The target of a configuration, with the password read from its file.
pub fn target(cfg: &crate::BridgeConfig) -> Result<RedisTarget, SecretError> {
    Ok(RedisTarget {
        url: cfg.redis.clone(),
        tls: cfg.tls.clone(),
        user: cfg.user.clone(),
        password: Secret::read(&cfg.password_file)?,
    })
}

/// Connects once; `response_timeout` bounds every command (a blocking
/// read needs more than its BLOCK time).
pub async fn connect(
    target: &RedisTarget,
    response_timeout: Duration,
) -> Result<Con, oxidepm_lanes_net::Error> {
    let o = Options {
        connect_timeout: CONNECT_TIMEOUT,
        response_timeout: Some(response_timeout),
        reconnect: true,
    };
    target.connect(&o).await
}

/// Connects, trying again for up to `patience` (Redis may still be
/// starting when the daemon starts the bridge).
pub async fn connect_patiently(
    target: &RedisTarget,
    response_timeout: Duration,
    patience: Duration,
) -> Result<Con, ConnectError> {
    let deadline = Instant::now() + patience;
    let mut wait = Duration::from_millis(50);
    loop {
        match connect(target, response_timeout).await {
            Ok(c) => return Ok(c),
            Err(source) if Instant::now() >= deadline => {
                return Err(ConnectError {
                    redis: target.url.to_string(),
                    user: target.user.clone(),
                    source: Box::new(source),
                })
            }
            Err(e) => {
                log::debug!("redis not ready yet: {e}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Redis did not take a connection within the patience given.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to the lanes' Redis at {redis} as {user}: {source}")]
pub struct ConnectError {
    /// The server, as its URL.
    pub redis: String,
    /// The ACL user.
    pub user: String,
    /// The last failure.
    pub source: Box<oxidepm_lanes_net::Error>,
}

/// How often the bridge's shared connection is looked at when nothing else
/// uses it: a Redis restart is noticed, and the connection made again,
/// before the next message needs it, rather than by that message failing.
pub const KEEPALIVE: Duration = Duration::from_secs(1);

/// PINGs `con` every [`KEEPALIVE`] until `stop` is done; a PING that
/// fails makes the connection manager connect again.
pub async fn keep_alive(mut con: Con, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(KEEPALIVE) => {}
            _ = &mut stop => return,
        }
        if let Err(e) = redis::cmd("PING").query_async::<()>(&mut con).await {
            log::debug!("keepalive: {e}; connecting again");
        }
    }
}
