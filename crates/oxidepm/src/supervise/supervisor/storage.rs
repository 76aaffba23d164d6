//! The supervisor's side of a state.db that fails: memory is the truth, so
//! what the store owes (rows whose writes failed, or a whole file deleted
//! or replaced under the daemon) is written again from it, now when a
//! request or a change asks and every [`RETRY_EVERY`] until it lands; and
//! the rolling backup is refreshed while all is well.

use super::{lock, Shared, Supervisor};
use crate::store::{self, Image, SessionRow, StoredApp, RETRY_EVERY};
use std::time::{Duration, Instant, SystemTime};

impl Supervisor {
    /// What memory holds that recovery needs from state.db.
    pub fn store_image(&self) -> Image {
        Image {
            apps: self
                .apps
                .values()
                .map(|a| StoredApp {
                    id: a.id,
                    spec: a.spec.clone(),
                    defined_by: a.defined_by.clone(),
                    runtime: a.rt.clone(),
                })
                .collect(),
            sessions: self
                .sessions
                .iter()
                .map(|(sid, (app_id, leader_start))| SessionRow {
                    app_id: *app_id,
                    sid: *sid,
                    leader_start: *leader_start,
                })
                .collect(),
            boot_id: self.boot_id.clone(),
        }
    }

    /// Checks that state.db is still the file written, and writes what it
    /// owes. Cheap when all is well (one `stat`); true when nothing is
    /// owed after it.
    pub fn tend_store(&mut self) -> bool {
        self.store.check_file(true);
        if !self.store.pending() {
            return true;
        }
        let image = self.store_image();
        match self.store.catch_up(&image) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("state.db is still not written ({e}); trying again");
                false
            }
        }
    }
}

/// Tends state.db every [`RETRY_EVERY`] for as long as the daemon runs, and
/// refreshes the backup every [`store::BACKUP_EVERY`] while it is sound
/// (a copy of a small database takes milliseconds, under the lock, as
/// the connection is the daemon's only one).
pub async fn watch(sup: Shared) {
    let path = lock(&sup).store.path().to_path_buf();
    // A missing or old backup is written at once.
    let age = store::backup_time(&path)
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or(Duration::MAX);
    let mut last_backup = Instant::now()
        .checked_sub(age.min(store::BACKUP_EVERY))
        .unwrap_or_else(Instant::now);
    let mut first = age >= store::BACKUP_EVERY;
    loop {
        if !first {
            tokio::time::sleep(RETRY_EVERY).await;
        }
        let mut s = lock(&sup);
        let sound = s.tend_store();
        if sound && (first || last_backup.elapsed() >= store::BACKUP_EVERY) {
            last_backup = Instant::now();
            match s.store.backup() {
                Ok(bak) => log::debug!("state.db backed up to {}", bak.display()),
                Err(e) => log::warn!("{e}"),
            }
        }
        drop(s);
        first = false;
    }
}

/// Writes the backup at a clean shutdown, when state.db is sound.
pub fn backup_at_exit(sup: &Shared) {
    let mut s = lock(sup);
    if !s.tend_store() {
        log::warn!("state.db is not up to date; its backup is left as it was");
        return;
    }
    if let Err(e) = s.store.backup() {
        log::warn!("{e}");
    }
}
