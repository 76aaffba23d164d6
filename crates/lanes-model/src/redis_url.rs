//! Where the lanes' Redis is: the private redis-server's unix socket (the
//! default), or a server the daemon does not run, given by
//! `[lanes] redis_url` — one server over TCP (TLS with `rediss://`), a
//! primary found through Sentinel, or a Redis Cluster found from seed
//! nodes. Every lanes process (daemon, proxy, bridge) reads the same form,
//! so a URL means one thing everywhere.
//!
//! | form | meaning |
//! |---|---|
//! | `unix:///path/redis.sock` (or a bare absolute path) | a unix socket |
//! | `redis://host:6379`, `rediss://host:6380` | one server, TLS with `rediss` |
//! | `redis+sentinel://h1:26379,h2:26379/mymaster` | the primary `mymaster` as the sentinels name it |
//! | `redis+cluster://h1:7000,h2:7001` | a cluster, found from these seed nodes |
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to every node. A
//! URL never carries a credential (they live in `secrets/`) and never a
//! database other than 0 (a cluster has only database 0, and Redis's ACL
//! does not scope databases).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A host and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// A DNS name or an IP address (IPv6 without brackets).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How the server (or servers) are reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One server on a unix socket.
    Unix(PathBuf),
    /// One server over TCP.
    Standalone(HostPort),
    /// The primary that these sentinels name `master`.
    Sentinel {
        /// The sentinels asked.
        sentinels: Vec<HostPort>,
        /// The name the sentinels know the primary by.
        master: String,
    },
    /// A Redis Cluster, found from these nodes.
    Cluster {
        /// Nodes asked for the cluster's layout.
        seeds: Vec<HostPort>,
    },
}

/// A parsed `redis_url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RedisUrl {
    /// Where.
    pub topology: Topology,
    /// TLS to every server (a `rediss` scheme); never on a unix socket.
    pub tls: bool,
}

/// TLS files for a `rediss` URL: the CA that signed the servers'
/// certificates (else the system's roots), and a client certificate and
/// key for servers that ask for one (`tls-auth-clients yes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// PEM file of the CA certificate(s) the server's chain must lead to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }

    /// Checks that a certificate comes with its key.
    pub fn check(&self) -> Result<(), UrlError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(UrlError(
                "tls_cert_file and tls_key_file go together: give both (a client \
                 certificate) or neither"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Why a string is not a usable `redis_url`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UrlError {}

impl RedisUrl {
    /// The unix socket of a private redis-server.
    pub fn unix(path: impl Into<PathBuf>) -> RedisUrl {
        RedisUrl {
            topology: Topology::Unix(path.into()),
            tls: false,
        }
    }

    /// The socket path, when the server is on one.
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        match &self.topology {
            Topology::Unix(p) => Some(p),
            _ => None,
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }
}

impl From<PathBuf> for RedisUrl {
    fn from(p: PathBuf) -> RedisUrl {
        RedisUrl::unix(p)
    }
}

impl From<&std::path::Path> for RedisUrl {
    fn from(p: &std::path::Path) -> RedisUrl {
        RedisUrl::unix(p)
    }
}

const FORMS: &str = "use unix:///path, redis://host:port, rediss://host:port, \
    redis+sentinel://host:port,…/master or redis+cluster://host:port,…";

impl FromStr for RedisUrl {
    type Err = UrlError;

    fn from_str(url: &str) -> Result<RedisUrl, UrlError> {
        let bad = |why: &str| UrlError(format!("redis_url {url:?}: {why}"));
        if url.starts_with('/') {
            return Ok(RedisUrl::unix(url));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(&format!("no scheme; {FORMS}")));
        };
        if scheme == "unix" || scheme == "redis+unix" {
            let path = rest.split(['?', '#']).next().unwrap_or_default();
            if !path.starts_with('/') {
                return Err(bad("a unix socket needs an absolute path (unix:///path)"));
            }
            return Ok(RedisUrl::unix(path));
        }
        let (tls, kind) = match scheme {
            "redis" => (false, ""),
            "rediss" => (true, ""),
            "redis+sentinel" => (false, "sentinel"),
            "rediss+sentinel" => (true, "sentinel"),
            "redis+cluster" => (false, "cluster"),
            "rediss+cluster" => (true, "cluster"),
            other => return Err(bad(&format!("unknown scheme {other:?}; {FORMS}"))),
        };
        if rest.contains(['?', '#']) {
            return Err(bad(
                "query options are not read; TLS files are [lanes] tls_ca_file, \
                 tls_cert_file and tls_key_file",
            ));
        }
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        if hosts.contains('@') {
            return Err(bad(
                "a credential in the URL would sit in daemon.toml; put the admin user \
                 and password in secrets/lanes_admin instead (see docs/hosts.md)",
            ));
        }
        let nodes = hosts
            .split(',')
            .map(|h| host_port(h, if kind == "sentinel" { 26379 } else { 6379 }))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| bad(&e))?;
        let topology = match kind {
            "sentinel" => {
                if path.is_empty() || path.contains('/') {
                    return Err(bad(
                        "a sentinel URL ends in /<master name> (the name the sentinels \
                         monitor), e.g. redis+sentinel://h1:26379,h2:26379/mymaster",
                    ));
                }
                Topology::Sentinel {
                    sentinels: nodes,
                    master: path.to_string(),
                }
            }
            "cluster" => {
                no_database(path).map_err(|e| bad(&e))?;
                Topology::Cluster { seeds: nodes }
            }
            _ => {
                no_database(path).map_err(|e| bad(&e))?;
                let [node] = <[HostPort; 1]>::try_from(nodes).map_err(|_| {
                    bad("one server only; several nodes are redis+sentinel:// or redis+cluster://")
                })?;
                Topology::Standalone(node)
            }
        };
        Ok(RedisUrl { topology, tls })
    }
}

