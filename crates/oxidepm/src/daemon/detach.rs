//! Starting the daemon in the background.

use crate::paths::Home;
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why the daemon could not be started in the background.
#[derive(Debug, thiserror::Error)]
pub enum DetachError {
    /// The running executable cannot be found to run it again.
    #[error("cannot find oxidepmd: {0}")]
    OwnExe(#[source] std::io::Error),
    /// daemon.log cannot be opened for the daemon's output.
    #[error("cannot open {}: {source}", path.display())]
    Log {
        /// daemon.log.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The log's descriptor cannot be shared between stdout and stderr.
    #[error("{0}")]
    LogDescriptor(#[source] std::io::Error),
    /// The process cannot be started.
    #[error("cannot start the daemon: {0}")]
    Spawn(#[source] std::io::Error),
    /// It started, then exited before it listened.
    #[error("the daemon exited at start ({status}){said}; see {}", log.display())]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// Why, as its last words in daemon.log said (`: …`), if found.
        said: String,
        /// daemon.log, which says why.
        log: PathBuf,
    },
    /// It did not listen in time.
    #[error("the daemon did not answer within 10 s; see {}", log.display())]
    NoAnswer {
        /// daemon.log.
        log: PathBuf,
    },
}

/// Starts `oxidepmd --foreground` detached (own session, output to
/// daemon.log), waits until it answers on its socket, and reports its pid.
pub fn detach(home: &Home, resurrect: bool) -> ExitCode {
    match spawn_detached(home, resurrect) {
        Ok(pid) => {
            println!("{pid}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oxidepmd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Spawns the daemon and waits for its socket; returns its pid.
// Run by the parent that detaches (the CLI, or `oxidepmd` before any
// runtime exists), never on the daemon's runtime.
#[allow(clippy::disallowed_methods)]
pub fn spawn_detached(home: &Home, resurrect: bool) -> Result<u32, DetachError> {
    let exe = std::env::current_exe().map_err(DetachError::OwnExe)?;
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a link planted in the home's place of daemon.log.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(home.daemon_log())
        .map_err(|source| DetachError::Log {
            path: home.daemon_log(),
            source,
        })?;
    let mut cmd = Command::new(exe);
    cmd.arg("--foreground")
        .arg("--daemon-log")
        .arg("--home")
        .arg(home.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(DetachError::LogDescriptor)?)
        .stderr(log);
    if resurrect {
        cmd.arg("--resurrect");
    }
    oxidepm_sys::exec::own_session(&mut cmd);
    let mut child = cmd.spawn().map_err(DetachError::Spawn)?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if std::os::unix::net::UnixStream::connect(home.daemon_socket()).is_ok() {
            return Ok(pid);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DetachError::Exited {
                status,
                said: last_words(&home.daemon_log()),
                log: home.daemon_log(),
            });
        }
        if Instant::now() > deadline {
            return Err(DetachError::NoAnswer {
                log: home.daemon_log(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `: <reason>` from the last `oxidepmd: ` line of daemon.log (its tail
/// only), so that a daemon refusing to start says why where it was asked
/// to start; empty when there is none.
fn last_words(log: &std::path::Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 16 * 1024;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(TAIL)));
        let mut bytes = Vec::new();
        let _ = f.take(TAIL).read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("oxidepmd: "))
        .map(|reason| format!(": {reason}"))
        .unwrap_or_default()
}
