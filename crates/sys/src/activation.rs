//! Socket activation: listening sockets inherited from systemd (or
//! `systemd-socket-activate --fdname=alice …`), named by their
//! `FileDescriptorName` (for the lane proxy: one per agent).
//!
//! The protocol: `LISTEN_PID` is the pid the sockets are meant for,
//! `LISTEN_FDS` how many there are (fds 3, 4, …), `LISTEN_FDNAMES` their
//! names separated by colons. The variables are removed from the
//! environment once read, so that no child inherits them.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// One inherited listening socket.
#[derive(Debug)]
pub struct ActivatedSocket {
    /// Its FileDescriptorName: the agent it serves.
    pub name: String,
    /// The listening socket, close-on-exec.
    pub fd: OwnedFd,
}

/// Why the inherited sockets cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActivationError {
    /// LISTEN_FDS is not a count (or an absurd one).
    #[error("LISTEN_FDS={0:?} is not a count")]
    BadCount(String),
    /// LISTEN_FDNAMES is missing or does not name every socket.
    #[error(
        "{fds} sockets inherited but LISTEN_FDNAMES names {names}; \
         give each socket FileDescriptorName=<agent> (or --fdname=<agent>)"
    )]
    Names {
        /// Sockets inherited.
        fds: usize,
        /// Names given.
        names: usize,
    },
    /// The variables could not be read as `sd_listen_fds_with_names` reads
    /// them.
    #[error("socket activation: {0}")]
    Env(String),
    /// An inherited descriptor is not a listening unix stream socket.
    #[error("inherited fd {fd} ('{name}') is not a listening unix stream socket: {why}")]
    NotAListener {
        /// Its number.
        fd: RawFd,
        /// Its name.
        name: String,
        /// What is wrong with it.
        #[source]
        why: ListenerFault,
    },
}

/// What is wrong with an inherited descriptor that should be a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ListenerFault {
    /// Something in this process took the descriptor first.
    #[error("already taken by this process")]
    AlreadyTaken,
    /// The kernel would not say what the descriptor is, or refused to mark
    /// it close-on-exec.
    #[error(transparent)]
    Os(#[from] rustix::io::Errno),
    /// A socket of another family.
    #[error("not an AF_UNIX socket")]
    NotUnix,
    /// A datagram or sequential-packet socket.
    #[error("not a stream socket")]
    NotStream,
    /// A connected socket (systemd's Accept=yes hands those out).
    #[error("not listening (use Accept=no)")]
    NotListening,
}

/// What the environment says, before any descriptor is touched.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub names: Vec<String>,
}

/// Reads the protocol's variables. `Ok(None)`: not activated (or the
/// sockets are meant for another process).
pub(crate) fn plan(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    our_pid: u32,
) -> Result<Option<Plan>, ActivationError> {
    let (Some(pid), Some(fds)) = (listen_pid, listen_fds) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(our_pid) {
        return Ok(None);
    }
    let n: usize = fds
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadCount(fds.to_string()))?;
    if n == 0 {
        return Ok(None);
    }
    if n > 4096 {
        return Err(ActivationError::BadCount(fds.to_string()));
    }
    let names: Vec<String> = match listen_fdnames {
        Some(s) if !s.is_empty() => s.split(':').map(str::to_string).collect(),
        _ => Vec::new(),
    };
    if names.len() != n {
        return Err(ActivationError::Names {
            fds: n,
            names: names.len(),
        });
    }
    Ok(Some(Plan { names }))
}

