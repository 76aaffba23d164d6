//! The lanes' system apps (redis-server, the lane proxy, the bridge) as
//! the supervisor holds them: found by name, seen running, defined or
//! updated and started.

use super::error::Error;
use crate::supervise::{control, lock, Shared};
use oxidepm_proto::{Actor, AppSpec, Status};

/// The id of the app named `name`, if there is one.
pub(super) fn find_app(shared: &Shared, name: &str) -> Option<u64> {
    lock(shared)
        .apps()
        .find(|a| a.spec.name == name)
        .map(|a| a.id)
}

/// Whether app `id` is online.
pub(super) fn is_running(shared: &Shared, id: u64) -> bool {
    lock(shared)
        .app(id)
        .is_some_and(|a| a.rt.status == Status::Online)
}

/// Defines (or updates) a system app and starts it.
pub(super) async fn ensure_app(
    shared: &Shared,
    spec: AppSpec,
    id: Option<u64>,
) -> Result<(), Error> {
    let actor = Actor::system("lanes");
    let id = {
        let mut s = lock(shared);
        match id {
            Some(id) => {
                if s.app(id).is_some_and(|a| a.spec != spec) {
                    s.replace_spec(id, spec, &actor)?;
                }
                id
            }
            None => s.insert(spec, &actor)?,
        }
    };
    control::start(shared, &[id], &actor).await?;
    Ok(())
}
