//! Connections to the lanes' Redis as one ACL user, on redis-rs's async
//! API: to one server (a unix socket, TCP, TLS, the primary Sentinel
//! names), to one node of a cluster, or to a whole cluster, whose client
//! sends each command to the node serving its slot and follows
//! `MOVED`/`ASK`. [`Con`] is any of them, so callers write one code path.
//!
//! A connection to one server is either plain (made once; a failure is
//! the caller's to act on) or a `ConnectionManager`, which makes itself
//! again after an error — Redis 7.0/7.2 drops every client on `ACL LOAD`,
//! and the daemon may restart Redis.

use crate::error::Error;
use crate::sentinel;
use crate::tls;
use oxidepm_lanes::redis_url::{HostPort, Topology};
use oxidepm_lanes::{RedisUrl, Secret, TlsFiles};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, ProtocolVersion,
    RedisConnectionInfo, RedisFuture, Value,
};
use std::time::Duration;

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The server.
    pub url: RedisUrl,
    /// TLS files for a `rediss` server.
    pub tls: TlsFiles,
    /// The ACL user.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: this ends up in logs.
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How a connection behaves.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// How long making it may take.
    pub connect_timeout: Duration,
    /// A bound on every reply (a blocking read needs more than its BLOCK
    /// time); `None`: none.
    pub response_timeout: Option<Duration>,
    /// Whether a connection to one server makes itself again after an
    /// error (a cluster's connection always does).
    pub reconnect: bool,
}

impl Options {
    /// Made once, within `connect_timeout`, no bound on replies.
    pub fn once(connect_timeout: Duration) -> Options {
        Options {
            connect_timeout,
            response_timeout: None,
            reconnect: false,
        }
    }
}

/// One connection commands go through.
#[derive(Clone)]
pub enum Con {
    /// One server, made once.
    Plain(MultiplexedConnection),
    /// One server, made again after an error.
    Managed(ConnectionManager),
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
            Con::Plain(c) => c.req_packed_command(cmd),
            Con::Managed(c) => c.req_packed_command(cmd),
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
            Con::Plain(c) => c.req_packed_commands(cmd, offset, count),
            Con::Managed(c) => c.req_packed_commands(cmd, offset, count),
            Con::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Target {
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
    pub fn tcp_addr(&self, hp: &HostPort) -> ConnectionAddr {
        if self.url.tls {
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

    /// The rustls configuration of a TLS URL, by the one rule of [`tls`].
    pub fn tls_config(&self) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, Error> {
        Ok(match self.url.tls {
            true => Some(tls::client_config(&self.tls)?),
            false => None,
        })
    }

    /// A client for the one server at `addr`.
    fn client(&self, addr: ConnectionAddr) -> Result<redis::Client, Error> {
        let at = addr.to_string();
        let info = ConnectionInfo {
            addr,
            redis: self.redis_info(),
        };
        let made = if self.url.tls {
            redis::Client::build_with_tls(info, tls::certificates(&self.tls)?)
        } else {
            redis::Client::open(info)
        };
        made.map_err(|source| Error::Redis { at, source })
    }

    /// The server to talk to when there is one: the unix socket, the TCP
    /// server, or the primary the sentinels name now.
    pub async fn single_addr(&self) -> Result<ConnectionAddr, Error> {
        match &self.url.topology {
            Topology::Unix(p) => Ok(ConnectionAddr::Unix(p.clone())),
            Topology::Standalone(h) => Ok(self.tcp_addr(h)),
            Topology::Sentinel { sentinels, master } => {
                let tls = self.tls_config()?;
                let hp = sentinel::primary(sentinels, master, tls.as_ref()).await?;
                Ok(self.tcp_addr(&hp))
            }
            Topology::Cluster { .. } => Err(Error::NoSingle {
                at: self.url.to_string(),
            }),
        }
    }

    /// Connects: to the one server, or to the whole cluster.
    pub async fn connect(&self, o: &Options) -> Result<Con, Error> {
        if let Topology::Cluster { seeds } = &self.url.topology {
            return self.connect_cluster(seeds, o).await;
        }
        let addr = self.single_addr().await?;
        self.connect_at(addr, o).await
    }

    /// Connects to the one server at `addr`.
    pub async fn connect_at(&self, addr: ConnectionAddr, o: &Options) -> Result<Con, Error> {
        let at = addr.to_string();
        let client = self.client(addr)?;
        let fail = |source| Error::Redis {
            at: at.clone(),
            source,
        };
        if o.reconnect {
            let mut cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(o.connect_timeout)
                // Reconnect attempts after a failure: 100 ms, 200 ms, … 2 s.
                .set_factor(100)
                .set_exponent_base(2)
                .set_max_delay(2_000)
                .set_number_of_retries(4);
            if let Some(t) = o.response_timeout {
                cfg = cfg.set_response_timeout(t);
            }
            let m = ConnectionManager::new_with_config(client, cfg)
                .await
                .map_err(fail)?;
            return Ok(Con::Managed(m));
        }
        let mut cfg = AsyncConnectionConfig::new().set_connection_timeout(o.connect_timeout);
        if let Some(t) = o.response_timeout {
            cfg = cfg.set_response_timeout(t);
        }
        let c = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(fail)?;
        Ok(Con::Plain(c))
    }

    /// Connects to the one node `hp` (of a cluster, or the one server).
    pub async fn connect_node(&self, hp: &HostPort, o: &Options) -> Result<Con, Error> {
        self.connect_at(self.tcp_addr(hp), o).await
    }

    async fn connect_cluster(&self, seeds: &[HostPort], o: &Options) -> Result<Con, Error> {
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
            .connection_timeout(o.connect_timeout)
            .use_protocol(ProtocolVersion::RESP2);
        if let Some(t) = o.response_timeout {
            b = b.response_timeout(t);
        }
        if self.url.tls {
            b = b.certs(tls::certificates(&self.tls)?);
        }
        let fail = |source| Error::Redis {
            at: self.url.to_string(),
            source,
        };
        let client = b.build().map_err(fail)?;
        Ok(Con::Cluster(
            client.get_async_connection().await.map_err(fail)?,
        ))
    }

    /// A connection to one server that keys can be used on directly: the
    /// one server, or on a cluster its first seed that answers.
    pub async fn connect_one(&self, o: &Options) -> Result<Con, Error> {
        let Topology::Cluster { seeds } = &self.url.topology else {
            return self.connect(o).await;
        };
        let mut last = None;
        for s in seeds {
            match self.connect_node(s, o).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(Error::NoNode {
            at: self.url.to_string(),
        }))
    }

    /// A connection to every node, each named by its address: the one
    /// server, or every node of a cluster, replicas included (ACL users
    /// are not replicated, so each node gets them). `primaries_only`
    /// leaves replicas out (for writes such as UNLINK).
    pub async fn nodes(
        &self,
        primaries_only: bool,
        o: &Options,
    ) -> Result<Vec<(String, Con)>, Error> {
        if !self.url.is_cluster() {
            return Ok(vec![(self.url.to_string(), self.connect_one(o).await?)]);
        }
        let mut seed = self.connect_one(o).await?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut seed)
            .await
            .map_err(|source| Error::Redis {
                at: self.url.to_string(),
                source,
            })?;
        let mut out = Vec::new();
        for (hp, primary) in cluster_nodes(&text) {
            if primaries_only && !primary {
                continue;
            }
            out.push((hp.to_string(), self.connect_node(&hp, o).await?));
        }
        Ok(out)
    }
}

/// The nodes `CLUSTER NODES` lists as reachable, each with whether it is a
/// primary. Lines that cannot be read are left out.
pub fn cluster_nodes(text: &str) -> Vec<(HostPort, bool)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let _id = f.next()?;
            let addr = f.next()?;
            let flags = f.next()?;
            if flags.contains("fail") || flags.contains("noaddr") || flags.contains("handshake") {
                return None;
            }
            // ip:port@cport[,hostname]
            let hostport = addr.split('@').next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            let port: u16 = port.parse().ok()?;
            if host.is_empty() || port == 0 {
                return None;
            }
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some((
                HostPort {
                    host: host.to_string(),
                    port,
                },
                flags.contains("master"),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_testkit::shared::{SharedRedis, ROOT_PASSWORD, ROOT_USER};

    #[test]
    fn cluster_nodes_lists_reachable_nodes_with_their_role() {
        let text = "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b 127.0.0.1:7003@17003 slave a 0 0 1 connected\n\
                    c 127.0.0.1:7004@17004,host slave,fail a 0 0 1 connected\n\
                    garbage\n";
        let n = cluster_nodes(text);
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].0.port, n[0].1), (7000, true));
        assert_eq!((n[1].0.port, n[1].1), (7003, false));
    }

