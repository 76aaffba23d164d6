//! How the daemon's side reaches the lanes' Redis: the private
//! redis-server's unix socket (as `sys`), or a server it does not run
//! (`[lanes] redis_url`: one server over TCP or TLS, the primary a
//! Sentinel names, or every node of a Redis Cluster) as the admin user a
//! person made for oxidepm (`secrets/lanes_admin`). Every daemon-side
//! connection (provisioning, purge, report, the ops responder, the
//! bridge's checks) is made here, so the two cases differ in one place.

use super::error::ConnectError;
use oxidepm_lanes::redis_url::{HostPort, Topology};
use oxidepm_lanes::{RedisUrl, Secret, TlsFiles};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file in `secrets/` holding the shared server's admin credential:
/// the user name on the first line, the password on the second.
pub const ADMIN_CREDENTIAL: &str = "lanes_admin";

/// A credential file is at most this long (two short lines).
const MAX_CREDENTIAL_BYTES: u64 = 4096;

/// How long a connection may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection keys can be used on: one server's, or a cluster's (which
/// sends each command to the node serving its keys' slot).
pub type Con = Box<dyn redis::ConnectionLike + Send>;

/// Where the lanes' Redis is.
#[derive(Clone, Debug)]
pub enum Server {
    /// The private redis-server, on its unix socket.
    Private {
        /// The socket.
        socket: PathBuf,
    },
    /// A server the daemon does not run.
    Shared {
        /// `[lanes] redis_url`.
        url: RedisUrl,
        /// `[lanes] tls_*_file`.
        tls: TlsFiles,
    },
}

impl Server {
    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(
            self,
            Server::Shared {
                url: RedisUrl {
                    topology: Topology::Cluster { .. },
                    ..
                },
                ..
            }
        )
    }

    /// A connection as `user` on which any key may be used.
    pub fn connect(&self, user: &str, pw: &Secret) -> Result<Con, ConnectError> {
        self.connect_timed(user, pw, None)
    }

    /// [`Server::connect`], with a bound on how long a reply may take.
    pub fn connect_timed(
        &self,
        user: &str,
        pw: &Secret,
        read_timeout: Option<Duration>,
    ) -> Result<Con, ConnectError> {
        match self {
            Server::Private { .. } => {
                let con = self.connect_one(user, pw)?;
                let _ = con.set_read_timeout(read_timeout);
                Ok(Box::new(con))
            }
            Server::Shared { url, tls } => match &url.topology {
                Topology::Cluster { seeds } => {
                    let infos = seeds
                        .iter()
                        .map(|s| info(s, url.tls, Some((user, pw))))
                        .collect::<Vec<_>>();
                    let mut b = redis::cluster::ClusterClient::builder(infos)
                        .connection_timeout(CONNECT_TIMEOUT)
                        .username(user.to_string())
                        .password(pw.expose().to_string());
                    if url.tls {
                        b = b.certs(certificates(tls)?);
                    }
                    let client = b.build().map_err(|source| ConnectError::Shared {
                        at: url.to_string(),
                        user: user.to_string(),
                        source,
                    })?;
                    let con = client
                        .get_connection()
                        .map_err(|source| ConnectError::Shared {
                            at: url.to_string(),
                            user: user.to_string(),
                            source,
                        })?;
                    let _ = con.set_read_timeout(read_timeout);
                    Ok(Box::new(con))
                }
                _ => {
                    let con = self.connect_one(user, pw)?;
                    let _ = con.set_read_timeout(read_timeout);
                    Ok(Box::new(con))
                }
            },
        }
    }

    /// A connection as `user` to one server: the private one, the shared
    /// one, or the primary the sentinels name (not for a cluster: see
    /// [`Server::nodes`]).
    pub fn connect_one(&self, user: &str, pw: &Secret) -> Result<redis::Connection, ConnectError> {
        match self {
            Server::Private { socket } => connect_unix(socket, user, pw),
            Server::Shared { url, tls } => match &url.topology {
                Topology::Unix(p) => connect_unix(p, user, pw),
                Topology::Standalone(hp) => connect_node(hp, url.tls, tls, user, pw),
                Topology::Sentinel { sentinels, master } => {
                    let primary = ask_sentinels(sentinels, master, url.tls, tls)?;
                    connect_node(&primary, url.tls, tls, user, pw)
                }
                Topology::Cluster { seeds } => {
                    let mut last = None;
                    for s in seeds {
                        match connect_node(s, url.tls, tls, user, pw) {
                            Ok(c) => return Ok(c),
                            Err(e) => last = Some(e),
                        }
                    }
                    Err(last.unwrap_or(ConnectError::NoNode {
                        at: url.to_string(),
                    }))
                }
            },
        }
    }

    /// A connection as `user` to every node, each named by its address:
    /// the one server, or every node of a cluster, replicas included (ACL
    /// users are not replicated, so each node gets them). `primaries_only`
    /// leaves replicas out (for writes such as UNLINK).
    pub fn nodes(
        &self,
        user: &str,
        pw: &Secret,
        primaries_only: bool,
    ) -> Result<Vec<(String, redis::Connection)>, ConnectError> {
        let Server::Shared { url, tls } = self else {
            return Ok(vec![("private".into(), self.connect_one(user, pw)?)]);
        };
        if !self.is_cluster() {
            return Ok(vec![(url.to_string(), self.connect_one(user, pw)?)]);
        }
        let mut seed = self.connect_one(user, pw)?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut seed)
            .map_err(|source| ConnectError::Shared {
                at: url.to_string(),
                user: user.to_string(),
                source,
            })?;
        let mut out = Vec::new();
        for (hp, primary) in cluster_nodes(&text) {
            if primaries_only && !primary {
                continue;
            }
            out.push((hp.to_string(), connect_node(&hp, url.tls, tls, user, pw)?));
        }
        Ok(out)
    }
}