fn no_database(path: &str) -> Result<(), String> {
    match path {
        "" | "0" => Ok(()),
        _ => Err(format!(
            "database {path:?}: the lanes use database 0 only (ACL rules do not scope databases)"
        )),
    }
}

fn host_port(s: &str, default_port: u16) -> Result<HostPort, String> {
    if s.is_empty() {
        return Err("an empty host".into());
    }
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: an IPv6 address needs its closing ]"))?;
        (h, after.strip_prefix(':'))
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let ok_host = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b));
    if !ok_host {
        return Err(format!("{host:?} is not a host name or address"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{p:?} is not a port (1-65535)"))?,
    };
    Ok(HostPort {
        host: host.to_string(),
        port,
    })
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls { "s" } else { "" };
        let join = |v: &[HostPort]| {
            v.iter()
                .map(HostPort::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        match &self.topology {
            Topology::Unix(p) => write!(f, "unix://{}", p.display()),
            Topology::Standalone(h) => write!(f, "redis{s}://{h}"),
            Topology::Sentinel { sentinels, master } => {
                write!(f, "redis{s}+sentinel://{}/{master}", join(sentinels))
            }
            Topology::Cluster { seeds } => write!(f, "redis{s}+cluster://{}", join(seeds)),
        }
    }
}

impl TryFrom<String> for RedisUrl {
    type Error = UrlError;
    fn try_from(s: String) -> Result<RedisUrl, UrlError> {
        s.parse()
    }
}

impl From<RedisUrl> for String {
    fn from(u: RedisUrl) -> String {
        u.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(h: &str, p: u16) -> HostPort {
        HostPort {
            host: h.into(),
            port: p,
        }
    }

    #[test]
    fn the_forms_parse_and_print_back() {
        for (url, topology, tls) in [
            (
                "unix:///run/r.sock",
                Topology::Unix("/run/r.sock".into()),
                false,
            ),
            (
                "redis://db.example:6379",
                Topology::Standalone(hp("db.example", 6379)),
                false,
            ),
            (
                "rediss://10.0.0.5:6380",
                Topology::Standalone(hp("10.0.0.5", 6380)),
                true,
            ),
            (
                "redis+sentinel://a:26379,b:26380/mymaster",
                Topology::Sentinel {
                    sentinels: vec![hp("a", 26379), hp("b", 26380)],
                    master: "mymaster".into(),
                },
                false,
            ),
            (
                "rediss+cluster://a:7000,[::1]:7001",
                Topology::Cluster {
                    seeds: vec![hp("a", 7000), hp("::1", 7001)],
                },
                true,
            ),
        ] {
            let u: RedisUrl = url.parse().unwrap();
            assert_eq!(u, RedisUrl { topology, tls }, "{url}");
            assert_eq!(u.to_string(), url);
            assert_eq!(u.to_string().parse::<RedisUrl>().unwrap(), u);
        }
        assert_eq!(
            "/x/redis.sock".parse::<RedisUrl>().unwrap(),
            RedisUrl::unix("/x/redis.sock")
        );
        assert_eq!(
            "redis://h".parse::<RedisUrl>().unwrap().topology,
            Topology::Standalone(hp("h", 6379))
        );
        let json = serde_json::to_string(&RedisUrl::unix("/a b/r.sock")).unwrap();
        assert_eq!(json, "\"unix:///a b/r.sock\"");
        assert_eq!(
            serde_json::from_str::<RedisUrl>(&json).unwrap(),
            RedisUrl::unix("/a b/r.sock")
        );
    }

    #[test]
    fn what_cannot_be_used_is_refused_with_the_reason() {
        for (url, says) in [
            ("db:6379", "no scheme"),
            ("http://h:1", "unknown scheme"),
            ("redis://admin:pw@h:6379", "secrets/lanes_admin"),
            ("redis://h:6379/2", "database 0 only"),
            ("redis://h:99999", "not a port"),
            ("redis://h:0", "not a port"),
            ("redis://a:1,b:2", "one server only"),
            ("redis+sentinel://a:26379", "/<master name>"),
            ("redis://h?ssl_cert_reqs=none", "query options"),
            ("unix://relative.sock", "absolute path"),
            ("redis://h o:1", "not a host"),
            ("redis+cluster://a:1,", "empty host"),
        ] {
            let e = url.parse::<RedisUrl>().unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let half = TlsFiles {
            cert_file: Some("/c.pem".into()),
            ..TlsFiles::default()
        };
        assert!(half.check().is_err());
    }
}
