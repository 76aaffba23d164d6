//! A Redis that oxidepm does not run, as a team shares it: redis-server on
//! 127.0.0.1 over TCP (TLS with certificates of a generated CA), an ACL
//! file with `default` off, a full-power `root` user for the tests'
//! inspection, and the `oxidepm` user the README tells people to create,
//! with exactly [`oxidepm_lanes::acl::SHARED_ADMIN_RULES`].

use crate::tls::Certs;
use oxidepm_lanes::acl::SHARED_ADMIN_RULES;
use oxidepm_lanes::TlsFiles;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The tests' all-powerful user on a shared server or cluster.
pub const ROOT_USER: &str = "root";
/// Its password.
pub const ROOT_PASSWORD: &str = "root-test-pw";
/// The user a person creates for oxidepm.
pub const OXIDEPM_USER: &str = "oxidepm";
/// Its password.
pub const OXIDEPM_PASSWORD: &str = "oxidepm-test-pw";

/// The ACL file of a shared server: default off, root, oxidepm.
pub fn acl_file() -> String {
    format!(
        "user default reset off\n\
         user {ROOT_USER} reset on >{ROOT_PASSWORD} ~* &* +@all\n\
         user {OXIDEPM_USER} reset on >{OXIDEPM_PASSWORD} {}\n",
        SHARED_ADMIN_RULES.join(" ")
    )
}

/// A port `p` such that `p` and `p + 10000` (a cluster node's bus) are
/// free now. Both are below the kernel's ephemeral ports (32768 and up),
/// which any outgoing connection may take between this look and the
/// server's bind; another test may still take one first: see
/// [`start_retrying`].
pub fn free_port_pair() -> u16 {
    for _ in 0..1000 {
        let p = 10_000 + (std::process::id() as u16 ^ rand_u16()) % 10_000;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(p) && free(p + 10_000) {
            return p;
        }
    }
    panic!("no free pair of ports in 10000-29999")
}

fn rand_u16() -> u16 {
    let mut b = [0u8; 2];
    getrandom(&mut b);
    u16::from_le_bytes(b)
}

fn getrandom(b: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(b))
        .expect("/dev/urandom");
}

/// The settings of a redis-server reached over TCP on `port` (TLS when
/// `certs`), with `dir` as its directory and `acl` as its ACL file.
pub(crate) fn tcp_conf(dir: &Path, port: u16, certs: Option<&Certs>) -> String {
    let listen = match certs {
        Some(c) => format!("port 0\ntls-port {port}\n{}", c.server_conf(false)),
        None => format!("port {port}\n"),
    };
    format!(
        "{listen}bind 127.0.0.1\nprotected-mode no\naclfile {dir}/users.acl\ndir {dir}\n\
         save \"\"\nappendonly no\ndaemonize no\nlogfile {dir}/redis.log\n\
         maxmemory-policy noeviction\nenable-debug-command no\nenable-module-command no\n",
        dir = dir.display()
    )
}

/// Starts redis-server with `conf` in `dir` (which holds users.acl).
pub(crate) fn spawn(dir: &Path, conf: &str) -> Child {
    let path = dir.join("redis.conf");
    std::fs::write(&path, conf).unwrap();
    Command::new("redis-server")
        .arg(&path)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (Debian: redis-server)")
}

/// A connection as `user` to the server at `port` (TLS when `certs`).
pub fn connect(
    port: u16,
    certs: Option<&Certs>,
    user: &str,
    password: &str,
) -> redis::RedisResult<redis::Connection> {
    let redis = redis::RedisConnectionInfo {
        db: 0,
        username: Some(user.into()),
        password: Some(password.into()),
        protocol: redis::ProtocolVersion::RESP2,
    };
    let client = match certs {
        Some(c) => redis::Client::build_with_tls(
            redis::ConnectionInfo {
                addr: redis::ConnectionAddr::TcpTls {
                    host: "127.0.0.1".into(),
                    port,
                    insecure: false,
                    tls_params: None,
                },
                redis,
            },
            c.client(),
        )?,
        None => redis::Client::open(redis::ConnectionInfo {
            addr: redis::ConnectionAddr::Tcp("127.0.0.1".into(), port),
            redis,
        })?,
    };
    client.get_connection_with_timeout(Duration::from_secs(5))
}

