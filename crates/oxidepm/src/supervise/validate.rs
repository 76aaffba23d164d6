//! Checks of app specs that every client gets, whatever it sends: the CLI
//! checks config files too, but a raw protocol client must meet the same
//! rules before anything changes.

use super::{automation, deps, spawn};
use oxidepm_proto::{AppSpec, DependencyCondition, ErrorBody, ErrorCode, HealthProbe};
use std::collections::BTreeMap;

fn bad(msg: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::BadRequest, msg)
}

/// Checks one spec on its own.
pub fn check_spec(spec: &AppSpec) -> Result<(), ErrorBody> {
    let name = &spec.name;
    oxidepm_proto::check_app_name(name).map_err(bad)?;
    if spec.command.is_empty() {
        return Err(bad(format!("app {name:?} has no command")));
    }
    if spawn::parse_signal(&spec.stop_signal).is_none() {
        return Err(bad(format!(
            "app {name:?}: unknown stop signal {:?}",
            spec.stop_signal
        )));
    }
    if let Some(c) = &spec.cron_restart {
        automation::parse_cron(c).map_err(|e| bad(format!("app {name:?}: {e}")))?;
    }
    // That a check names exactly one probe is settled when the spec is read.
    match spec.health.as_ref().map(|h| &h.probe) {
        Some(HealthProbe::Command(c)) if c.is_empty() => {
            return Err(bad(format!(
                "app {name:?}: the health-check command is empty"
            )));
        }
        Some(HealthProbe::Http(u)) if !u.starts_with("http://") => {
            return Err(bad(format!(
                "app {name:?}: the health-check URL must start with http://"
            )));
        }
        _ => {}
    }
    for t in &spec.tags {
        if !oxidepm_proto::actor::valid_label(t) {
            return Err(bad(format!(
                "app {name:?}: tag {t:?} must be 1 to 32 of A-Z a-z 0-9 . _ -"
            )));
        }
    }
    if spec.depends_on.iter().any(|d| &d.app == name) {
        return Err(bad(format!("app {name:?} depends on itself")));
    }
    Ok(())
}

/// Checks the dependency graph that `new` specs would make together with
/// the `existing` ones: every dependency defined, `healthy` only on apps
/// with a health check, and no cycle.
pub fn check_graph(existing: &[&AppSpec], new: &[AppSpec]) -> Result<(), ErrorBody> {
    let mut all: BTreeMap<&str, &AppSpec> =
        existing.iter().map(|s| (s.name.as_str(), *s)).collect();
    for s in new {
        all.insert(s.name.as_str(), s);
    }
    for s in new {
        for d in &s.depends_on {
            let Some(dep) = all.get(d.app.as_str()) else {
                return Err(bad(format!(
                    "app {:?} depends on {:?}, which is not defined; define it in the same file or first",
                    s.name, d.app
                )));
            };
            if d.condition == DependencyCondition::Healthy && dep.health.is_none() {
                return Err(bad(format!(
                    "app {:?} waits for {:?} to be healthy, but {:?} has no health check",
                    s.name, d.app, d.app
                )));
            }
        }
    }
    let edges: BTreeMap<String, Vec<String>> = all
        .values()
        .map(|s| {
            (
                s.name.clone(),
                s.depends_on.iter().map(|d| d.app.clone()).collect(),
            )
        })
        .collect();
    let names: Vec<String> = all.keys().map(|n| n.to_string()).collect();
    deps::order(&names, &edges).map_err(bad)?;
    Ok(())
}
