//! A start checked before its fork: the user, directory and program an
//! app would be started with, as the spawn will see them.

use super::Supervisor;
use crate::supervise::launchable::{self, Unlaunchable};
use oxidepm_proto::AppSpec;

impl Supervisor {
    /// Whether `spec` can be started as far as can be told without
    /// starting it: its user can be had, its working directory is one,
    /// and its program is found on the PATH it will get.
    pub fn check_launchable(&self, spec: &AppSpec) -> Result<(), Unlaunchable> {
        let creds = self.creds_for(spec)?;
        let user = creds.as_ref().map_or(&self.own.name, |c| &c.name);
        let path = launchable::app_path(spec, creds.is_some());
        launchable::check(spec, user, &path)
    }
}
