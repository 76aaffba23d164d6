//! What a person saved to come back to: named snapshots of apps, and the
//! routes added at runtime.

use super::{parse_actor, Result, SnapshotApp, Store, StoreError};
use crate::timefmt::now_ms;
use oxidepm_proto::Actor;
use rusqlite::{params, OptionalExtension};

impl Store {
    /// Saves a named snapshot of apps (replacing one of the same name),
    /// with who saved it.
    pub fn save_snapshot(&self, name: &str, apps: &[SnapshotApp], saved_by: &Actor) -> Result<()> {
        let json = serde_json::to_string(apps).map_err(StoreError::Encode)?;
        self.conn
            .prepare_cached(
                "INSERT INTO snapshots (name, at, apps, saved_by) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(name) DO UPDATE SET at = excluded.at, apps = excluded.apps,
                 saved_by = excluded.saved_by",
            )?
            .execute(params![name, now_ms(), json, saved_by.to_string()])?;
        Ok(())
    }

    /// Who saved the snapshot `name`: `None` when there is no such
    /// snapshot, `Some(None)` when it was saved before oxidepm recorded it.
    pub fn snapshot_saved_by(&self, name: &str) -> Result<Option<Option<Actor>>> {
        let row: Option<Option<String>> = self
            .conn
            .prepare_cached("SELECT saved_by FROM snapshots WHERE name = ?1")?
            .query_row(params![name], |r| r.get(0))
            .optional()?;
        Ok(row.map(|by| by.map(|s| parse_actor(&s))))
    }

    /// Loads a named snapshot; `None` when there is none by that name.
    pub fn load_snapshot(&self, name: &str) -> Result<Option<Vec<SnapshotApp>>> {
        let json: Option<String> = self
            .conn
            .prepare_cached("SELECT apps FROM snapshots WHERE name = ?1")?
            .query_row(params![name], |r| r.get(0))
            .optional()?;
        match json {
            None => Ok(None),
            Some(j) => serde_json::from_str(&j)
                .map(Some)
                .map_err(|source| StoreError::Snapshot {
                    name: name.to_string(),
                    source,
                }),
        }
    }

    /// Routes added at runtime, in the order they were added.
    pub fn routes(&self) -> Result<Vec<oxidepm_proto::Route>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT route FROM routes ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            let text = r?;
            let route = match serde_json::from_str(&text) {
                Ok(r) => r,
                Err(source) => return Err(StoreError::Route { text, source }),
            };
            out.push(route);
        }
        Ok(out)
    }

    /// Adds a route; false when the same route is already there.
    pub fn add_route(&self, route: &oxidepm_proto::Route) -> Result<bool> {
        let text = serde_json::to_string(route).map_err(StoreError::Encode)?;
        let n = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO routes (route) VALUES (?1)")?
            .execute(params![text])?;
        Ok(n == 1)
    }

    /// Removes a route; false when there was no such route.
    pub fn remove_route(&self, route: &oxidepm_proto::Route) -> Result<bool> {
        let text = serde_json::to_string(route).map_err(StoreError::Encode)?;
        let n = self
            .conn
            .prepare_cached("DELETE FROM routes WHERE route = ?1")?
            .execute(params![text])?;
        Ok(n == 1)
    }
}
