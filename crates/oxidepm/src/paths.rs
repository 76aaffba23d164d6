//! Where oxidepm keeps its files.

pub mod lock;
pub mod trust;

use std::path::{Path, PathBuf};

/// The files of one oxidepm home (`$OXIDEPM_HOME`, default `~/.oxidepm`).
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// The home named by `OXIDEPM_HOME`, else `~/.oxidepm`.
    pub fn from_env() -> Home {
        if let Some(h) = std::env::var_os("OXIDEPM_HOME").filter(|h| !h.is_empty()) {
            return Home::at(PathBuf::from(h));
        }
        let base = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.dir)
            })
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Home::at(base.join(".oxidepm"))
    }

    /// A home at an explicit directory.
    pub fn at(root: PathBuf) -> Home {
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir().unwrap_or_default().join(root)
        };
        Home { root }
    }

    /// The home directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The main control socket.
    pub fn daemon_socket(&self) -> PathBuf {
        self.root.join("daemon.sock")
    }

    /// The agent socket.
    pub fn agent_socket(&self) -> PathBuf {
        self.root.join("agent.sock")
    }

    /// The SQLite state file.
    pub fn state_db(&self) -> PathBuf {
        self.root.join("state.db")
    }

    /// The daemon's configuration file.
    pub fn config(&self) -> PathBuf {
        self.root.join("daemon.toml")
    }

    /// The lock held by the running daemon.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }

    /// The lock held by the one CLI command that starts the daemon.
    pub fn start_lock(&self) -> PathBuf {
        self.root.join("start.lock")
    }

    /// The daemon's own log when it runs in the background.
    pub fn daemon_log(&self) -> PathBuf {
        self.root.join("daemon.log")
    }

    /// Directory of app logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// The private Redis's directory (the lanes' layout names its files).
    pub fn redis_dir(&self) -> PathBuf {
        self.root.join("redis")
    }

    /// Lane passwords and tokens.
    pub fn secrets_dir(&self) -> PathBuf {
        self.root.join("secrets")
    }

    /// Agent sockets and lane descriptions.
    pub fn lanes_dir(&self) -> PathBuf {
        self.root.join("lanes")
    }

    /// Every directory of the home that the daemon writes in, the home
    /// first: what [`trust::check_home`] checks before the daemon starts.
    pub fn dirs(&self) -> [PathBuf; 5] {
        [
            self.root.clone(),
            self.logs_dir(),
            self.redis_dir(),
            self.secrets_dir(),
            self.lanes_dir(),
        ]
    }
}

/// The socket the CLI talks to: `OXIDEPM_SOCKET`, else the home's daemon.sock.
pub fn client_socket(home: &Home) -> PathBuf {
    match std::env::var_os("OXIDEPM_SOCKET").filter(|s| !s.is_empty()) {
        Some(s) => PathBuf::from(s),
        None => home.daemon_socket(),
    }
}
