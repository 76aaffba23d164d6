//! Named snapshots of the running set: save and resurrect.

use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::store::{SnapshotApp, DEFAULT_SNAPSHOT};
use crate::supervise::{control, lock};
use oxidepm_proto::{Actor, AppAction, Saved};

/// The snapshot a request names, `default` when it names none.
fn snapshot_name(name: Option<String>) -> Result<String, OpError> {
    let name = name.unwrap_or_else(|| DEFAULT_SNAPSHOT.into());
    if oxidepm_proto::actor::valid_label(&name) {
        Ok(name)
    } else {
        Err(OpError::BadSnapshotName { name })
    }
}

impl Daemon {
    /// `save`: the apps meant to be running (`only` those the caller's
    /// grant narrows it to), with who defined them and who saved them.
    pub(super) fn save(
        &self,
        name: Option<String>,
        only: Option<&[String]>,
        actor: &Actor,
    ) -> Result<Saved, OpError> {
        let name = snapshot_name(name)?;
        let s = lock(&self.sup);
        let apps: Vec<SnapshotApp> = s
            .apps()
            .filter(|a| a.rt.desired_running)
            .filter(|a| only.is_none_or(|names| names.contains(&a.spec.name)))
            .map(|a| SnapshotApp {
                spec: a.spec.clone(),
                defined_by: a.defined_by.clone(),
            })
            .collect();
        s.store.save_snapshot(&name, &apps, actor)?;
        Ok(Saved {
            apps: apps.into_iter().map(|a| a.spec.name).collect(),
            snapshot: name,
        })
    }

    /// `resurrect`: defines the snapshot's apps that are gone (as their
    /// original definer), then starts them all; `only` those the caller's
    /// grant narrows it to.
    pub(super) async fn resurrect(
        &self,
        name: Option<String>,
        only: Option<&[String]>,
        actor: &Actor,
    ) -> Result<Vec<AppAction>, OpError> {
        let name = snapshot_name(name)?;
        let Some(snap) = lock(&self.sup).store.load_snapshot(&name)? else {
            return Err(OpError::NoSnapshot { name });
        };
        if snap.is_empty() {
            return Err(OpError::EmptySnapshot { name });
        }
        let chosen: Vec<SnapshotApp> = snap
            .into_iter()
            .filter(|a| only.is_none_or(|names| names.contains(&a.spec.name)))
            .collect();
        // The apps it defines again are checked, and get their lanes, as
        // a `define` of them would: names and uids may have been taken
        // since the snapshot was saved.
        let gone: Vec<oxidepm_proto::AppSpec> = {
            let s = lock(&self.sup);
            chosen
                .iter()
                .filter(|a| !s.apps().any(|o| o.spec.name == a.spec.name))
                .map(|a| a.spec.clone())
                .collect()
        };
        if !gone.is_empty() {
            self.prepare_lanes(&gone).await?;
        }
        let mut ids = Vec::new();
        {
            let mut s = lock(&self.sup);
            for app in chosen {
                let existing = s
                    .apps()
                    .find(|a| a.spec.name == app.spec.name)
                    .map(|a| a.id);
                let id = match existing {
                    Some(id) => id,
                    None => s.insert(app.spec, &app.defined_by)?,
                };
                ids.push(id);
            }
        }
        Ok(control::start(&self.sup, &ids, actor).await?)
    }
}
