//! Finding the daemon, and starting it when none runs.
//!
//! Commands run at once against a home with no daemon must not race to
//! start one: a starter holds `start.lock` while it starts the daemon, and
//! the others wait for that lock, then find the daemon answering.

use crate::client::Client;
use crate::paths::{self, Home};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a command waits for the daemon when OXIDEPM_TIMEOUT is unset.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a command waits for another one that is starting the daemon
/// (which itself waits up to 10 s for the daemon's socket).
const START_WAIT: Duration = Duration::from_secs(30);

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
    /// The home cannot be trusted: nothing is written into it.
    #[error("connection to the daemon failed: {0}")]
    Home(#[from] crate::paths::trust::HomeError),
    /// oxidepmd could not be run to start a daemon.
    #[error("connection to the daemon failed: cannot run oxidepmd to start the daemon: {0}")]
    RunDaemon(#[source] std::io::Error),
    /// oxidepmd ran and failed; what it printed says why.
    #[error("connection to the daemon failed: {stderr}")]
    DaemonFailed {
        /// oxidepmd's standard error.
        stderr: String,
    },
    /// The daemon does not take connections in time.
    #[error(
        "connection to the daemon failed: the daemon at {} did not take the connection within {} s; \
         is it stuck? See {}; to restart it, stop its process and run any oxidepm command \
         (set OXIDEPM_TIMEOUT to a number of seconds to wait longer, 0 for ever)",
        socket.display(),
        waited.as_secs_f64(),
        socket.with_file_name("daemon.log").display()
    )]
    NotAccepting {
        /// The socket.
        socket: PathBuf,
        /// How long the command waited.
        waited: Duration,
    },
    /// OXIDEPM_TIMEOUT is not a number of seconds.
    #[error("OXIDEPM_TIMEOUT={value:?} is not a number of seconds: use for example 10 or 2.5, or 0 to wait for ever")]
    BadTimeout {
        /// The value as set.
        value: String,
    },
    /// Another command started the daemon and did not finish in time.
    #[error("connection to the daemon failed: another oxidepm command has been starting the daemon for {} s (it holds {}); see {}", waited.as_secs(), lock.display(), lock.with_file_name("daemon.log").display())]
    StartWait {
        /// The start lock.
        lock: PathBuf,
        /// How long this command waited for it.
        waited: Duration,
    },
    /// The start lock cannot be made.
    #[error("connection to the daemon failed: cannot create {}: {source}", path.display())]
    StartLock {
        /// The home directory or the lock file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The daemon started, yet its socket cannot be connected to.
    #[error("connection to the daemon failed: {0}")]
    AfterStart(#[source] std::io::Error),
    /// The process behind the socket runs as another user (not root).
    #[error(
        "refusing the daemon on {}: it runs as {owner}, not as you ({me}) or root, and would \
         read this command's request (an app's environment included) and could answer it with \
         anything; run the command as that user (sudo -u {owner} oxidepm ...), or set \
         OXIDEPM_HOME to a home of your own",
        socket.display()
    )]
    Foreign {
        /// The socket.
        socket: PathBuf,
        /// The user the process behind it runs as.
        owner: String,
        /// The user running this command.
        me: String,
    },
}

fn claim() -> Option<String> {
    std::env::var("OXIDEPM_ACTOR")
        .ok()
        .filter(|c| !c.is_empty())
}

/// How long to wait for the daemon: OXIDEPM_TIMEOUT seconds (0: for
/// ever), else 10 s.
fn timeout() -> Result<Option<Duration>, ConnectError> {
    let Some(value) = std::env::var("OXIDEPM_TIMEOUT")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return Ok(Some(DEFAULT_TIMEOUT));
    };
    let secs: f64 = value
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .ok_or_else(|| ConnectError::BadTimeout {
            value: value.clone(),
        })?;
    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
}

/// Connects to `socket`, saying a timeout in the user's terms.
fn connect(socket: &Path, deadline: Option<Duration>) -> std::io::Result<Client> {
    Client::connect(socket, claim(), deadline)
}