    fn target(s: &SharedRedis, tls: TlsFiles) -> Target {
        Target {
            url: s.url().parse().unwrap(),
            tls,
            user: ROOT_USER.into(),
            password: Secret::new(ROOT_PASSWORD),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_to_a_server_of_the_configured_ca_and_a_useless_ca_file_refused_before_connecting()
    {
        let s = SharedRedis::start(true);
        let o = Options::once(Duration::from_secs(5));
        for reconnect in [false, true] {
            let o = Options { reconnect, ..o };
            let mut con = target(&s, s.tls_files()).connect(&o).await.unwrap();
            let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
            assert_eq!(pong, "PONG");
        }
        let empty = s.dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let bad = TlsFiles {
            ca_file: Some(empty),
            ..TlsFiles::default()
        };
        let e = target(&s, bad)
            .connect(&o)
            .await
            .err()
            .expect("an empty CA file");
        assert!(matches!(e, Error::Tls(_)), "{e}");
        assert!(e.to_string().starts_with("tls_ca_file "), "{e}");
        // Another CA's server is refused at the handshake.
        let other = tempfile::tempdir().unwrap();
        let certs = oxidepm_testkit::tls::Certs::generate(other.path());
        let strange = TlsFiles {
            ca_file: Some(certs.ca),
            ..TlsFiles::default()
        };
        let e = target(&s, strange)
            .connect(&o)
            .await
            .err()
            .expect("another CA");
        assert!(matches!(e, Error::Redis { .. }), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_server_is_one_node() {
        let s = SharedRedis::start(false);
        let o = Options::once(Duration::from_secs(5));
        let t = target(&s, TlsFiles::default());
        let nodes = t.nodes(false, &o).await.unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].0, s.url());
        let wrong = Target {
            password: Secret::new("wrong"),
            ..t
        };
        let e = wrong.connect(&o).await.err().expect("a wrong password");
        assert!(matches!(e, Error::Redis { .. }), "{e}");
    }
}
