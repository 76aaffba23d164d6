//! Whether a home can be trusted, checked before the daemon writes in it.
//!
//! The daemon (often root) writes logs, state, secrets and sockets in its
//! home. Whoever else owns the home, or can write in it or in a directory
//! above it, can plant links and files that the daemon would then write
//! through. So before the lock is taken or anything is written:
//!
//! * every directory above the home is owned by root or the daemon's uid,
//!   and writable by nobody else unless it is sticky (as `/tmp` is); a link
//!   on the way is owned by root or the daemon's uid and its target is
//!   checked the same way;
//! * the home and its `logs/`, `redis/`, `secrets/` and `lanes/` are real
//!   directories (not links), owned by the daemon's uid, not writable by
//!   group or others;
//! * the files the daemon opens for writing (state.db and SQLite's side
//!   files, daemon.log, daemon.lock) are regular files owned by the
//!   daemon's uid, writable by nobody else; daemon.toml, only read, may be
//!   a link, to a file owned by the daemon's uid or root that only its
//!   owner can write.
//!
//! The checks hold afterwards because nobody else can change a directory
//! that passed them.

use crate::paths::Home;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Links followed on the way to the home before giving up (as the kernel's ELOOP).
const MAX_LINKS: u32 = 40;

/// Why a home cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// A directory or file of the home is a symbolic link.
    #[error(
        "{} is a symbolic link, and oxidepmd follows no link in its home; \
         replace it with a real {what}, or set OXIDEPM_HOME to a directory of your own",
        path.display()
    )]
    Link {
        /// The link.
        path: PathBuf,
        /// What should be there: "directory" or "file".
        what: &'static str,
    },
    /// Something other than what the daemon expects.
    #[error("{} is not a {what}; move it away", path.display())]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What should be there.
        what: &'static str,
    },
    /// Owned by another user, who could plant files in it.
    #[error(
        "{} is owned by {}, not by {} which runs oxidepmd: that user could plant links or files \
         in it; if it is yours, `chown {euid} {}`, otherwise set OXIDEPM_HOME to a directory of your own",
        path.display(), user(*owner), user(*euid), path.display()
    )]
    Owner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The daemon's effective uid.
        euid: u32,
    },
    /// Writable by others than its owner.
    #[error(
        "{} is writable by {who} (mode {mode:04o}): anyone who can write there could plant links \
         or files; run `chmod go-w {}`, or set OXIDEPM_HOME to a directory of your own",
        path.display(), path.display()
    )]
    Writable {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// "group", "others" or "group and others".
        who: &'static str,
    },
    /// A directory (or link) above the home that another user controls.
    #[error(
        "{}, on the way to the home, is owned by {}: that user could replace the home; \
         set OXIDEPM_HOME to a directory under ones owned by you or root",
        path.display(), user(*owner)
    )]
    AboveOwner {
        /// The directory or link.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// A directory above the home that others can write in, not sticky.
    #[error(
        "{}, on the way to the home, is writable by {who} (mode {mode:04o}) and not sticky: \
         anyone could replace the home; run `chmod go-w {}`, or set OXIDEPM_HOME elsewhere",
        path.display(), path.display()
    )]
    AboveWritable {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// "group", "others" or "group and others".
        who: &'static str,
    },
    /// Links that never end.
    #[error("{}: too many symbolic links on the way to the home", path.display())]
    Loop {
        /// Where resolution gave up.
        path: PathBuf,
    },
    /// The path could not be examined or created.
    #[error("cannot use {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
}