/// Connects to the daemon; with `autostart`, starts one when the main
/// socket has no daemon behind it (never for an explicit OXIDEPM_SOCKET).
pub fn client(autostart: bool) -> Result<Client, ConnectError> {
    let home = Home::from_env();
    let socket = paths::client_socket(&home);
    let deadline = timeout()?;
    let busy = |socket: PathBuf| ConnectError::NotAccepting {
        socket,
        waited: deadline.unwrap_or_default(),
    };
    match connect(&socket, deadline) {
        Ok(c) => trusted(c, socket),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            let explicit = std::env::var_os("OXIDEPM_SOCKET").is_some_and(|s| !s.is_empty())
                && socket != home.daemon_socket();
            if !autostart || explicit {
                return Err(ConnectError::NoDaemon { socket, source: e });
            }
            start_daemon(&home, deadline)?;
            match connect(&socket, deadline) {
                Ok(c) => trusted(c, socket),
                Err(e) if e.kind() == ErrorKind::TimedOut => Err(busy(socket)),
                Err(e) => Err(ConnectError::AfterStart(e)),
            }
        }
        Err(e) if e.kind() == ErrorKind::TimedOut => Err(busy(socket)),
        Err(e) => Err(ConnectError::Connect { socket, source: e }),
    }
}

/// `c`, when the process behind it runs as this command's user or root:
/// a home another account owns may hold that account's daemon, which must
/// neither receive this user's requests nor answer them.
fn trusted(c: Client, socket: PathBuf) -> Result<Client, ConnectError> {
    let me = nix::unistd::geteuid().as_raw();
    match c.peer_uid() {
        Some(uid) if uid == me || uid == 0 => Ok(c),
        // Not a unix socket's peer the kernel can name: nothing to trust.
        peer => Err(ConnectError::Foreign {
            socket,
            owner: peer.map_or_else(|| "an unknown user".to_string(), user_name),
            me: user_name(me),
        }),
    }
}

/// A user's name, or `uid N` when it has none.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name)
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

/// Starts the daemon, unless another command started it while this one
/// waited for the start lock.
fn start_daemon(home: &Home, deadline: Option<Duration>) -> Result<(), ConnectError> {
    let _lock = StartLock::acquire(home)?;
    let ping = deadline.unwrap_or(DEFAULT_TIMEOUT);
    if let Ok(mut c) = connect(&home.daemon_socket(), Some(ping)) {
        if c.call(oxidepm_proto::Op::Ping).is_ok() {
            return Ok(());
        }
    }
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
    // A closed stderr loses the notice, never the command.
    let _ = writeln!(
        std::io::stderr(),
        "oxidepm: started the daemon (pid {pid}) for {}",
        home.root().display()
    );
    Ok(())
}

/// Held by the one command that starts the daemon of a home.
struct StartLock {
    _file: std::fs::File,
}

impl StartLock {
    /// Waits (up to [`START_WAIT`]) until no other command is starting the
    /// daemon. The home is made (0700, as the daemon makes it) to hold the
    /// lock.
    fn acquire(home: &Home) -> Result<StartLock, ConnectError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // The lock is the first thing written into the home: the home is
        // checked as the daemon would check it, so that nothing is created
        // in a home another user controls.
        crate::paths::trust::check_above(home.root())?;
        if home.root().exists() {
            crate::paths::trust::check_home(home)?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home.root())
            .map_err(|source| ConnectError::StartLock {
                path: home.root().to_path_buf(),
                source,
            })?;
        let path = home.start_lock();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|source| ConnectError::StartLock {
                path: path.clone(),
                source,
            })?;
        let started = Instant::now();
        // flock is released by the kernel when its holder exits, so a
        // starter killed half-way never blocks the next one.
        while oxidepm_sys::flock::try_lock_exclusive(&file).is_err() {
            if started.elapsed() > START_WAIT {
                return Err(ConnectError::StartWait {
                    lock: path,
                    waited: START_WAIT,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(StartLock { _file: file })
    }
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
