//! Checks of app specs that every client gets, whatever it sends: the CLI
//! checks config files too, but a raw protocol client must meet the same
//! rules before anything changes.

use super::automation::{self, CronError};
use super::deps::{self, Cycle};
use super::spawn;
use oxidepm_proto::{AppSpec, DependencyCondition, HealthProbe};
use std::collections::BTreeMap;

/// Why a spec, or a set of specs, was refused.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// The name breaks the naming rule (the reason says which part).
    #[error("{0}")]
    Name(String),
    /// No program to run.
    #[error("app {app:?} has no command")]
    NoCommand {
        /// The app.
        app: String,
    },
    /// A stop signal that is neither a signal name nor a number.
    #[error("app {app:?}: unknown stop signal {signal:?}")]
    StopSignal {
        /// The app.
        app: String,
        /// The signal as given.
        signal: String,
    },
    /// A cron expression that does not parse.
    #[error("app {app:?}: {source}")]
    Cron {
        /// The app.
        app: String,
        /// What is wrong with the expression.
        source: CronError,
    },
    /// More rotated log files than any app may keep.
    #[error("app {app:?} keeps {keep} rotated log files per stream; at most {max} (log_files_kept)", max = oxidepm_proto::MAX_LOG_KEEP)]
    LogKeep {
        /// The app.
        app: String,
        /// The count asked for.
        keep: u32,
    },
    /// A log rotated at a size too small to hold a line or two.
    #[error("app {app:?} rotates its log at {bytes} bytes; use 0 (never) or at least {min} (log_max_size)", min = oxidepm_proto::MIN_LOG_ROTATE_BYTES)]
    LogMaxBytes {
        /// The app.
        app: String,
        /// The size asked for.
        bytes: u64,
    },
    /// A health-check command with no program.
    #[error("app {app:?}: the health-check command is empty")]
    EmptyProbe {
        /// The app.
        app: String,
    },
    /// A health-check URL that cannot be probed.
    #[error("app {app:?}: the health-check URL must start with http://")]
    ProbeUrl {
        /// The app.
        app: String,
    },
    /// A tag that breaks the label rule.
    #[error("app {app:?}: tag {tag:?} must be 1 to 32 of A-Z a-z 0-9 . _ -")]
    Tag {
        /// The app.
        app: String,
        /// The tag.
        tag: String,
    },
    /// An app among its own dependencies.
    #[error("app {app:?} depends on itself")]
    SelfDependency {
        /// The app.
        app: String,
    },
    /// A dependency on an app that nobody defined.
    #[error("app {app:?} depends on {dependency:?}, which is not defined; define it in the same file or first")]
    UndefinedDependency {
        /// The app.
        app: String,
        /// The missing dependency.
        dependency: String,
    },
    /// `healthy` asked of an app that has no health check.
    #[error("app {app:?} waits for {dependency:?} to be healthy, but {dependency:?} has no health check")]
    NoHealthCheck {
        /// The app.
        app: String,
        /// The dependency without a check.
        dependency: String,
    },
    /// The definitions would make a dependency cycle.
    #[error(transparent)]
    Cycle(#[from] Cycle),
    /// An agent that a root daemon would run as root.
    #[error("agent {app:?} would run as root, the daemon's own uid, where nothing separates it from the daemon or from other such agents; give it a user of its own (`--user <name>`, or `user` in the config file), or set `agents_share_uid = true` in daemon.toml to accept agents that are not isolated from each other")]
    AgentAsRoot {
        /// The agent.
        app: String,
    },
    /// A watch that names too much, or something that is not a path or
    /// a glob.
    #[error("app {app:?}: {reason}")]
    Watch {
        /// The app.
        app: String,
        /// What is wrong.
        reason: String,
    },
    /// One request defines the same name twice.
    #[error("app {app:?} is defined twice in one request")]
    DefinedTwice {
        /// The app.
        app: String,
    },
}