/// The nodes `CLUSTER NODES` lists as reachable, each with whether it is a
/// primary. Lines that cannot be read are left out.
fn cluster_nodes(text: &str) -> Vec<(HostPort, bool)> {
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

fn info(hp: &HostPort, tls: bool, auth: Option<(&str, &Secret)>) -> redis::ConnectionInfo {
    let addr = if tls {
        redis::ConnectionAddr::TcpTls {
            host: hp.host.clone(),
            port: hp.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(hp.host.clone(), hp.port)
    };
    redis::ConnectionInfo {
        addr,
        redis: redis::RedisConnectionInfo {
            db: 0,
            username: auth.map(|(u, _)| u.to_string()),
            password: auth.map(|(_, p)| p.expose().to_string()),
            protocol: redis::ProtocolVersion::RESP2,
        },
    }
}

/// The PEM files of `tls`, read.
fn certificates(tls: &TlsFiles) -> Result<redis::TlsCertificates, ConnectError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| ConnectError::TlsFile {
            path: p.to_path_buf(),
            source,
        })
    };
    let root_cert = tls.ca_file.as_deref().map(read).transpose()?;
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read(c)?,
            client_key: read(k)?,
        }),
        _ => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

fn client(
    hp: &HostPort,
    tls: bool,
    files: &TlsFiles,
    auth: Option<(&str, &Secret)>,
) -> Result<redis::Client, ConnectError> {
    let i = info(hp, tls, auth);
    let r = if tls {
        redis::Client::build_with_tls(i, certificates(files)?)
    } else {
        redis::Client::open(i)
    };
    r.map_err(|source| ConnectError::Address {
        url: hp.to_string(),
        source,
    })
}

fn connect_node(
    hp: &HostPort,
    tls: bool,
    files: &TlsFiles,
    user: &str,
    pw: &Secret,
) -> Result<redis::Connection, ConnectError> {
    client(hp, tls, files, Some((user, pw)))?
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(|source| ConnectError::Shared {
            at: hp.to_string(),
            user: user.to_string(),
            source,
        })
}

/// The primary `master` as the first sentinel that answers names it.
fn ask_sentinels(
    sentinels: &[HostPort],
    master: &str,
    tls: bool,
    files: &TlsFiles,
) -> Result<HostPort, ConnectError> {
    let mut why = String::from("no sentinel listed");
    for s in sentinels {
        let asked = client(s, tls, files, None)?
            .get_connection_with_timeout(CONNECT_TIMEOUT)
            .and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query::<Option<(String, u16)>>(&mut c)
            });
        match asked {
            Ok(Some((host, port))) => return Ok(HostPort { host, port }),
            Ok(None) => why = format!("sentinel {s} knows no primary named {master:?}"),
            Err(e) => why = format!("sentinel {s}: {e}"),
        }
    }
    Err(ConnectError::Sentinel {
        master: master.to_string(),
        why,
    })
}

