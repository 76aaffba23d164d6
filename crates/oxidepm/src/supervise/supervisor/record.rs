//! Events: each one written to the store and published on the bus, in one
//! place, so that a subscriber sees exactly what `events` will show.

use super::Supervisor;
use crate::bus::Published;
use crate::timefmt::{now_ms, rfc3339_ms};
use oxidepm_proto::{Actor, EventKind, EventRecord};

impl Supervisor {
    /// Records a lifecycle event of an app.
    pub fn event(&self, id: u64, kind: EventKind, actor: &Actor, detail: &str) {
        let name = self
            .apps
            .get(&id)
            .map(|a| a.spec.name.as_str())
            .unwrap_or("?");
        log::info!(
            app = name, actor:% = actor, event = kind.as_str();
            "{name}: {kind} by {actor}{}{detail}",
            if detail.is_empty() { "" } else { ": " }
        );
        let tags = self
            .apps
            .get(&id)
            .map(|a| a.spec.tags.clone())
            .unwrap_or_default();
        self.record(id, name, tags, kind, actor, detail);
    }

    /// Writes an event to the store and publishes it on the bus: the one
    /// place every event goes through.
    pub(super) fn record(
        &self,
        id: u64,
        name: &str,
        tags: Vec<String>,
        kind: EventKind,
        actor: &Actor,
        detail: &str,
    ) {
        let seq = match self
            .store
            .record_event(id, name, kind.as_str(), actor, detail)
        {
            Ok(seq) => seq,
            Err(e) => {
                log::error!("cannot record event {kind} of {name} (kept in memory, retried): {e}");
                0
            }
        };
        let record = EventRecord {
            seq,
            at: rfc3339_ms(now_ms()),
            app_id: id,
            app: name.to_string(),
            kind,
            actor: actor.clone(),
            detail: detail.to_string(),
        };
        self.bus.publish(Published::Event { record, tags });
    }
}
