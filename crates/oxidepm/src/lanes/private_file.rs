//! The rule for a file of secrets the daemon reads but did not write (the
//! shared server's admin credential, the Discord bot token): the daemon's
//! own, and neither readable nor writable by group or others. One copy of
//! the rule, so that every such file is held to the same one.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a file of secrets is refused: others could read or change it.
#[derive(Debug, thiserror::Error)]
pub enum Exposed {
    /// Group or others have a permission bit.
    #[error("{} has mode {mode:04o}: group and others may not read or write it; run chmod 600 {}", .path.display(), .path.display())]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Owned by another user.
    #[error("{} belongs to uid {owner}, not the daemon's uid {me}; chown it to the daemon's user", .path.display())]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The daemon's uid.
        me: u32,
    },
}

/// Checks `meta` (from `symlink_metadata` of `path`, a regular file).
pub fn check(path: &Path, meta: &Metadata) -> Result<(), Exposed> {
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Exposed::Mode {
            path: path.to_path_buf(),
            mode,
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(Exposed::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    Ok(())
}
