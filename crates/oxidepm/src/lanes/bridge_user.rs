//! Who the bridge runs as, and what it may reach.
//!
//! The bridge reads mail from a Maildir that others write into and talks to
//! the outside world, so a daemon running as root does not run it as root:
//! it runs as `[lanes] bridge_user` (default [`DEFAULT_BRIDGE_USER`]), a
//! system user made the way a package makes one (`useradd --system
//! --no-create-home --shell /usr/sbin/nologin`) when it is missing. If that
//! user cannot be had, or cannot reach what the bridge needs, the bridge
//! does not run and `oxidepm lanes` says why; it never falls back to root.
//! A daemon that is not root runs the bridge as itself.
//!
//! What the bridge opens, and how it may:
//!
//! | what | where | access |
//! |---|---|---|
//! | its configuration | `bridge/bridge.json` | its own file, 0600 |
//! | its Redis password | `bridge/password` | a copy of `secrets/bridge`, its own, 0600 |
//! | the webhook token | `bridge/webhook_token` | a copy of `secrets/webhook_token`, its own, 0600 |
//! | the discord bot token | `bridge/discord_token` | a copy of `secrets/discord_token` (which the person writes), its own, 0600 |
//! | the Redis socket | `redis/redis.sock` | 0770, the bridge user's group |
//! | the Maildir | as configured | made for it when missing, else it must list and move in `new/` and `cur/` |
//! | its log | `logs/` | written by the daemon's log writer from its output; the bridge opens nothing there |
//!
//! `bridge/` is the daemon's, mode 0710, group the bridge user's: the bridge
//! passes through it to its files and cannot list it or put anything in
//! it, so the daemon's rewrites cannot be redirected. `redis/` is the
//! daemon's, mode 02710, same group: the bridge reaches the socket and
//! nothing else there (every file in it is 0600), and the set-group-id bit
//! gives a socket Redis makes again after a restart the same group. The
//! home is made reachable (0711, as for agents of their own uid). The
//! canonical secrets stay in `secrets/` (0700), which the bridge cannot
//! enter.
//!
//! The checks read mode bits (owner, group, others) and not ACLs.

use crate::supervise::spawn::{resolve_user, Creds};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The bridge's user when daemon.toml names none.
pub const DEFAULT_BRIDGE_USER: &str = "oxidepm-bridge";

/// Mode of `bridge/` and `redis/` when the bridge runs as its own user.
pub const SHARED_DIR_MODE: u32 = 0o710;
/// Mode of `redis/` when the bridge runs as its own user.
pub const REDIS_DIR_MODE: u32 = 0o2710;

const READ: u32 = 4;
const WRITE: u32 = 2;
const SEARCH: u32 = 1;

/// The user the bridge runs as, when it is not the daemon's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeUser {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group, which the Redis socket is given.
    pub gid: u32,
    /// Every group it is in.
    pub groups: Vec<u32>,
}

