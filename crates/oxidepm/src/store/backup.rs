//! The rolling backup of state.db (`state.db.bak`), what a corrupt
//! state.db is restored from at start. It is written with `VACUUM INTO` a
//! temporary name that is then renamed over the backup: a backup is
//! always whole, and a link planted at either name is replaced, never
//! followed.

use super::files::{remove_db_files, sibling};
use super::{Result, Store, StoreError};
use rusqlite::params;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the backup is refreshed while the daemon runs (and once at
/// a clean shutdown).
pub const BACKUP_EVERY: Duration = Duration::from_secs(10 * 60);

/// `state.db.bak` beside `db`.
pub fn backup_path(db: &Path) -> PathBuf {
    sibling(db, "bak")
}

/// When the backup of `db` was last written, if there is one.
pub fn backup_time(db: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(backup_path(db))
        .ok()
        .filter(|m| m.file_type().is_file())
        .and_then(|m| m.modified().ok())
}

impl Store {
    /// Writes the backup (through the daemon's own connection, which holds
    /// the file exclusively); returns its path.
    pub fn backup(&self) -> Result<PathBuf> {
        let bak = backup_path(&self.path);
        let tmp = sibling(&self.path, &format!("bak.tmp-{}", std::process::id()));
        remove_db_files(&tmp);
        let copy = || -> Result<()> {
            self.conn
                .execute("VACUUM INTO ?1", params![tmp.to_string_lossy()])?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &bak))
                .map_err(|source| StoreError::Backup {
                    path: bak.clone(),
                    source,
                })
        };
        let result = copy();
        if result.is_err() {
            remove_db_files(&tmp);
        }
        result.map(|()| bak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use oxidepm_proto::{Actor, AppSpec};

    #[test]
    fn a_corrupt_db_is_restored_from_the_backup_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let store = Store::open(&db).unwrap();
        let id = store
            .insert_app(&AppSpec::new("web", "sleep", vec![]), &Actor::system("t"))
            .unwrap();
        assert_eq!(store.backup().unwrap(), dir.path().join("state.db.bak"));
        assert!(backup_time(&db).is_some());
        // Made after the backup: lost by the restore, as the notice says.
        store
            .insert_app(&AppSpec::new("late", "sleep", vec![]), &Actor::system("t"))
            .unwrap();
        drop(store);
        std::fs::write(&db, vec![0x5a; 8192]).unwrap();
        let store = Store::open_for_daemon(&db, false).unwrap();
        let apps = store.load_apps().unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].id, id);
        let w = store.warning().unwrap();
        assert!(
            w.contains("was corrupt") && w.contains("state.db.bak"),
            "{w}"
        );
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("state.db.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "the corrupt file is kept: {aside:?}");
    }

    #[test]
    fn a_corrupt_db_without_a_backup_is_refused_and_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        std::fs::write(&db, vec![0x5a; 8192]).unwrap();
        let e = Store::open_for_daemon(&db, false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("state.db") && e.contains("no backup"), "{e}");
        assert_eq!(std::fs::read(&db).unwrap(), vec![0x5a; 8192]);
    }

    #[test]
    fn a_link_at_the_backup_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let store = Store::open(&db).unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        std::os::unix::fs::symlink(&target, backup_path(&db)).unwrap();
        store.backup().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        let m = std::fs::symlink_metadata(backup_path(&db)).unwrap();
        assert!(m.file_type().is_file());
    }
}
