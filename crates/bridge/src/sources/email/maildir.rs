//! The inbound side: a Maildir (`tmp/`, `new/`, `cur/`) that a local MTA
//! delivers into.
//!
//! A writer puts a message in `tmp/` and renames it into `new/`, so a file
//! in `new/` is complete. The bridge lists `new/`, reads and publishes each
//! message, and only then renames it into `cur/` with an info suffix
//! (`:2,S` — "seen"). The rename stays within one directory tree, hence
//! one filesystem, so it is atomic; if it fails the file stays in `new/`
//! and the error is returned. Nothing here ever deletes a message.
//!
//! Whoever can write `new/` must not be able to make the bridge read
//! something else, so every message is opened relative to a descriptor of
//! `new/` (itself opened without following a symlink), with `O_NOFOLLOW`
//! (a symlink swapped in after the listing fails to open instead of being
//! followed), `O_NONBLOCK` (a FIFO planted there cannot block the bridge)
//! and `O_NOCTTY`; what was opened must then be, by `fstat` of that
//! descriptor, a regular file with exactly one link. A second link means
//! the file also lives elsewhere — a hard link to someone else's mailbox —
//! or is half-way through a link-then-unlink delivery: it is not read (the
//! bridge flags it for a human). Moves use `renameat` between the two
//! directory descriptors and never replace a file in `cur/`.
//!
//! Everything is synchronous: each call is a few system calls on a local
//! disk. From async code, call it directly for small Maildirs or wrap a
//! scan in `tokio::task::spawn_blocking`.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;
use std::fmt;
use std::fs::{DirBuilder, File};
#[cfg(test)]
use std::io::Write;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(test)]
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

/// Messages larger than this are not read into memory by default.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 32 * 1024 * 1024;

/// How a message is opened: never through a symlink, never blocking on a
/// FIFO, never becoming a controlling terminal.
const MESSAGE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// How `new/` and `cur/` are opened below the Maildir: a symlink there is
/// refused, so a swapped-in link cannot point the bridge at another tree.
const SUBDIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A Maildir on disk.
#[derive(Debug, Clone)]
pub struct Maildir {
    root: PathBuf,
    max_message_bytes: u64,
}

/// One message found in `new/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaildirEntry {
    name: String,
    path: PathBuf,
}

impl MaildirEntry {
    /// The file name in `new/`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The full path of the file in `new/` (for messages; it is never
    /// opened by this path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Maildir unique name: the file name without any `:info` suffix.
    /// It stays the same when the message moves to `cur/`, so it can serve
    /// as a de-duplication key.
    pub fn id(&self) -> &str {
        split_info(&self.name).0
    }
}

/// What went wrong with a Maildir operation. In every case the message
/// file is left where it was.
#[derive(Debug)]
pub enum MaildirError {
    /// A system call failed.
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The message is larger than the configured limit; it was not read.
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// What is in `new/` under that name is not a regular file when opened
    /// (a symlink, a FIFO, a socket, a device, a directory); it was not read.
    NotRegular { path: PathBuf },
    /// The file has more than one link: it is also some other file (or is
    /// in the middle of a link-then-unlink delivery); it was not read.
    Linked { path: PathBuf, links: u64 },
    /// A file of the target name already exists in `cur/`; the message
    /// was not moved so that the other one is not overwritten.
    TargetExists { path: PathBuf },
    /// The flags given to [`Maildir::mark`] are not ASCII letters.
    BadFlags(String),
}

impl MaildirError {
    /// Whether the name in `new/` is gone (another reader took it).
    pub fn is_vanished(&self) -> bool {
        matches!(self, MaildirError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for MaildirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaildirError::Io {
                action,
                path,
                source,
            } => write!(f, "maildir: cannot {action} {}: {source}", path.display()),
            MaildirError::TooLarge { path, size, limit } => write!(
                f,
                "maildir: {} is {size} bytes, over the limit of {limit}",
                path.display()
            ),
            MaildirError::NotRegular { path } => write!(
                f,
                "maildir: {} is not a regular file (a symlink, FIFO, device or directory); not read",
                path.display()
            ),
            MaildirError::Linked { path, links } => write!(
                f,
                "maildir: {} has {links} links, so it is also another file; not read \
                 (deliver by renaming from tmp/ into new/)",
                path.display()
            ),
            MaildirError::TargetExists { path } => write!(
                f,
                "maildir: {} already exists; message left in new/",
                path.display()
            ),
            MaildirError::BadFlags(flags) => {
                write!(f, "maildir: invalid flags {flags:?} (ASCII letters only)")
            }
        }
    }
}

impl std::error::Error for MaildirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MaildirError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MaildirError {
    let path = path.to_path_buf();
    move |source| MaildirError::Io {
        action,
        path,
        source,
    }
}