/// Why the bridge cannot run as its own user; `oxidepm lanes` shows it.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The user is missing and useradd did not make it.
    #[error("the bridge user {name:?} does not exist and could not be made ({why}); create it (useradd --system --no-create-home --shell /usr/sbin/nologin {name}) or name another in [lanes] bridge_user")]
    NoUser {
        /// The user.
        name: String,
        /// What useradd said.
        why: String,
    },
    /// The user is root.
    #[error("[lanes] bridge_user {name:?} is root; the bridge must run as a user of its own")]
    Root {
        /// The user.
        name: String,
    },
    /// An agent runs as the same user, and could read the bridge's files.
    #[error("[lanes] bridge_user {name:?} is also the user of agent {agent}, which could then read the bridge's password; give the bridge a user of its own")]
    SharedWithAgent {
        /// The user.
        name: String,
        /// The agent.
        agent: String,
    },
    /// A directory above the bridge's files is closed to it.
    #[error("the bridge user {name:?} cannot reach {path}: {dir} is not searchable by it; put OXIDEPM_HOME where others may pass (e.g. /var/lib/oxidepm)")]
    Unreachable {
        /// The user.
        name: String,
        /// What it must reach.
        path: PathBuf,
        /// The directory in the way.
        dir: PathBuf,
    },
    /// The Maildir cannot be used by the bridge user.
    #[error("the Maildir {path} is not usable by the bridge user {name:?}: {why}; make it that user's (chown -R {name} {path}) or let it in by group")]
    Maildir {
        /// The user.
        name: String,
        /// The Maildir.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The webhook's port needs root.
    #[error("[lanes.webhook] listen port {port} is below {limit} and needs root, but the bridge runs as {name:?}; use a port of {limit} or more")]
    Port {
        /// The user.
        name: String,
        /// The port.
        port: u16,
        /// The first port any user may bind.
        limit: u16,
    },
    /// Something on the way could not be read.
    #[error("cannot check {path} for the bridge user: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A source's secret the person writes (the discord bot token)
    /// cannot be handed to the bridge.
    #[error("lanes.{source_name}: {error}")]
    SourceSecret {
        /// The source.
        source_name: &'static str,
        /// Why.
        #[source]
        error: super::source_secret::SecretFileError,
    },
}

/// Why `useradd` did not make a user.
enum Useradd {
    /// It cannot be run at all: trying again changes nothing.
    Missing(String),
    /// It ran and failed (what it said).
    Ran(String),
}

/// Runs `useradd` for the system user `name`, off the daemon's runtime.
///
/// The daemon's reaper waits for any child (`waitpid(-1)`), so it may take
/// useradd's exit status before this thread does: what useradd said on
/// stderr is read first and stands for the outcome then. Whether the user
/// exists is looked up afterwards in any case.
// Runs on a blocking thread (`get_or_make` hands it to spawn_blocking).
#[allow(clippy::disallowed_methods)]
fn run_useradd(name: &str) -> Result<(), Useradd> {
    use std::io::Read;
    let Some(useradd) = super::programs::find_program("useradd") else {
        return Err(Useradd::Missing("useradd is not on PATH".to_string()));
    };
    let spawned = std::process::Command::new(&useradd)
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg("--")
        .arg(name)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Err(Useradd::Missing(format!(
                "cannot run {}: {e}",
                useradd.display()
            )))
        }
    };
    let mut stderr = Vec::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_end(&mut stderr);
    }
    let said = || {
        format!(
            "useradd: {}",
            String::from_utf8_lossy(&stderr).trim().replace('\n', "; ")
        )
    };
    match child.wait() {
        Ok(status) if status.success() => Ok(()),
        Ok(_) => Err(Useradd::Ran(said())),
        // Reaped by the daemon: its words are all there is to go by.
        Err(_) if stderr.is_empty() => Ok(()),
        Err(_) => Err(Useradd::Ran(said())),
    }
}

impl BridgeUser {
    /// The user named `name`, made as a system user when missing.
    ///
    /// The lookups, useradd and the pauses between its tries run on a
    /// blocking thread, never on the daemon's runtime thread, which serves
    /// every request and reaps every child.
    pub async fn get_or_make(name: &str) -> Result<BridgeUser, Problem> {
        let owned = name.to_string();
        tokio::task::spawn_blocking(move || BridgeUser::get_or_make_now(&owned))
            .await
            .unwrap_or_else(|e| {
                Err(Problem::NoUser {
                    name: name.to_string(),
                    why: e.to_string(),
                })
            })
    }

