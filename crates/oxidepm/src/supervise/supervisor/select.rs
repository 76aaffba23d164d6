//! Selectors: which apps a request names (`name`, id, `all`, `@tag`, or a
//! comma-separated list of them). A name no app has selects the instances
//! of that name (`web` → `web-0`, `web-1`, …).

use super::Supervisor;
use crate::supervise::SelectError;

impl Supervisor {
    /// Resolves a selector (`name`, id, `all`, `@tag`, or a comma-separated
    /// list of them) to app ids, in id order.
    pub fn resolve(&self, target: &str) -> Result<Vec<u64>, SelectError> {
        let mut ids = Vec::new();
        for part in target.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(SelectError::Empty {
                    target: target.to_string(),
                });
            }
            let found: Vec<u64> = if part == "all" {
                self.apps.keys().copied().collect()
            } else if let Some(tag) = part.strip_prefix('@') {
                self.apps
                    .values()
                    .filter(|a| a.spec.tags.iter().any(|t| t == tag))
                    .map(|a| a.id)
                    .collect()
            } else if let Ok(id) = part.parse::<u64>() {
                self.apps
                    .contains_key(&id)
                    .then_some(id)
                    .into_iter()
                    .collect()
            } else {
                let named: Vec<u64> = self
                    .apps
                    .values()
                    .filter(|a| a.spec.name == part)
                    .map(|a| a.id)
                    .collect();
                if named.is_empty() {
                    self.instances_of(part)
                } else {
                    named
                }
            };
            if found.is_empty() {
                return Err(if part == "all" {
                    SelectError::NoApps
                } else if let Some(tag) = part.strip_prefix('@') {
                    SelectError::NoTag {
                        tag: tag.to_string(),
                    }
                } else if self
                    .apps
                    .values()
                    .any(|a| a.spec.tags.iter().any(|t| t == part))
                {
                    SelectError::IsTag {
                        selector: part.to_string(),
                    }
                } else {
                    SelectError::NoMatch {
                        selector: part.to_string(),
                    }
                });
            }
            ids.extend(found);
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The instances of group `base` (`<base>-0` …), in id order: what a
    /// name selects when no app has that name, as in pm2.
    pub fn instances_of(&self, base: &str) -> Vec<u64> {
        self.apps
            .values()
            .filter(|a| oxidepm_proto::instance_of(&a.spec).is_some_and(|(b, _)| b == base))
            .map(|a| a.id)
            .collect()
    }

    /// Names of the apps `ids`.
    pub fn names(&self, ids: &[u64]) -> Vec<String> {
        ids.iter()
            .filter_map(|id| self.apps.get(id).map(|a| a.spec.name.clone()))
            .collect()
    }
}