/// A connection to a Redis on a unix socket, authenticated as `user`.
fn connect_unix(sock: &Path, user: &str, pw: &Secret) -> Result<redis::Connection, ConnectError> {
    let url = format!("redis+unix://{}", sock.display());
    let client = match redis::Client::open(url.as_str()) {
        Ok(c) => c,
        Err(source) => return Err(ConnectError::Address { url, source }),
    };
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(ConnectError::Reach)?;
    redis::cmd("AUTH")
        .arg(user)
        .arg(pw.expose())
        .query::<()>(&mut con)
        .map_err(|source| ConnectError::Auth {
            user: user.to_string(),
            source,
        })?;
    Ok(con)
}

/// The admin credential of a shared server, from `secrets/lanes_admin`.
#[derive(Clone, Debug)]
pub struct AdminCredential {
    /// The ACL user.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

/// Why `secrets/lanes_admin` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Missing or unreadable.
    #[error("cannot read {}: {source}; write the shared server's admin user on its first line and its password on the second (mode 0600)", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a regular file.
    #[error("{} is not a regular file; make it one holding the admin user and password (mode 0600)", .path.display())]
    NotFile {
        /// The file.
        path: PathBuf,
    },
    /// Others could read or change it.
    #[error(transparent)]
    Exposed(#[from] super::private_file::Exposed),
    /// Not two lines of a user and a password.
    #[error("{}: {what}; write the user name on the first line and the password on the second", .path.display())]
    Form {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
}

/// Reads `secrets/lanes_admin`: a regular file of the daemon's uid, mode
/// 0600 (no bit for group or others), the user on the first line and the
/// password on the second.
pub fn read_admin_credential(secrets_dir: &Path) -> Result<AdminCredential, CredentialError> {
    let path = secrets_dir.join(ADMIN_CREDENTIAL);
    let meta = std::fs::symlink_metadata(&path).map_err(|source| CredentialError::Read {
        path: path.clone(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(CredentialError::NotFile { path });
    }
    super::private_file::check(&path, &meta)?;
    if meta.len() > MAX_CREDENTIAL_BYTES {
        return Err(CredentialError::Form {
            path,
            what: "longer than 4096 bytes",
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| CredentialError::Read {
        path: path.clone(),
        source,
    })?;
    let mut lines = text.lines();
    let user = lines.next().unwrap_or("").trim();
    let password = lines.next().unwrap_or("").trim_end_matches('\r');
    let form = |what| CredentialError::Form {
        path: path.clone(),
        what,
    };
    if user.is_empty()
        || user
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(form("the first line is not a user name"));
    }
    if password.is_empty() {
        return Err(form("the second line (the password) is empty"));
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return Err(form("there is more than two lines"));
    }
    Ok(AdminCredential {
        user: user.to_string(),
        password: Secret::new(password),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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

    #[test]
    fn a_credential_others_can_read_or_of_a_bad_form_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(ADMIN_CREDENTIAL);
        assert!(matches!(
            read_admin_credential(d.path()),
            Err(CredentialError::Read { .. })
        ));
        std::fs::write(&p, "oxidepm\nsecret\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_admin_credential(d.path()),
            Err(CredentialError::Exposed(
                super::super::private_file::Exposed::Mode { mode: 0o644, .. }
            ))
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = read_admin_credential(d.path()).unwrap();
        assert_eq!(
            (c.user.as_str(), c.password.expose()),
            ("oxidepm", "secret")
        );
        for bad in ["oxidepm\n", "\nsecret\n", "a b\nsecret\n", "u\np\nmore\n"] {
            std::fs::write(&p, bad).unwrap();
            assert!(
                matches!(
                    read_admin_credential(d.path()),
                    Err(CredentialError::Form { .. })
                ),
                "{bad:?} accepted"
            );
        }
    }
}