    /// [`BridgeUser::get_or_make`], on the calling thread.
    // Runs on a blocking thread (`get_or_make` hands it to spawn_blocking).
    #[allow(clippy::disallowed_methods)]
    fn get_or_make_now(name: &str) -> Result<BridgeUser, Problem> {
        if let Ok(c) = resolve_user(name) {
            return BridgeUser::checked(name, c);
        }
        let mut why = String::new();
        // useradd fails while another process holds /etc/passwd's lock (a
        // second daemon making the same user at the same moment, a package
        // being installed): a few tries, a moment apart.
        for attempt in 0..4 {
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_millis(50 << attempt));
            }
            let ran = run_useradd(name);
            // Looked up again whatever useradd said: another daemon may have
            // made the same user just before.
            if let Ok(c) = resolve_user(name) {
                log::info!("lanes: made the system user {name} for the bridge");
                return BridgeUser::checked(name, c);
            }
            match ran {
                Ok(()) => why.clear(),
                Err(Useradd::Ran(w)) => why = w,
                Err(Useradd::Missing(w)) => {
                    why = w;
                    break;
                }
            }
        }
        let e = resolve_user(name).err();
        Err(Problem::NoUser {
            name: name.to_string(),
            why: match (why.is_empty(), e) {
                (true, Some(e)) => e.to_string(),
                _ => why,
            },
        })
    }

    fn checked(name: &str, c: Creds) -> Result<BridgeUser, Problem> {
        if c.uid.is_root() {
            return Err(Problem::Root {
                name: name.to_string(),
            });
        }
        Ok(BridgeUser {
            name: name.to_string(),
            uid: c.uid.as_raw(),
            gid: c.gid.as_raw(),
            groups: c.groups.iter().map(|g| g.as_raw()).collect(),
        })
    }

    /// Whether its mode bits let this user do `want` (read 4, write 2,
    /// search 1) to a file with `meta`.
    fn may(&self, meta: &fs::Metadata, want: u32) -> bool {
        let mode = meta.mode();
        let bits = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            mode >> 3
        } else {
            mode
        };
        bits & want == want
    }

    /// Checks that this user can pass through every directory above
    /// `path`.
    pub fn reaches(&self, path: &Path) -> Result<(), Problem> {
        let path = std::path::absolute(path).map_err(|source| Problem::Io {
            path: path.to_path_buf(),
            source,
        })?;
        for dir in path.ancestors().skip(1) {
            let meta = fs::metadata(dir).map_err(|source| Problem::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            if !self.may(&meta, SEARCH) {
                return Err(Problem::Unreachable {
                    name: self.name.clone(),
                    path: path.clone(),
                    dir: dir.to_path_buf(),
                });
            }
        }
        Ok(())
    }

    /// Makes the Maildir at `root` (and its `tmp/`, `new/`, `cur/`) for
    /// this user when it is missing, then checks that the user can reach
    /// it, list and move in `new/` and move into `cur/`.
    pub fn prepare_maildir(&self, root: &Path) -> Result<(), Problem> {
        let root = std::path::absolute(root).map_err(|source| Problem::Io {
            path: root.to_path_buf(),
            source,
        })?;
        let problem = |why: String| Problem::Maildir {
            name: self.name.clone(),
            path: root.clone(),
            why,
        };
        let made_root = match fs::symlink_metadata(&root) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !root.parent().is_some_and(Path::is_dir) {
                    return Err(problem("neither it nor its parent directory exists".into()));
                }
                self.make_dir(&root).map_err(|e| problem(e.to_string()))?;
                true
            }
            Err(e) => return Err(problem(e.to_string())),
        };
        let ours = made_root
            || fs::metadata(&root)
                .map(|m| m.uid() == self.uid)
                .unwrap_or(false);
        for sub in ["tmp", "new", "cur"] {
            let dir = root.join(sub);
            if ours && fs::symlink_metadata(&dir).is_err() {
                self.make_dir(&dir)
                    .map_err(|e| problem(format!("cannot make {sub}/: {e}")))?;
            }
        }
        self.reaches(&root.join("new"))?;
        for (sub, want, what) in [
            ("new", READ | WRITE | SEARCH, "list and move mail in"),
            ("cur", READ | WRITE | SEARCH, "move mail into"),
        ] {
            let dir = root.join(sub);
            match fs::metadata(&dir) {
                Ok(m) if m.is_dir() && self.may(&m, want) => {}
                Ok(m) if m.is_dir() => {
                    return Err(problem(format!(
                        "it may not {what} {sub}/ (mode {:o}, owner uid {})",
                        m.mode() & 0o7777,
                        m.uid()
                    )))
                }
                Ok(_) => return Err(problem(format!("{sub}/ is not a directory"))),
                Err(e) => return Err(problem(format!("{sub}/: {e}"))),
            }
        }
        Ok(())
    }

    /// A directory 0700 of this user's.
    fn make_dir(&self, dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new().mode(0o700).create(dir)?;
        // lchown: should the new name be swapped for a symlink meanwhile,
        // the link is what changes owner, not what it points at.
        std::os::unix::fs::lchown(dir, Some(self.uid), Some(self.gid))
    }

    /// Checks that the webhook can listen on `port` as this user.
    pub fn check_port(&self, port: u16) -> Result<(), Problem> {
        let limit = fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
            .unwrap_or(1024);
        if port != 0 && port < limit {
            return Err(Problem::Port {
                name: self.name.clone(),
                port,
                limit,
            });
        }
        Ok(())
    }
}

