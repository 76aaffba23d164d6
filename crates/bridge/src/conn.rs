//! Connections to the private Redis, as the `bridge` ACL user.
//!
//! Each is a redis-rs `ConnectionManager`: one multiplexed connection that
//! many tasks share (their commands are pipelined on the socket) and that
//! reconnects by itself after an error — Redis 7.0/7.2 drops every client
//! on `ACL LOAD`, and the daemon may restart Redis.

use oxidepm_lanes::redis_url::Topology;
use oxidepm_lanes::{RedisUrl, Secret, SecretError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo};
use std::time::{Duration, Instant};

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// The server.
    pub redis: RedisUrl,
    /// The ACL user.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: this ends up in logs.
        f.debug_struct("RedisTarget")
            .field("redis", &self.redis)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl RedisTarget {
    /// The target of a configuration, with the password read from its file.
    pub fn from_config(cfg: &crate::BridgeConfig) -> Result<RedisTarget, SecretError> {
        Ok(RedisTarget {
            redis: cfg.redis.clone(),
            user: cfg.user.clone(),
            password: Secret::read(&cfg.password_file)?,
        })
    }

    fn info(&self) -> redis::RedisResult<ConnectionInfo> {
        let addr = match (&self.redis.topology, self.redis.tls) {
            (Topology::Unix(p), _) => ConnectionAddr::Unix(p.clone()),
            (Topology::Standalone(h), false) => ConnectionAddr::Tcp(h.host.clone(), h.port),
            _ => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "this bridge reaches a unix socket or one server over plain TCP only",
                    self.redis.to_string(),
                )))
            }
        };
        Ok(ConnectionInfo {
            addr,
            redis: RedisConnectionInfo {
                db: 0,
                username: Some(self.user.clone()),
                password: Some(self.password.expose().to_string()),
                protocol: ProtocolVersion::RESP2,
            },
        })
    }

    /// Connects once; `response_timeout` bounds every command (a blocking
    /// read needs more than its BLOCK time).
    pub async fn connect(
        &self,
        response_timeout: Duration,
    ) -> redis::RedisResult<ConnectionManager> {
        let client = redis::Client::open(self.info()?)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(response_timeout)
            // Reconnect attempts after a failure: 100 ms, 200 ms, … 2 s.
            .set_factor(100)
            .set_exponent_base(2)
            .set_max_delay(2_000)
            .set_number_of_retries(4);
        ConnectionManager::new_with_config(client, cfg).await
    }

    /// Connects, trying again for up to `patience` (Redis may still be
    /// starting when the daemon starts the bridge).
    pub async fn connect_patiently(
        &self,
        response_timeout: Duration,
        patience: Duration,
    ) -> Result<ConnectionManager, ConnectError> {
        let deadline = Instant::now() + patience;
        let mut wait = Duration::from_millis(50);
        loop {
            match self.connect(response_timeout).await {
                Ok(c) => return Ok(c),
                Err(source) if Instant::now() >= deadline => {
                    return Err(ConnectError {
                        redis: self.redis.to_string(),
                        user: self.user.clone(),
                        source,
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
    pub source: redis::RedisError,
}