/// Waits until the server at `port` answers `root`; `Err` with its log
/// when it exited instead.
pub(crate) fn wait_up(
    child: &mut Child,
    dir: &Path,
    port: u16,
    certs: Option<&Certs>,
) -> Result<(), String> {
    crate::eventually(Duration::from_secs(20), "redis-server to start", || {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(Err(format!(
                "redis-server exited ({status}): {}",
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            )));
        }
        connect(port, certs, ROOT_USER, ROOT_PASSWORD)
            .is_ok()
            .then_some(Ok(()))
    })
}

/// Starts a server with `start(port)` (which spawns it and waits until it
/// is up) on a port `pick` gives, again on another when the one it got was
/// taken before the server bound it (the suite runs many tests at once).
pub(crate) fn start_retrying<T>(
    pick: impl Fn() -> u16,
    mut start: impl FnMut(u16) -> Result<T, String>,
) -> T {
    let mut last = String::new();
    for _ in 0..5 {
        match start(pick()) {
            Ok(t) => return t,
            Err(e) if e.contains("Address already in use") => last = e,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("no free port after 5 tries: {last}")
}

/// One shared redis-server on 127.0.0.1. Killed on drop.
pub struct SharedRedis {
    /// Its directory (config, ACL file, log, certificates).
    pub dir: tempfile::TempDir,
    /// Its TCP (or TLS) port.
    pub port: u16,
    /// The certificates, when it speaks TLS.
    pub certs: Option<Certs>,
    child: Child,
}

impl SharedRedis {
    /// Starts one; TLS only when `tls` (clients need not show a
    /// certificate).
    pub fn start(tls: bool) -> SharedRedis {
        let dir = tempfile::tempdir().unwrap();
        let certs = tls.then(|| Certs::generate(dir.path()));
        std::fs::write(dir.path().join("users.acl"), acl_file()).unwrap();
        let (port, child) = start_retrying(crate::http::free_port, |port| {
            let mut child = spawn(dir.path(), &tcp_conf(dir.path(), port, certs.as_ref()));
            match wait_up(&mut child, dir.path(), port, certs.as_ref()) {
                Ok(()) => Ok((port, child)),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    Err(e)
                }
            }
        });
        SharedRedis {
            dir,
            port,
            certs,
            child,
        }
    }

    /// `[lanes] redis_url` for it (`rediss://127.0.0.1:<port>` with TLS).
    pub fn url(&self) -> String {
        let s = if self.certs.is_some() { "s" } else { "" };
        format!("redis{s}://127.0.0.1:{}", self.port)
    }

    /// `[lanes] tls_*` for it: the CA only.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            ca_file: self.certs.as_ref().map(|c| c.ca.clone()),
            ..TlsFiles::default()
        }
    }

    /// A connection as `user`.
    pub fn connect(&self, user: &str, password: &str) -> redis::RedisResult<redis::Connection> {
        connect(self.port, self.certs.as_ref(), user, password)
    }

    /// A connection as `root`.
    pub fn root(&self) -> redis::Connection {
        self.connect(ROOT_USER, ROOT_PASSWORD).unwrap()
    }

    /// Stops it now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SharedRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oxidepm_user_provisions_but_cannot_flush_or_reconfigure() {
        let s = SharedRedis::start(true);
        let mut c = s.connect(OXIDEPM_USER, OXIDEPM_PASSWORD).unwrap();
        let ok: redis::RedisResult<()> = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("agent_x")
            .arg("on")
            .query(&mut c);
        assert!(ok.is_ok(), "{ok:?}");
        for args in [
            vec!["FLUSHALL"],
            vec!["CONFIG", "SET", "maxmemory", "1"],
            vec!["ACL", "LOAD"],
            vec!["KEYS", "*"],
        ] {
            let r: redis::RedisResult<redis::Value> =
                redis::cmd(args[0]).arg(&args[1..]).query(&mut c);
            let e = r.expect_err(&format!("{args:?} allowed"));
            assert!(
                e.to_string().contains("NOPERM") || e.to_string().contains("permission"),
                "{e}"
            );
        }
        assert!(s.connect("default", "").is_err());
        // Without the CA, the server's certificate is not trusted.
        let plain = connect(s.port, None, ROOT_USER, ROOT_PASSWORD);
        assert!(plain.is_err());
    }
}