/// Makes `dir` (the daemon's) a directory the bridge user passes through
/// by group (`mode`, e.g. [`SHARED_DIR_MODE`]), or a private one (0700)
/// when the bridge runs as the daemon.
pub fn share_dir(dir: &Path, user: Option<&BridgeUser>, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    match user {
        Some(u) => {
            std::os::unix::fs::lchown(dir, None, Some(u.gid))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(mode))
        }
        None => fs::set_permissions(dir, fs::Permissions::from_mode(0o700)),
    }
}

/// Gives the Redis socket, when it exists, to the bridge user's group
/// (mode 0770). Redis makes it so itself after a restart; this covers one
/// that was started before.
pub fn share_socket(socket: &Path, user: &BridgeUser) -> io::Result<()> {
    match fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() => {
            std::os::unix::fs::lchown(socket, None, Some(user.gid))?;
            fs::set_permissions(socket, fs::Permissions::from_mode(0o770))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes `data` to `path` atomically as a 0600 file of `owner` (the
/// daemon's when `None`). The file is made anew (O_EXCL), so nothing
/// planted at the temporary name is written through.
pub fn write_private(path: &Path, data: &[u8], owner: Option<&BridgeUser>) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    if let Some(o) = owner {
        std::os::unix::fs::fchown(&f, Some(o.uid), Some(o.gid))?;
    }
    f.write_all(data)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody() -> BridgeUser {
        BridgeUser {
            name: "someone".into(),
            uid: 60_001,
            gid: 60_001,
            groups: vec![60_001],
        }
    }

    #[test]
    fn mode_bits_decide() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fs::write(&p, "x").unwrap();
        let u = nobody();
        for (mode, want, ok) in [
            (0o600, READ, false),
            (0o604, READ, true),
            (0o640, READ, false),
            (0o711, SEARCH, true),
            (0o700, SEARCH, false),
        ] {
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            let m = fs::metadata(&p).unwrap();
            assert_eq!(u.may(&m, want), ok, "{mode:o} {want}");
        }
    }

    #[test]
    fn a_closed_directory_on_the_way_is_named() {
        let d = tempfile::tempdir().unwrap();
        let closed = d.path().join("closed");
        fs::create_dir_all(closed.join("in")).unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
        let u = nobody();
        let parent_open = u.reaches(&closed);
        // Everything above the temp dir is searchable on any sane system.
        assert!(parent_open.is_ok(), "{parent_open:?}");
        match u.reaches(&closed.join("in/x")) {
            Err(Problem::Unreachable { dir, .. }) => assert_eq!(dir, closed),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn private_files_are_made_anew() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("conf.json");
        // Something planted at the temporary name is not written through.
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, p.with_extension("tmp")).unwrap();
        write_private(&p, b"{}", None).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(fs::read_to_string(&p).unwrap(), "{}");
        let m = fs::symlink_metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
    }
}
