//! Binding the daemon's unix sockets.

use std::io;
use std::path::Path;
use tokio::net::UnixListener;

/// Binds a listening socket at `path`, replacing a stale socket file.
///
/// The caller holds the home's lock, so a socket file found here belongs to
/// a daemon that is gone. The parent directory already has mode 0700 and
/// the process umask is 077, so the socket is 0600 from the moment it
/// exists: it is never chmod-ed after bind.
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
    UnixListener::bind(path)
}
