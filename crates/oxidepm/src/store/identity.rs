//! Whether state.db is still the file the store opened. SQLite keeps
//! writing into its open descriptor whatever happens to the name: a file
//! deleted, replaced or truncated under a running daemon would take every
//! later write with it, unseen, and the next daemon would start from
//! nothing. A `stat` and a 16-byte read tell.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Device and inode of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

/// The first bytes of every SQLite database.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

impl FileId {
    /// The identity of `path` (not following a link), if it exists.
    pub fn of(path: &Path) -> Option<FileId> {
        std::fs::symlink_metadata(path).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// What is wrong with the file at `path` compared with `expected`, or
/// `None` when it is still that database. `deep` also reads its first
/// bytes (an overwrite in place); without, it is one `stat`.
pub fn check(path: &Path, expected: FileId, deep: bool) -> Option<String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some("was deleted while the daemon ran".into())
        }
        Err(e) => return Some(format!("cannot be examined ({e})")),
    };
    if !meta.file_type().is_file() {
        return Some("was replaced by something that is not a regular file".into());
    }
    if meta.dev() != expected.dev || meta.ino() != expected.ino {
        return Some("was replaced by another file while the daemon ran".into());
    }
    if meta.len() == 0 {
        return Some("was truncated to 0 bytes while the daemon ran".into());
    }
    if !deep {
        return None;
    }
    // O_NOFOLLOW: the name was a regular file a moment ago, and must not
    // become a way to read something else.
    let mut head = [0u8; 16];
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .and_then(|mut f| f.read_exact(&mut head));
    match read {
        Ok(()) if &head == MAGIC => None,
        Ok(()) => Some("was overwritten: it no longer starts as an SQLite database".into()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Some("was truncated while the daemon ran".into())
        }
        // Unreadable now (permissions changed) is not a lost file: the
        // writes themselves will tell.
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_replaced_truncated_and_overwritten_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[0; 100]);
        std::fs::write(&path, &bytes).unwrap();
        let id = FileId::of(&path).unwrap();
        assert_eq!(check(&path, id, true), None);
        std::fs::write(&path, b"garbage garbage garbage").unwrap();
        assert!(check(&path, id, true).unwrap().contains("overwritten"));
        std::fs::write(&path, b"").unwrap();
        assert!(check(&path, id, true).unwrap().contains("truncated"));
        std::fs::remove_file(&path).unwrap();
        assert!(check(&path, id, true).unwrap().contains("deleted"));
        std::fs::write(&path, &bytes).unwrap();
        // A new file may reuse the inode number; a link never does.
        let other = dir.path().join("other");
        std::fs::write(&other, &bytes).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        assert!(check(&path, id, true)
            .unwrap()
            .contains("not a regular file"));
    }
}
