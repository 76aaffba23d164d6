//! Finding the daemon, and starting it when none runs.

use crate::client::Client;
use crate::paths::{self, Home};
use std::io::ErrorKind;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why no daemon could be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing listens on the socket, and no daemon was to be started.
    #[error("connection to the daemon failed: no daemon answers on {}: {source}", socket.display())]
    NoDaemon {
        /// The socket.
        socket: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The socket exists but cannot be connected to.
    #[error("connection to the daemon failed: cannot connect to {}: {source}", socket.display())]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// oxidepmd could not be run to start a daemon.
    #[error("connection to the daemon failed: cannot run oxidepmd to start the daemon: {0}")]
    RunDaemon(#[source] std::io::Error),
    /// oxidepmd ran and failed; what it printed says why.
    #[error("connection to the daemon failed: {stderr}")]
    DaemonFailed {
        /// oxidepmd's standard error.
        stderr: String,
    },
    /// The daemon started, yet its socket cannot be connected to.
    #[error("connection to the daemon failed: {0}")]
    AfterStart(#[source] std::io::Error),
}

fn claim() -> Option<String> {
    std::env::var("OXIDEPM_ACTOR")
        .ok()
        .filter(|c| !c.is_empty())
}

/// Connects to the daemon; with `autostart`, starts one when the main
/// socket has no daemon behind it (never for an explicit OXIDEPM_SOCKET).
pub fn client(autostart: bool) -> Result<Client, ConnectError> {
    let home = Home::from_env();
    let socket = paths::client_socket(&home);
    match Client::connect(&socket, claim()) {
        Ok(c) => Ok(c),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            let explicit = std::env::var_os("OXIDEPM_SOCKET").is_some_and(|s| !s.is_empty())
                && socket != home.daemon_socket();
            if !autostart || explicit {
                return Err(ConnectError::NoDaemon { socket, source: e });
            }
            start_daemon(&home)?;
            Client::connect(&socket, claim()).map_err(ConnectError::AfterStart)
        }
        Err(e) => Err(ConnectError::Connect { socket, source: e }),
    }
}

fn daemon_exe() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("oxidepmd")));
    match beside {
        Some(p) if p.is_file() => p,
        _ => PathBuf::from("oxidepmd"),
    }
}

fn start_daemon(home: &Home) -> Result<(), ConnectError> {
    let out = std::process::Command::new(daemon_exe())
        .arg("--home")
        .arg(home.root())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(ConnectError::RunDaemon)?;
    if !out.status.success() {
        return Err(ConnectError::DaemonFailed {
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    eprintln!(
        "oxidepm: started the daemon (pid {pid}) for {}",
        home.root().display()
    );
    Ok(())
}

/// Waits (briefly) until the daemon has released its socket after `kill`.
pub fn wait_gone() {
    let home = Home::from_env();
    let deadline = Instant::now() + Duration::from_secs(10);
    while home.daemon_socket().exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The lock is released when the process exits, just after the socket
    // is removed; take and drop it so a following start cannot race it.
    while Instant::now() < deadline {
        match crate::paths::lock::DaemonLock::acquire(&home) {
            Ok(_) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
