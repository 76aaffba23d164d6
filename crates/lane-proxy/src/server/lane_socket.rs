//! The files of the lanes' sockets: the directory they live in, and each
//! socket, bound with its mode from the start and given to its agent.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::Mutex;

/// Creates `dir` (mode 0711) if it is missing, and refuses a directory
/// that someone else could write to: sockets are created inside a
/// directory that already has the right mode.
pub fn ensure_lanes_dir(dir: &Path) -> io::Result<()> {
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
    {
        return Err(io::Error::new(
            e.kind(),
            format!("cannot create lanes_dir {}: {e}", dir.display()),
        ));
    }
    let m = std::fs::symlink_metadata(dir)?;
    let own = oxidepm_sys::ids::euid();
    if !m.is_dir() {
        return Err(io::Error::other(format!(
            "lanes_dir {} is not a directory",
            dir.display()
        )));
    }
    if m.uid() != own && m.uid() != 0 {
        return Err(io::Error::other(format!(
            "lanes_dir {} belongs to uid {}, not to the proxy's uid {own}",
            dir.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "lanes_dir {} is writable by group or others (mode {:o}); use 0711 or 0755",
            dir.display(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Serialises umask changes between binds.
static UMASK: Mutex<()> = Mutex::new(());

/// Binds `path` with `mode` from the start (through the umask, never a
/// chmod after bind) and gives it to `uid`.
pub fn bind_lane_socket(
    path: &Path,
    mode: u32,
    uid: Option<u32>,
) -> io::Result<std::os::unix::net::UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process is serving this socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket; move it away",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = {
        let _g = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        // Declared after the lock, so dropped (and the umask restored)
        // before it is released.
        let _umask = oxidepm_sys::umask::Guard::set(!mode & 0o777);
        std::os::unix::net::UnixListener::bind(path)?
    };
    if let Err(e) = chown_socket(path, uid) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Gives the socket at `path` to `uid` (the proxy's own uid if `None`).
pub fn chown_socket(path: &Path, uid: Option<u32>) -> io::Result<()> {
    let own = oxidepm_sys::ids::euid();
    let target = uid.unwrap_or(own);
    let current = std::fs::symlink_metadata(path)?.uid();
    if current == target {
        return Ok(());
    }
    std::os::unix::fs::chown(path, Some(target), None).map_err(|e| {
        io::Error::other(format!(
            "cannot give {} to uid {target}: {e} (the proxy must run as root to serve \
             agents under other uids)",
            path.display()
        ))
    })
}
