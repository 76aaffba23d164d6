//! Connections to the lanes' Redis, as the bridge's ACL user.
//!
//! On one server (the private one's unix socket, or `redis_url` over TCP,
//! TLS or through Sentinel) each is a redis-rs `ConnectionManager`: one
//! multiplexed connection that many tasks share (their commands are
//! pipelined on the socket) and that reconnects by itself after an error —
//! Redis 7.0/7.2 drops every client on `ACL LOAD`, and the daemon may
//! restart Redis. On a cluster it is redis-rs's cluster connection, which
//! sends each command to the node serving its slot. [`Con`] is either.

use oxidepm_lanes::redis_url::{HostPort, Topology};
use oxidepm_lanes::{RedisUrl, Secret, SecretError, TlsFiles};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, ProtocolVersion,
    RedisConnectionInfo, RedisFuture, TlsCertificates, Value,
};
use std::time::{Duration, Instant};

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// The server.
    pub redis: RedisUrl,
    /// TLS files for a `rediss` server.
    pub tls: TlsFiles,
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

/// One connection the bridge's commands go through: to one server (unix,
/// TCP, TLS, the primary Sentinel names), or to a whole cluster, whose
/// client sends each command to the node serving its slot and follows
/// `MOVED`/`ASK`.
#[derive(Clone)]
pub enum Con {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Con {
    /// Whether it is a cluster's: a pipeline or transaction must then
    /// stay within one slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Con::Cluster(_))
    }
}

impl ConnectionLike for Con {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Con::Single(c) => c.req_packed_command(cmd),
            Con::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Con::Single(c) => c.req_packed_commands(cmd, offset, count),
            Con::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A failure reading a TLS file, as a redis error (where it surfaces).
fn file_error(what: &str, path: &std::path::Path, e: std::io::Error) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "cannot read a TLS file of the lanes' configuration",
        format!("{what} {}: {e}", path.display()),
    ))
}

impl RedisTarget {
    /// The target of a configuration, with the password read from its file.
    pub fn from_config(cfg: &crate::BridgeConfig) -> Result<RedisTarget, SecretError> {
        Ok(RedisTarget {
            redis: cfg.redis.clone(),
            tls: cfg.tls.clone(),
            user: cfg.user.clone(),
            password: Secret::read(&cfg.password_file)?,
        })
    }

    /// The credential, as redis-rs takes it.
    fn redis_info(&self) -> RedisConnectionInfo {
        RedisConnectionInfo {
            db: 0,
            username: Some(self.user.clone()),
            password: Some(self.password.expose().to_string()),
            protocol: ProtocolVersion::RESP2,
        }
    }