/// Checks one spec on its own.
pub fn check_spec(spec: &AppSpec) -> Result<(), Invalid> {
    let name = &spec.name;
    let app = || name.clone();
    oxidepm_proto::check_app_name(name).map_err(Invalid::Name)?;
    if spec.command.is_empty() {
        return Err(Invalid::NoCommand { app: app() });
    }
    if spawn::parse_signal(&spec.stop_signal).is_none() {
        return Err(Invalid::StopSignal {
            app: app(),
            signal: spec.stop_signal.clone(),
        });
    }
    if let Some(c) = &spec.cron_restart {
        automation::parse_cron(c).map_err(|source| Invalid::Cron { app: app(), source })?;
    }
    // That a check names exactly one probe is settled when the spec is read.
    match spec.health.as_ref().map(|h| &h.probe) {
        Some(HealthProbe::Command(c)) if c.is_empty() => {
            return Err(Invalid::EmptyProbe { app: app() });
        }
        Some(HealthProbe::Http(u)) if !u.starts_with("http://") => {
            return Err(Invalid::ProbeUrl { app: app() });
        }
        _ => {}
    }
    for t in &spec.tags {
        if !oxidepm_proto::actor::valid_label(t) {
            return Err(Invalid::Tag {
                app: app(),
                tag: t.clone(),
            });
        }
    }
    if spec.depends_on.iter().any(|d| &d.app == name) {
        return Err(Invalid::SelfDependency { app: app() });
    }
    if (1..oxidepm_proto::MIN_LOG_ROTATE_BYTES).contains(&spec.log_max_bytes) {
        return Err(Invalid::LogMaxBytes {
            app: app(),
            bytes: spec.log_max_bytes,
        });
    }
    if spec.log_keep > oxidepm_proto::MAX_LOG_KEEP {
        return Err(Invalid::LogKeep {
            app: app(),
            keep: spec.log_keep,
        });
    }
    if let Some(w) = &spec.watch {
        check_watch(w).map_err(|reason| Invalid::Watch { app: app(), reason })?;
    }
    Ok(())
}

/// The longest watch path, in bytes.
const MAX_WATCH_ITEM: usize = 4096;
/// The longest ignore pattern, in bytes: each is matched against every
/// change, so its cost per change is bounded too.
const MAX_WATCH_GLOB: usize = 256;

/// A watch's bounds: how many paths and patterns, how long each, and a
/// delay of at most a minute; every pattern a glob.
fn check_watch(w: &oxidepm_proto::WatchSpec) -> Result<(), String> {
    use oxidepm_proto::{MAX_WATCH_DELAY_MS, MAX_WATCH_ENTRIES};
    if w.paths.len() > MAX_WATCH_ENTRIES || w.ignore.len() > MAX_WATCH_ENTRIES {
        return Err(format!(
            "watch names {} paths and {} ignore patterns; at most {MAX_WATCH_ENTRIES} of each",
            w.paths.len(),
            w.ignore.len()
        ));
    }
    let items = w.paths.iter().map(|p| (p, MAX_WATCH_ITEM, "watch path"));
    let globs = w
        .ignore
        .iter()
        .map(|p| (p, MAX_WATCH_GLOB, "ignore_watch pattern"));
    for (p, max, what) in items.chain(globs) {
        if p.is_empty() || p.len() > max || p.contains('\0') {
            return Err(format!(
                "{what} {:?} must be 1 to {max} bytes with no NUL",
                p.chars().take(64).collect::<String>()
            ));
        }
    }
    if w.delay_ms > MAX_WATCH_DELAY_MS {
        return Err(format!(
            "watch_delay {} ms; at most {MAX_WATCH_DELAY_MS} ms",
            w.delay_ms
        ));
    }
    super::watch::Ignore::new(w).map(|_| ())
}

/// Checks the dependency graph that `new` specs would make together with
/// the `existing` ones: every dependency defined, `healthy` only on apps
/// with a health check, and no cycle.
pub fn check_graph(existing: &[&AppSpec], new: &[AppSpec]) -> Result<(), Invalid> {
    let mut all: BTreeMap<&str, &AppSpec> =
        existing.iter().map(|s| (s.name.as_str(), *s)).collect();
    for s in new {
        all.insert(s.name.as_str(), s);
    }
    for s in new {
        for d in &s.depends_on {
            let Some(dep) = all.get(d.app.as_str()) else {
                return Err(Invalid::UndefinedDependency {
                    app: s.name.clone(),
                    dependency: d.app.clone(),
                });
            };
            if d.condition == DependencyCondition::Healthy && dep.health.is_none() {
                return Err(Invalid::NoHealthCheck {
                    app: s.name.clone(),
                    dependency: d.app.clone(),
                });
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
    deps::order(&names, &edges)?;
    Ok(())
}