fn errno_err(action: &'static str, path: &Path) -> impl FnOnce(Errno) -> MaildirError {
    let f = io_err(action, path);
    move |e| f(e.into())
}

/// Splits `unique:info` into the unique name and the info (without `:`).
fn split_info(name: &str) -> (&str, Option<&str>) {
    match name.split_once(':') {
        Some((id, info)) => (id, Some(info)),
        None => (name, None),
    }
}

/// Whether a file name in `new/` is one to skip: dotfiles and the names
/// editors and half-finished copies leave behind.
fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || name.ends_with(".tmp")
        || name.ends_with(".part")
        || name.ends_with(".swp")
}

impl Maildir {
    /// A handle on the Maildir at `root`; nothing is checked or created.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Maildir {
            root: root.into(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Creates `root` and its `tmp/`, `new/` and `cur/` where missing
    /// (mode 0700; existing directories are left as they are).
    pub fn create(root: impl Into<PathBuf>) -> Result<Self, MaildirError> {
        let md = Maildir::new(root);
        let mut builder = DirBuilder::new();
        builder.recursive(true).mode(0o700);
        for dir in [md.root.clone(), md.tmp_dir(), md.new_dir(), md.cur_dir()] {
            builder.create(&dir).map_err(io_err("create", &dir))?;
        }
        Ok(md)
    }

    #[cfg(test)]
    /// Sets the largest message [`Maildir::read`] accepts.
    pub fn with_max_message_bytes(mut self, limit: u64) -> Self {
        self.max_message_bytes = limit;
        self
    }

    #[cfg(test)]
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn new_dir(&self) -> PathBuf {
        self.root.join("new")
    }

    pub fn cur_dir(&self) -> PathBuf {
        self.root.join("cur")
    }

    /// A descriptor of `new/` or `cur/`. The Maildir itself is the path
    /// as configured (symlinks followed); its subdirectories are not.
    fn subdir(&self, name: &str, action: &'static str) -> Result<OwnedFd, MaildirError> {
        let path = self.root.join(name);
        let root = rustix::fs::openat(
            CWD,
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_err(action, &path))?;
        rustix::fs::openat(&root, name, SUBDIR_FLAGS, Mode::empty())
            .map_err(errno_err(action, &path))
    }

    /// The messages waiting in `new/`, oldest first (by modification
    /// time, then name). Dotfiles, temporary names (`*~`, `*.tmp`,
    /// `*.part`, `*.swp`), non-UTF-8 names, directories and symlinks are
    /// skipped: only regular files are messages. (What a name is when it is
    /// read is checked again then: see [`Maildir::read`].)
    pub fn list_new(&self) -> Result<Vec<MaildirEntry>, MaildirError> {
        let dir = self.new_dir();
        let fd = self.subdir("new", "list")?;
        let mut found = Vec::new();
        let entries = rustix::fs::Dir::read_from(&fd).map_err(errno_err("list", &dir))?;
        for item in entries {
            let item = item.map_err(errno_err("list", &dir))?;
            let Ok(name) = item.file_name().to_str().map(str::to_owned) else {
                log::warn!(
                    "maildir: skipping non-UTF-8 name {:?} in {}",
                    item.file_name(),
                    dir.display()
                );
                continue;
            };
            if name == "." || name == ".." || is_ignored_name(&name) {
                continue;
            }
            let st = match rustix::fs::statat(&fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Vanished between readdir and stat: someone else took it.
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(errno_err("stat", &dir.join(&name))(e)),
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                continue;
            }
            let mtime = UNIX_EPOCH
                + std::time::Duration::new(
                    u64::try_from(st.st_mtime).unwrap_or(0),
                    u32::try_from(st.st_mtime_nsec).unwrap_or(0),
                );
            found.push((
                mtime,
                MaildirEntry {
                    path: dir.join(&name),
                    name,
                },
            ));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        Ok(found.into_iter().map(|(_, entry)| entry).collect())
    }

    /// Reads one message, opened relative to `new/` without following a
    /// symlink. Fails without reading it when what it opened is not a
    /// regular file ([`MaildirError::NotRegular`]), has more than one link
    /// ([`MaildirError::Linked`]) or exceeds the configured limit
    /// ([`MaildirError::TooLarge`]).
    pub fn read(&self, entry: &MaildirEntry) -> Result<Vec<u8>, MaildirError> {
        let path = entry.path();
        let new = self.subdir("new", "open")?;
        let fd = match rustix::fs::openat(&new, entry.name(), MESSAGE_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            // ELOOP: a symlink (O_NOFOLLOW); ENXIO: a socket.
            Err(Errno::LOOP | Errno::NXIO) => {
                return Err(MaildirError::NotRegular {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(errno_err("open", path)(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(errno_err("stat", path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(MaildirError::NotRegular {
                path: path.to_path_buf(),
            });
        }
        // nlink_t is u64 here but u32 on other targets.
        #[allow(clippy::useless_conversion)]
        let links = u64::from(st.st_nlink);
        if links != 1 {
            return Err(MaildirError::Linked {
                path: path.to_path_buf(),
                links,
            });
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let limit = self.max_message_bytes;
        if size > limit {
            return Err(MaildirError::TooLarge {
                path: path.to_path_buf(),
                size,
                limit,
            });
        }
        let mut buf = Vec::with_capacity(size as usize);
        // take(): a file growing after the stat still cannot exceed the cap.
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(io_err("read", path))?;
        if buf.len() as u64 > limit {
            return Err(MaildirError::TooLarge {
                path: path.to_path_buf(),
                size: buf.len() as u64,
                limit,
            });
        }
        Ok(buf)
    }

    /// Moves a handled message from `new/` to `cur/<id>:2,S`. Call it only
    /// after the message has been published. Returns the new path; on
    /// error the message is still in `new/`.
    pub fn mark_seen(&self, entry: &MaildirEntry) -> Result<PathBuf, MaildirError> {
        self.mark(entry, "S")
    }

    /// Moves a message from `new/` to `cur/<id>:2,<flags>`, where the
    /// flags are those given plus any the name already carried, sorted
    /// and de-duplicated as the Maildir convention wants (`"FS"` parks a
    /// message a human should look at; `"S"` is plain "seen").
    ///
    /// The move is a `renameat(2)` between the descriptors of `new/` and
    /// `cur/` (one filesystem, atomic) that refuses to replace a file in
    /// `cur/`. After it both directories are synced (best effort) so the
    /// move survives a crash.
    pub fn mark(&self, entry: &MaildirEntry, flags: &str) -> Result<PathBuf, MaildirError> {
        if !flags.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(MaildirError::BadFlags(flags.to_owned()));
        }
        let (id, info) = split_info(&entry.name);
        let mut all: Vec<char> = flags.chars().collect();
        if let Some(old) = info.and_then(|i| i.strip_prefix("2,")) {
            all.extend(old.chars().filter(|c| c.is_ascii_alphabetic()));
        }
        all.sort_unstable();
        all.dedup();
        let flags: String = all.into_iter().collect();

        let name = format!("{id}:2,{flags}");
        let target = self.cur_dir().join(&name);
        let new = self.subdir("new", "move")?;
        let cur = match self.subdir("cur", "move") {
            Ok(fd) => fd,
            Err(MaildirError::Io { source, .. }) => {
                return Err(io_err("move", entry.path())(source))
            }
            Err(e) => return Err(e),
        };
        rename_no_replace(&new, entry.name(), &cur, &name).map_err(|e| {
            if e == Errno::EXIST {
                MaildirError::TargetExists {
                    path: target.clone(),
                }
            } else {
                errno_err("move", entry.path())(e)
            }
        })?;
        sync_dir(&cur, &self.cur_dir());
        sync_dir(&new, &self.new_dir());
        Ok(target)
    }

    #[cfg(test)]
    /// Delivers a message the Maildir way: written and synced in `tmp/`,
    /// then renamed into `new/`. For tests and for a built-in receiver.
    pub fn deliver(&self, message: &[u8]) -> Result<MaildirEntry, MaildirError> {
        let name = unique_name();
        let tmp = self.tmp_dir().join(&name);
        let result = (|| {
            let mut file = File::options()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(io_err("create", &tmp))?;
            file.write_all(message).map_err(io_err("write", &tmp))?;
            file.sync_all().map_err(io_err("sync", &tmp))
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let path = self.new_dir().join(&name);
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err("move", &tmp)(e));
        }
        Ok(MaildirEntry { name, path })
    }
}

/// `renameat2(RENAME_NOREPLACE)`, or, on a filesystem without it, a check
/// then a plain `renameat` (the check and the rename are then two steps,
/// as they were everywhere before `renameat2`).
fn rename_no_replace(
    from_dir: &OwnedFd,
    from: &str,
    to_dir: &OwnedFd,
    to: &str,
) -> Result<(), Errno> {
    match rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE) {
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            match rustix::fs::statat(to_dir, to, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => return Err(Errno::EXIST),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e),
            }
            rustix::fs::renameat(from_dir, from, to_dir, to)
        }
        other => other,
    }
}

/// fsync a directory so a rename in it is durable; failures are only
/// logged (the rename itself has happened).
fn sync_dir(fd: &OwnedFd, path: &Path) {
    if let Err(e) = rustix::fs::fsync(fd.as_fd()) {
        log::debug!("maildir: cannot sync {}: {e}", path.display());
    }
}

#[cfg(test)]
/// `<secs>.M<micros>P<pid>Q<n>.<host>`, as the Maildir spec suggests.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
        .replace('/', "\\057")
        .replace(':', "\\072");
    format!(
        "{}.M{}P{}Q{}.{}",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        host
    )
}