    /// The address of `hp`, over TLS when the URL says so.
    fn tcp_addr(&self, hp: &HostPort) -> ConnectionAddr {
        if self.redis.tls {
            ConnectionAddr::TcpTls {
                host: hp.host.clone(),
                port: hp.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(hp.host.clone(), hp.port)
        }
    }

    /// The PEM files of `tls`, read (the system's roots without a CA).
    fn certificates(&self) -> redis::RedisResult<TlsCertificates> {
        let read =
            |what: &str, p: &std::path::Path| std::fs::read(p).map_err(|e| file_error(what, p, e));
        let root_cert = match &self.tls.ca_file {
            Some(p) => Some(read("tls_ca_file", p)?),
            None => None,
        };
        let client_tls = match (&self.tls.cert_file, &self.tls.key_file) {
            (Some(c), Some(k)) => Some(ClientTlsConfig {
                client_cert: read("tls_cert_file", c)?,
                client_key: read("tls_key_file", k)?,
            }),
            _ => None,
        };
        Ok(TlsCertificates {
            client_tls,
            root_cert,
        })
    }

    /// A client for the one server at `addr`.
    fn client(&self, addr: ConnectionAddr) -> redis::RedisResult<redis::Client> {
        let info = ConnectionInfo {
            addr,
            redis: self.redis_info(),
        };
        if self.redis.tls {
            redis::Client::build_with_tls(info, self.certificates()?)
        } else {
            redis::Client::open(info)
        }
    }

    /// The server to talk to when there is one: the unix socket, the TCP
    /// server, or the primary the sentinels name now.
    pub async fn single_addr(&self) -> redis::RedisResult<ConnectionAddr> {
        match &self.redis.topology {
            Topology::Unix(p) => Ok(ConnectionAddr::Unix(p.clone())),
            Topology::Standalone(h) => Ok(self.tcp_addr(h)),
            Topology::Sentinel { sentinels, master } => {
                let hp = self.ask_sentinels(sentinels, master).await?;
                Ok(self.tcp_addr(&hp))
            }
            Topology::Cluster { .. } => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster has no single server",
            ))),
        }
    }

    /// Asks each sentinel in turn for the address of `master`. Sentinels
    /// are asked without a credential (theirs is not the lanes' one).
    async fn ask_sentinels(
        &self,
        sentinels: &[HostPort],
        master: &str,
    ) -> redis::RedisResult<HostPort> {
        let mut last = None;
        for s in sentinels {
            let info = ConnectionInfo {
                addr: self.tcp_addr(s),
                redis: RedisConnectionInfo::default(),
            };
            let client = if self.redis.tls {
                redis::Client::build_with_tls(info, self.certificates()?)
            } else {
                redis::Client::open(info)
            }?;
            let asked = async {
                let mut c = client.get_multiplexed_async_connection().await?;
                let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query_async(&mut c)
                    .await?;
                Ok::<_, redis::RedisError>(addr)
            };
            match tokio::time::timeout(Duration::from_secs(2), asked).await {
                Ok(Ok(Some((host, port)))) => return Ok(HostPort { host, port }),
                Ok(Ok(None)) => {
                    last = Some(format!("sentinel {s} does not know a primary {master:?}"))
                }
                Ok(Err(e)) => last = Some(format!("sentinel {s}: {e}")),
                Err(_) => last = Some(format!("sentinel {s}: no answer")),
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::IoError,
            "no sentinel named the primary",
            last.unwrap_or_default(),
        )))
    }

    /// Connects once; `response_timeout` bounds every command (a blocking
    /// read needs more than its BLOCK time).
    pub async fn connect(&self, response_timeout: Duration) -> redis::RedisResult<Con> {
        if let Topology::Cluster { seeds } = &self.redis.topology {
            let nodes: Vec<ConnectionInfo> = seeds
                .iter()
                .map(|s| ConnectionInfo {
                    addr: self.tcp_addr(s),
                    redis: self.redis_info(),
                })
                .collect();
            let mut b = redis::cluster::ClusterClientBuilder::new(nodes)
                .username(self.user.clone())
                .password(self.password.expose().to_string())
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(response_timeout)
                .use_protocol(ProtocolVersion::RESP2);
            if self.redis.tls {
                b = b.certs(self.certificates()?);
            }
            return Ok(Con::Cluster(b.build()?.get_async_connection().await?));
        }
        let client = self.client(self.single_addr().await?)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(response_timeout)
            // Reconnect attempts after a failure: 100 ms, 200 ms, … 2 s.
            .set_factor(100)
            .set_exponent_base(2)
            .set_max_delay(2_000)
            .set_number_of_retries(4);
        Ok(Con::Single(
            ConnectionManager::new_with_config(client, cfg).await?,
        ))
    }

    /// Connects, trying again for up to `patience` (Redis may still be
    /// starting when the daemon starts the bridge).
    pub async fn connect_patiently(
        &self,
        response_timeout: Duration,
        patience: Duration,
    ) -> Result<Con, ConnectError> {
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

/// How often the bridge's shared connection is looked at when nothing else
/// uses it: a Redis restart is noticed, and the connection made again,
/// before the next message needs it, rather than by that message failing.
pub const KEEPALIVE: Duration = Duration::from_secs(1);

/// PINGs `con` every [`KEEPALIVE`] until `shutdown`; a PING that fails
/// makes the connection manager connect again.
pub async fn keep_alive(mut con: Con, mut shutdown: crate::shutdown::Shutdown) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(KEEPALIVE) => {}
            _ = shutdown.wait() => return,
        }
        if let Err(e) = redis::cmd("PING").query_async::<()>(&mut con).await {
            log::debug!("keepalive: {e}; connecting again");
        }
    }
}
