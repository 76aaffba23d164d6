//! Selectors: which apps a request names (`name`, id, `all`, `@tag`, or a
//! comma-separated list of them).

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
                self.apps
                    .values()
                    .filter(|a| a.spec.name == part)
                    .map(|a| a.id)
                    .collect()
            };
            if found.is_empty() {
                return Err(if part == "all" {
                    SelectError::NoApps
                } else if let Some(tag) = part.strip_prefix('@') {
                    SelectError::NoTag {
                        tag: tag.to_string(),
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

    /// Names of the apps `ids`.
    pub fn names(&self, ids: &[u64]) -> Vec<String> {
        ids.iter()
            .filter_map(|id| self.apps.get(id).map(|a| a.spec.name.clone()))
            .collect()
    }
}
