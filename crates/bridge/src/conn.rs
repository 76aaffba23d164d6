//! Connections to the private Redis, as the `bridge` ACL user.
//!
//! Each is a redis-rs `ConnectionManager`: one multiplexed connection that
//! many tasks share (their commands are pipelined on the socket) and that
//! reconnects by itself after an error — Redis 7.0/7.2 drops every client
//! on `ACL LOAD`, and the daemon may restart Redis.

use oxidepm_lanes::{Secret, SecretError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// The unix socket.
    pub socket: PathBuf,
    /// The ACL user.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: this ends up in logs.
        f.debug_struct("RedisTarget")
            .field("socket", &self.socket)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl RedisTarget {
    /// The target of a configuration, with the password read from its file.
    pub fn from_config(cfg: &crate::BridgeConfig) -> Result<RedisTarget, SecretError> {
        Ok(RedisTarget {
            socket: cfg.redis_socket.clone(),
            user: cfg.user.clone(),
            password: Secret::read(&cfg.password_file)?,
        })
    }

    fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            addr: ConnectionAddr::Unix(self.socket.clone()),
            redis: RedisConnectionInfo {
                db: 0,
                username: Some(self.user.clone()),
                password: Some(self.password.expose().to_string()),
                protocol: ProtocolVersion::RESP2,
            },
        }
    }

    /// Connects once; `response_timeout` bounds every command (a blocking
    /// read needs more than its BLOCK time).
    pub async fn connect(
        &self,
        response_timeout: Duration,
    ) -> redis::RedisResult<ConnectionManager> {
        let client = redis::Client::open(self.info())?;
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
                        socket: self.socket.clone(),
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
#[error("cannot connect to the private Redis at {} as {user}: {source}", .socket.display())]
pub struct ConnectError {
    /// The unix socket.
    pub socket: PathBuf,
    /// The ACL user.
    pub user: String,
    /// The last failure.
    pub source: redis::RedisError,
}
