//! Binding the daemon's unix sockets.

use std::io;
use std::path::Path;
use tokio::net::UnixListener;

/// Binds a listening socket at `path`, replacing a stale socket file.
///
/// The caller holds the home's lock, so a socket file found here belongs to
/// a daemon that is gone. The parent directory already has mode 0700 and
/// the socket is created 0600: it is never chmod-ed after bind.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if m.file_type().is_socket() {
                std::fs::remove_file(path)?;
            } else {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket; move it away",
                        path.display()
                    ),
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // umask 177 while binding: the socket file is created 0600, so it is
    // never reachable by others even for an instant. The daemon forks only
    // from this same thread, so no child inherits the temporary umask.
    let _umask = oxidepm_sys::umask::Guard::set(0o177);
    UnixListener::bind(path)
}

/// A descriptor held in reserve for the accept loop: when the daemon runs
/// out of descriptors, `accept` fails (EMFILE, ENFILE) and the connection
/// waits in the backlog, so a person's request would hang. Releasing the
/// reserve frees one descriptor for that connection; the reserve is taken
/// again as soon as one is free.
pub struct Reserve(Option<std::fs::File>);

impl Reserve {
    /// A reserve, taken now if a descriptor is free.
    pub fn new() -> Reserve {
        let mut r = Reserve(None);
        r.refill();
        r
    }

    /// Takes the reserve again if it was released and a descriptor is free.
    pub fn refill(&mut self) {
        if self.0.is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
        }
    }

    /// After `accept` failed with `e`: releases the reserve when `e` says
    /// descriptors ran out. True when one was released, so that the next
    /// `accept` can take the connection.
    pub fn release_for(&mut self, e: &io::Error) -> bool {
        let out = matches!(
            e.raw_os_error(),
            Some(n) if n == nix::errno::Errno::EMFILE as i32 || n == nix::errno::Errno::ENFILE as i32
        );
        out && self.0.take().is_some()
    }
}

impl Default for Reserve {
    fn default() -> Reserve {
        Reserve::new()
    }
}
