//! How the daemon's side reaches the lanes' Redis: the private
//! redis-server's unix socket (as `sys`), or a server it does not run
//! (`[lanes] redis_url`: one server over TCP or TLS, the primary a
//! Sentinel names, or every node of a Redis Cluster) as the admin user a
//! person made for oxidepm (`secrets/lanes_admin`). Every daemon-side
//! connection (provisioning, purge, report, the ops responder, the
//! bridge's checks) is made here, so the two cases differ in one place.

use oxidepm_lanes::redis_url::Topology;
use oxidepm_lanes::{RedisUrl, Secret, TlsFiles};
use oxidepm_lanes_net::{Options, Target};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file in `secrets/` holding the shared server's admin credential:
/// the user name on the first line, the password on the second.
pub const ADMIN_CREDENTIAL: &str = "lanes_admin";

/// A credential file is at most this long (two short lines).
const MAX_CREDENTIAL_BYTES: u64 = 4096;

/// How long a connection to a shared server may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one to the private server's socket may take.
const PRIVATE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection keys can be used on: one server's, or a cluster's (which
/// sends each command to the node serving its keys' slot).
pub type Con = oxidepm_lanes_net::Con;

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

    /// Where, as `user`.
    fn target(&self, user: &str, pw: &Secret) -> Target {
        let (url, tls) = match self {
            Server::Private { socket } => (RedisUrl::unix(socket.clone()), TlsFiles::default()),
            Server::Shared { url, tls } => (url.clone(), tls.clone()),
        };
        Target {
            url,
            tls,
            user: user.to_string(),
            password: pw.clone(),
        }
    }

    fn options(&self, read_timeout: Option<Duration>) -> Options {
        let connect_timeout = match self {
            Server::Private { .. } => PRIVATE_CONNECT_TIMEOUT,
            Server::Shared { .. } => CONNECT_TIMEOUT,
        };
        Options {
            connect_timeout,
            response_timeout: read_timeout,
            reconnect: false,
        }
    }

    /// The error of a failed connection as `user`, in the daemon's terms.
    fn error(&self, user: &str, e: oxidepm_lanes_net::Error) -> ConnectError {
        use oxidepm_lanes_net::Error as E;
        match (self, e) {
            (Server::Private { .. }, E::Redis { source, .. }) => {
                if source.kind() == redis::ErrorKind::AuthenticationFailed
                    || source.code() == Some("WRONGPASS")
                {
                    ConnectError::Auth {
                        user: user.to_string(),
                        source,
                    }
                } else {
                    ConnectError::Reach(source)
                }
            }
            (_, E::Redis { at, source }) => ConnectError::Shared {
                at,
                user: user.to_string(),
                source,
            },
            (_, E::Tls(e)) => ConnectError::Tls(e),
            (_, E::Sentinel(e)) => ConnectError::Sentinel {
                why: e.reasons(),
                master: e.master,
            },
            (_, E::NoNode { at } | E::NoSingle { at }) => ConnectError::NoNode { at },
        }
    }

    /// A connection as `user` on which any key may be used.
    pub async fn connect(&self, user: &str, pw: &Secret) -> Result<Con, ConnectError> {
        self.connect_timed(user, pw, None).await
    }

    /// [`Server::connect`], with a bound on how long a reply may take.
    pub async fn connect_timed(
        &self,
        user: &str,
        pw: &Secret,
        read_timeout: Option<Duration>,
    ) -> Result<Con, ConnectError> {
        self.target(user, pw)
            .connect(&self.options(read_timeout))
            .await
            .map_err(|e| self.error(user, e))
    }

    /// A connection as `user` to one server: the private one, the shared
    /// one, or the primary the sentinels name (on a cluster, its first
    /// seed that answers: see [`Server::nodes`]).
    pub async fn connect_one(&self, user: &str, pw: &Secret) -> Result<Con, ConnectError> {
        self.target(user, pw)
            .connect_one(&self.options(None))
            .await
            .map_err(|e| self.error(user, e))
    }

    /// A connection as `user` to every node, each named by its address:
    /// the one server, or every node of a cluster, replicas included (ACL
    /// users are not replicated, so each node gets them). `primaries_only`
    /// leaves replicas out (for writes such as UNLINK).
    pub async fn nodes(
        &self,
        user: &str,
        pw: &Secret,
        primaries_only: bool,
    ) -> Result<Vec<(String, Con)>, ConnectError> {
        if let Server::Private { .. } = self {
            return Ok(vec![("private".into(), self.connect_one(user, pw).await?)]);
        }
        self.target(user, pw)
            .nodes(primaries_only, &self.options(None))
            .await
            .map_err(|e| self.error(user, e))
    }
}

/// Why a connection to the private Redis could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing answers on the socket.
    #[error("lanes: cannot reach the private Redis: {0}")]
    Reach(#[source] redis::RedisError),
    /// Redis refused the user's password.
    #[error("lanes: cannot authenticate to the private Redis as {user}: {source}")]
    Auth {
        /// The user.
        user: String,
        /// Redis's refusal.
        source: redis::RedisError,
    },
    /// The shared server (`[lanes] redis_url`) did not answer, or refused
    /// the user.
    #[error("lanes: {at} as user {user}: {source}; check [lanes] redis_url, the TLS files and secrets/lanes_admin")]
    Shared {
        /// The server or node.
        at: String,
        /// The user.
        user: String,
        /// What Redis (or the network) said.
        source: redis::RedisError,
    },
    /// No node of the cluster answered.
    #[error("lanes: no node of {at} answers; check [lanes] redis_url")]
    NoNode {
        /// The URL.
        at: String,
    },
    /// The TLS settings cannot be used.
    #[error("lanes: {0}; check [lanes] tls_ca_file, tls_cert_file and tls_key_file")]
    Tls(#[source] oxidepm_lanes_net::TlsError),
    /// No sentinel named the primary.
    #[error("lanes: no sentinel names primary {master:?} ({why}); check [lanes] redis_url")]
    Sentinel {
        /// The primary's name.
        master: String,
        /// The last sentinel's answer.
        why: String,
    },
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