/// Set by the first `take_from_env`: the descriptors are handed out once.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Takes the inherited sockets, if any, and clears the variables.
///
/// Call it early, before threads start (it changes the environment). Only
/// the first call can find sockets. The variables are checked by [`plan`]
/// first, for messages that say what to change; then `sd-notify` reads
/// them as `sd_listen_fds_with_names` does, clears them, and marks the
/// descriptors close-on-exec.
pub fn take_from_env() -> Result<Vec<ActivatedSocket>, ActivationError> {
    let get = |k: &str| std::env::var(k).ok();
    let (pid, fds, names) = (get("LISTEN_PID"), get("LISTEN_FDS"), get("LISTEN_FDNAMES"));
    let clear = || {
        for k in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            std::env::remove_var(k);
        }
    };
    if TAKEN.swap(true, Ordering::SeqCst) {
        clear();
        return Ok(Vec::new());
    }
    let planned = plan(
        pid.as_deref(),
        fds.as_deref(),
        names.as_deref(),
        std::process::id(),
    );
    let Some(plan) = planned.inspect_err(|_| clear())? else {
        clear();
        return Ok(Vec::new());
    };
    let listed: Vec<(RawFd, String)> = sd_notify::listen_fds_with_names(true)
        .map_err(|e| ActivationError::Env(e.to_string()))?
        .collect();
    if listed.len() != plan.names.len() {
        return Err(ActivationError::Names {
            fds: listed.len(),
            names: plan.names.len(),
        });
    }
    // Own every descriptor first, so that all are closed on any error. The
    // protocol hands this process fds 3..3+n, open and owned by no one else
    // in it (LISTEN_PID says the sockets are for us).
    let owned: Vec<(String, RawFd, Option<OwnedFd>)> = listed
        .into_iter()
        .map(|(raw, name)| (name, raw, crate::fd::claim(raw)))
        .collect();
    let mut out = Vec::with_capacity(owned.len());
    for (name, raw, fd) in owned {
        let Some(fd) = fd else {
            return Err(ActivationError::NotAListener {
                fd: raw,
                name,
                why: ListenerFault::AlreadyTaken,
            });
        };
        check_listener(&fd).map_err(|why| ActivationError::NotAListener {
            fd: fd.as_raw_fd(),
            name: name.clone(),
            why,
        })?;
        out.push(ActivatedSocket { name, fd });
    }
    Ok(out)
}

fn check_listener(fd: &OwnedFd) -> Result<(), ListenerFault> {
    use rustix::net::{sockopt, AddressFamily, SocketType};
    if sockopt::socket_domain(fd)? != AddressFamily::UNIX {
        return Err(ListenerFault::NotUnix);
    }
    if sockopt::socket_type(fd)? != SocketType::STREAM {
        return Err(ListenerFault::NotStream);
    }
    if !sockopt::socket_acceptconn(fd)? {
        return Err(ListenerFault::NotListening);
    }
    Ok(())
}

/// Turns an inherited socket into a std listener (non-blocking, ready for
/// tokio).
pub fn into_listener(fd: OwnedFd) -> std::io::Result<std::os::unix::net::UnixListener> {
    let l = std::os::unix::net::UnixListener::from(fd);
    l.set_nonblocking(true)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_activated() {
        assert_eq!(plan(None, None, None, 7), Ok(None));
        assert_eq!(plan(Some("7"), None, None, 7), Ok(None));
        // Meant for another process (a parent that did not clear them).
        assert_eq!(plan(Some("8"), Some("1"), Some("a"), 7), Ok(None));
        assert_eq!(plan(Some("7"), Some("0"), None, 7), Ok(None));
    }

    #[test]
    fn names_each_socket() {
        assert_eq!(
            plan(Some("7"), Some("2"), Some("alice:bob"), 7),
            Ok(Some(Plan {
                names: vec!["alice".into(), "bob".into()]
            }))
        );
    }

    #[test]
    fn refuses_missing_names_and_bad_counts() {
        assert_eq!(
            plan(Some("7"), Some("2"), Some("alice"), 7),
            Err(ActivationError::Names { fds: 2, names: 1 })
        );
        assert_eq!(
            plan(Some("7"), Some("1"), None, 7),
            Err(ActivationError::Names { fds: 1, names: 0 })
        );
        assert!(matches!(
            plan(Some("7"), Some("x"), None, 7),
            Err(ActivationError::BadCount(_))
        ));
    }

    #[test]
    fn checks_the_descriptor_kind() {
        let dir = tempfile::tempdir().unwrap();
        let l = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        check_listener(&OwnedFd::from(l)).unwrap();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(check_listener(&OwnedFd::from(a)).is_err());
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(check_listener(&OwnedFd::from(f)).is_err());
    }
}
