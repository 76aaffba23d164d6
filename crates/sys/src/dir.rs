//! A directory held open by descriptor, whose entries are opened, renamed
//! and removed relative to it (openat, renameat, unlinkat) and never
//! through a symbolic link: a link planted under a name is refused, not
//! followed, so a writer running as root never writes, truncates or
//! removes anything outside the directory.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// How an entry is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only; the entry must exist.
    Read,
    /// Write, without creating or truncating; the entry must exist.
    WriteExisting,
    /// Append, creating the entry with `mode` (less the umask) if missing.
    AppendCreate {
        /// Permission bits of a new file.
        mode: u32,
    },
    /// Write from an empty file: truncate the entry, or create it with
    /// `mode` (less the umask) if missing.
    ReplaceCreate {
        /// Permission bits of a new file.
        mode: u32,
    },
}

/// An open directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// The error for a name that is a symbolic link.
fn link_refused(name: &OsStr) -> io::Error {
    io::Error::other(format!(
        "{:?} is a symbolic link, which is never followed; remove it",
        name
    ))
}

/// One plain entry name: no `/`, not `.` or `..`, not empty, no NUL.
fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    Ok(())
}

impl Dir {
    /// Opens the directory at `path`; refuses a symbolic link at its last
    /// component (the components above are the caller's to have checked).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd }),
            // With O_DIRECTORY, a link at the last component gives ENOTDIR
            // (or ELOOP); say which it is.
            Err(e) if e == rustix::io::Errno::NOTDIR || e == rustix::io::Errno::LOOP => {
                match rustix::fs::lstat(path) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                        Err(link_refused(path.as_os_str()))
                    }
                    _ => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Opens entry `name` as `how` says. A symbolic link is refused, and so
    /// is anything but a regular file (a FIFO would block the opener).
    pub fn open_file(&self, name: &OsStr, how: Access) -> io::Result<File> {
        check_name(name)?;
        // O_NONBLOCK: opening a FIFO planted under the name must not hang
        // the caller; it has no effect on the regular file we accept.
        let base = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let (flags, mode) = match how {
            Access::Read => (OFlags::RDONLY, Mode::empty()),
            Access::WriteExisting => (OFlags::WRONLY, Mode::empty()),
            Access::AppendCreate { mode } => (
                OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
                Mode::from_raw_mode(mode),
            ),
            Access::ReplaceCreate { mode } => (
                OFlags::WRONLY | OFlags::TRUNC | OFlags::CREATE,
                Mode::from_raw_mode(mode),
            ),
        };
        let fd = match rustix::fs::openat(&self.fd, name, base | flags, mode) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => return Err(link_refused(name)),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::other(format!(
                "{name:?} is not a regular file; remove it"
            )));
        }
        Ok(File::from(fd))
    }

    /// Renames entry `from` to `to` within the directory; a link is moved
    /// as a link (rename never follows one).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Removes entry `name` (a link is removed, never what it points to).
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// The names of the directory's entries, `.` and `..` left out.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(self.fd.as_fd())? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn files_open_and_move_inside_the_directory() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let mut f = d
            .open_file("a".as_ref(), Access::AppendCreate { mode: 0o600 })
            .unwrap();
        f.write_all(b"x\n").unwrap();
        d.rename("a".as_ref(), "b".as_ref()).unwrap();
        let mut s = String::new();
        d.open_file("b".as_ref(), Access::Read)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "x\n");
        assert_eq!(d.names().unwrap(), ["b"]);
        d.remove("b".as_ref()).unwrap();
        assert!(d.names().unwrap().is_empty());
        let e = d.open_file("b".as_ref(), Access::Read).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_link_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, "keep\n").unwrap();
        let logs = t.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::os::unix::fs::symlink(&outside, logs.join("a")).unwrap();
        let d = Dir::open(&logs).unwrap();
        for how in [
            Access::Read,
            Access::WriteExisting,
            Access::AppendCreate { mode: 0o600 },
        ] {
            assert!(d.open_file("a".as_ref(), how).is_err(), "{how:?}");
        }
        d.rename("a".as_ref(), "b".as_ref()).unwrap();
        d.remove("b".as_ref()).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep\n");
        // A link in place of the directory itself.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&logs, &link).unwrap();
        assert!(Dir::open(&link).is_err());
    }

    #[test]
    fn only_plain_names_and_regular_files() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let d = Dir::open(t.path()).unwrap();
        for bad in ["", ".", "..", "../x", "sub/x"] {
            assert!(d.open_file(bad.as_ref(), Access::Read).is_err(), "{bad}");
            assert!(d.remove(bad.as_ref()).is_err(), "{bad}");
        }
        assert!(d.open_file("sub".as_ref(), Access::Read).is_err());
    }
}
