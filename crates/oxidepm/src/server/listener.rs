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