/// `uid 1001 (bob)`, or just the number for a uid without a name.
fn user(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("uid {uid} ({})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// Who besides the owner may write, from permission bits.
fn writers(mode: u32) -> Option<&'static str> {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => Some("group and others"),
        (true, false) => Some("group"),
        (false, true) => Some("others"),
        (false, false) => None,
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> HomeError + '_ {
    move |source| HomeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The metadata of `path` itself (a link is not followed); None when missing.
fn lstat(path: &Path) -> Result<Option<Metadata>, HomeError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Checks every directory and link on the way to `path` (exclusive: the
/// home itself is [`check_home`]'s), as far as they exist: what is missing
/// is created by the daemon, with its own modes.
pub fn check_above(path: &Path) -> Result<(), HomeError> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    let mut links = 0;
    walk(parent, &mut links).map(|_| ())
}

/// Resolves `path` one component at a time, as the kernel would, checking
/// each directory on the way and each link followed. Returns where it
/// leads, or None when a component does not exist yet.
fn walk(path: &Path, links: &mut u32) -> Result<Option<PathBuf>, HomeError> {
    let euid = oxidepm_sys::ids::euid();
    let mut at = PathBuf::from("/");
    if let Some(m) = lstat(&at)? {
        check_above_dir(&at, &m, euid)?;
    }
    for comp in path.components() {
        let name = match comp {
            Component::Normal(n) => n,
            Component::ParentDir => {
                at.pop();
                continue;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        };
        let next = at.join(name);
        let Some(meta) = lstat(&next)? else {
            return Ok(None);
        };
        if meta.file_type().is_symlink() {
            if meta.uid() != 0 && meta.uid() != euid {
                return Err(HomeError::AboveOwner {
                    path: next,
                    owner: meta.uid(),
                });
            }
            *links += 1;
            if *links > MAX_LINKS {
                return Err(HomeError::Loop { path: next });
            }
            let target = std::fs::read_link(&next).map_err(io_error(&next))?;
            // A relative target is relative to the link's directory; an
            // absolute one replaces the whole path when joined.
            match walk(&at.join(target), links)? {
                Some(real) => at = real,
                None => return Ok(None),
            }
        } else {
            check_above_dir(&next, &meta, euid)?;
            at = next;
        }
    }
    Ok(Some(at))
}

/// A directory above the home: owned by root or the daemon's uid, and
/// writable by others only when sticky (others then cannot rename or
/// remove what they do not own).
fn check_above_dir(path: &Path, meta: &Metadata, euid: u32) -> Result<(), HomeError> {
    if !meta.is_dir() {
        return Err(HomeError::WrongType {
            path: path.to_path_buf(),
            what: "directory",
        });
    }
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(HomeError::AboveOwner {
            path: path.to_path_buf(),
            owner: meta.uid(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if let Some(who) = writers(mode).filter(|_| mode & 0o1000 == 0) {
        return Err(HomeError::AboveWritable {
            path: path.to_path_buf(),
            mode,
            who,
        });
    }
    Ok(())
}

/// Owned by the daemon's uid and writable by nobody else.
fn check_owned(path: &Path, meta: &Metadata, euid: u32) -> Result<(), HomeError> {
    check_owned_by(path, meta, meta.uid(), euid)
}

/// [`check_owned`], with `owner` standing for the file's owner (root's
/// files pass where root may own them too).
fn check_owned_by(path: &Path, meta: &Metadata, owner: u32, euid: u32) -> Result<(), HomeError> {
    if owner != euid {
        return Err(HomeError::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if let Some(who) = writers(mode) {
        return Err(HomeError::Writable {
            path: path.to_path_buf(),
            mode,
            who,
        });
    }
    Ok(())
}

/// Checks the home (which must exist), its directories and the files the
/// daemon writes, as the module says. Missing subdirectories and files
/// pass: the daemon creates them.
pub fn check_home(home: &Home) -> Result<(), HomeError> {
    let euid = oxidepm_sys::ids::euid();
    for (i, dir) in home.dirs().iter().enumerate() {
        let Some(meta) = lstat(dir)? else {
            if i == 0 {
                return Err(io_error(dir)(io::ErrorKind::NotFound.into()));
            }
            continue;
        };
        if meta.file_type().is_symlink() {
            return Err(HomeError::Link {
                path: dir.clone(),
                what: "directory",
            });
        }
        if !meta.is_dir() {
            return Err(HomeError::WrongType {
                path: dir.clone(),
                what: "directory",
            });
        }
        check_owned(dir, &meta, euid)?;
    }
    for file in written_files(home) {
        let Some(meta) = lstat(&file)? else { continue };
        if meta.file_type().is_symlink() {
            return Err(HomeError::Link {
                path: file,
                what: "file",
            });
        }
        if !meta.is_file() {
            return Err(HomeError::WrongType {
                path: file,
                what: "regular file",
            });
        }
        check_owned(&file, &meta, euid)?;
    }
    check_config(&home.config(), euid)
}

/// The files of the home the daemon opens for writing by name.
fn written_files(home: &Home) -> Vec<PathBuf> {
    let db = home.state_db();
    let mut files: Vec<PathBuf> = ["-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut p = db.clone().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        })
        .collect();
    files.extend([db, home.daemon_log(), home.lock_file(), home.start_lock()]);
    files
}

/// daemon.toml grants tiers: only the daemon's uid or root may write it.
/// It is only read, so a link to such a file is accepted.
fn check_config(path: &Path, euid: u32) -> Result<(), HomeError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path)(e)),
    };
    if !meta.is_file() {
        return Err(HomeError::WrongType {
            path: path.to_path_buf(),
            what: "regular file",
        });
    }
    let owner = if meta.uid() == 0 { euid } else { meta.uid() };
    check_owned_by(path, &meta, owner, euid)
}

#[cfg(test)]
mod tests;
