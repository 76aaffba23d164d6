//! A private redis-server with the users and rules the daemon writes.

use crate::resp::{ok, Client};
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::Secret;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The ACL user of agent `agent` (`agent_<name>`), as the daemon names it.
pub fn agent_user(agent: &str) -> String {
    AclUser::Agent(agent.parse().expect("a valid agent name")).to_string()
}

/// The password every test gives ACL user `user`.
pub fn password(user: &str) -> String {
    format!("{user}-test-pw")
}

/// Starts redis-server in `dir` with `acl` as its ACL file, listening on
/// `dir/redis.sock` only, and waits until it accepts connections.
pub fn private_redis(dir: &Path, acl: &str) -> (Child, PathBuf) {
    let socket = dir.join("redis.sock");
    std::fs::write(dir.join("users.acl"), acl).unwrap();
    // The daemon's hardening, so that an attack test meets what a host
    // runs; persistence stays off because no test restarts this server.
    let conf = format!(
        "port 0\nunixsocket {sock}\nunixsocketperm 700\naclfile {dir}/users.acl\n\
         dir {dir}\nsave \"\"\nappendonly no\ndaemonize no\nlogfile {dir}/redis.log\n\
         maxmemory-policy noeviction\nmaxmemory-clients 25%\nenable-debug-command no\n\
         enable-module-command no\nenable-protected-configs no\n",
        sock = socket.display(),
        dir = dir.display()
    );
    let conf_path = dir.join("redis.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut child = Command::new("redis-server")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (Debian: redis-server)");
    crate::eventually(Duration::from_secs(20), "redis-server to start", || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "redis-server exited ({status}): {}",
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            );
        }
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    (child, socket)
}

/// The sources of every test's lanes: an agent's outboxes are these
/// families and its server's responders.
pub const SOURCES: &[&str] = &["webhook", "email", "discord"];

/// A redis-server on a unix socket in a temp dir, with the ACL file the
/// daemon writes: `default` off, `sys`, `bridge`, each responder's
/// `resp_<name>` and each agent's `agent_<name>`, in that order, with the
/// rules of `oxidepm_lanes::acl` for the families [`SOURCES`] and the
/// responders, and the passwords of [`password`], which are also in
/// `secrets/<user>` as the daemon keeps them. Killed on drop.
pub struct Redis {
    /// The temp dir (0711, so that other uids reach sockets inside it).
    pub dir: tempfile::TempDir,
    /// The server's unix socket.
    pub socket: PathBuf,
    child: Child,
}

impl Redis {
    /// A server with these agents and no responder.
    pub fn start(agents: &[&str]) -> Redis {
        Redis::start_with(agents, &[])
    }

    /// A server with these agents and responders.
    pub fn start_with(agents: &[&str], responders: &[&str]) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mut users = vec![AclUser::Admin, AclUser::Bridge];
        for r in responders {
            users.push(AclUser::Responder(r.to_string()));
        }
        for a in agents {
            users.push(AclUser::Agent(a.parse().expect("a valid agent name")));
        }
        let secrets = dir.path().join("secrets");
        oxidepm_lanes::secret::ensure_dir(&secrets).unwrap();
        let users: Vec<(AclUser, Secret)> = users
            .into_iter()
            .map(|user| {
                let pw = password(&user.to_string());
                std::fs::write(secrets.join(user.to_string()), &pw).unwrap();
                (user, Secret::new(pw))
            })
            .collect();
        let mut families: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
        families.extend(responders.iter().map(|r| r.to_string()));
        let (child, socket) = private_redis(dir.path(), &acl::acl_file(&users, &families));
        Redis { dir, socket, child }
    }

    /// The file holding `user`'s password, as `secrets/<user>` does for
    /// the daemon.
    pub fn password_file(&self, user: &str) -> PathBuf {
        self.dir.path().join("secrets").join(user)
    }

    /// A direct connection authenticated as `user`.
    pub fn connect(&self, user: &str) -> Client {
        let mut c = Client::connect(&self.socket);
        let r = c.cmd(&["AUTH", user, &password(user)]);
        assert_eq!(r, ok(), "AUTH as {user}");
        c
    }

    /// The daemon's administrative user, `sys`: what the daemon itself
    /// does (creating consumer groups, inspecting keys).
    pub fn admin(&self) -> Client {
        self.connect(acl::ADMIN_USER)
    }

    /// The bridge's user.
    pub fn bridge(&self) -> Client {
        self.connect(acl::BRIDGE_USER)
    }

    /// An agent's user, as its proxy authenticates it.
    pub fn agent(&self, agent: &str) -> Client {
        self.connect(&agent_user(agent))
    }

    /// Stops redis-server and starts it again on the same socket with the
    /// same users, as the daemon's restart of Redis does (this server
    /// keeps nothing on disk: its keys are gone).
    pub fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.socket);
        let acl = std::fs::read_to_string(self.dir.path().join("users.acl")).unwrap();
        let (child, socket) = private_redis(self.dir.path(), &acl);
        self.child = child;
        self.socket = socket;
    }

    /// Stops redis-server now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::bulk;

    #[test]
    fn the_users_are_the_daemons_and_default_is_off() {
        let redis = Redis::start_with(&["alice"], &["ops"]);
        let mut users = redis.admin().cmd(&["ACL", "USERS"]).strings();
        users.sort();
        assert_eq!(
            users,
            ["agent_alice", "bridge", "default", "resp_ops", "sys"]
        );
        assert_eq!(redis.agent("alice").whoami(), bulk("agent_alice"));
        assert_eq!(
            std::fs::read_to_string(redis.password_file("bridge")).unwrap(),
            password("bridge")
        );
        // The daemon's rules, not a test's: no key outside the lane, no
        // KEYS for the bridge, nothing at all without AUTH.
        let r = redis.agent("alice").cmd(&["XLEN", "bob:webhook:inbox"]);
        assert!(r.error_starts("NOPERM"), "{r:?}");
        assert!(redis.bridge().cmd(&["KEYS", "*"]).error_starts("NOPERM"));
        let r = Client::connect(&redis.socket).cmd(&["PING"]);
        assert!(r.error_starts("NOAUTH"), "{r:?}");
    }
}
