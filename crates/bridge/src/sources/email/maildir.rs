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
//! Everything is synchronous `std::fs`: each call is a few system calls on
//! a local disk. From async code, call it directly for small Maildirs or
//! wrap a scan in `tokio::task::spawn_blocking`.

use std::fmt;
use std::fs::{self, DirBuilder, File};
#[cfg(test)]
use std::io::Write;
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(test)]
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

/// Messages larger than this are not read into memory by default.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 32 * 1024 * 1024;

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

    /// The full path of the file in `new/`.
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
    /// A file of the target name already exists in `cur/`; the message
    /// was not moved so that the other one is not overwritten.
    TargetExists { path: PathBuf },
    /// The flags given to [`Maildir::mark`] are not ASCII letters.
    BadFlags(String),
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

    /// The messages waiting in `new/`, oldest first (by modification
    /// time, then name). Dotfiles, temporary names (`*~`, `*.tmp`,
    /// `*.part`, `*.swp`), non-UTF-8 names, directories and symlinks are
    /// skipped: only regular files are messages.
    pub fn list_new(&self) -> Result<Vec<MaildirEntry>, MaildirError> {
        let dir = self.new_dir();
        let mut found = Vec::new();
        for item in fs::read_dir(&dir).map_err(io_err("list", &dir))? {
            let item = item.map_err(io_err("list", &dir))?;
            let Some(name) = item.file_name().to_str().map(str::to_owned) else {
                log::warn!(
                    "maildir: skipping non-UTF-8 name {:?} in {}",
                    item.file_name(),
                    dir.display()
                );
                continue;
            };
            if is_ignored_name(&name) {
                continue;
            }
            // DirEntry::metadata does not follow symlinks.
            let meta = match item.metadata() {
                Ok(meta) => meta,
                // Vanished between readdir and stat: someone else took it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("stat", &item.path())(e)),
            };
            if !meta.file_type().is_file() {
                continue;
            }
            let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
            found.push((
                mtime,
                MaildirEntry {
                    name,
                    path: item.path(),
                },
            ));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        Ok(found.into_iter().map(|(_, entry)| entry).collect())
    }

    /// Reads one message. Fails with [`MaildirError::TooLarge`] (without
    /// reading it) when it exceeds the configured limit.
    pub fn read(&self, entry: &MaildirEntry) -> Result<Vec<u8>, MaildirError> {
        let path = entry.path();
        let file = File::open(path).map_err(io_err("open", path))?;
        let size = file.metadata().map_err(io_err("stat", path))?.len();
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
        file.take(limit + 1)
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
    /// The move is a `rename(2)` within the Maildir (one filesystem,
    /// atomic). It refuses to overwrite an existing file in `cur/`. After
    /// the rename both directories are synced (best effort) so the move
    /// survives a crash.
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

        let target = self.cur_dir().join(format!("{id}:2,{flags}"));
        match fs::symlink_metadata(&target) {
            Ok(_) => return Err(MaildirError::TargetExists { path: target }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("stat", &target)(e)),
        }
        fs::rename(entry.path(), &target).map_err(io_err("move", entry.path()))?;
        sync_dir(&self.cur_dir());
        sync_dir(&self.new_dir());
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
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let path = self.new_dir().join(&name);
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("move", &tmp)(e));
        }
        sync_dir(&self.new_dir());
        Ok(MaildirEntry { name, path })
    }
}

/// fsync a directory so a rename in it is durable; failures are only
/// logged (the rename itself has happened).
fn sync_dir(dir: &Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        log::debug!("maildir: cannot sync {}: {e}", dir.display());
    }
}

#[cfg(test)]
/// `<secs>.M<micros>P<pid>Q<n>.<host>`, as the Maildir spec suggests.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
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
