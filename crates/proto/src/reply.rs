//! The answers of the daemon: what the `result` of a final response line
//! holds for each operation, and what `logs` streams.
//!
//! A client decodes `result` into the type of the operation it sent (see
//! [`Reply`] for which is which). The daemon writes every answer through
//! `serde_json::Value`, whose objects keep their keys sorted, so fields are
//! declared here in that order too.

use crate::actor::{Actor, Class, Tier};
use crate::app::{AppInfo, Status};
use crate::record::{AuditRecord, EventRecord, LogLine};
use crate::report::{LanesReport, RoutesReport};
use crate::route::Route;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// Answer to `ping`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The daemon's home directory.
    pub home: PathBuf,
    /// The daemon's process id.
    pub pid: u32,
    /// Always `true`.
    pub pong: bool,
    /// [`crate::PROTOCOL_VERSION`] of the daemon.
    pub protocol: u32,
    /// Milliseconds since the daemon started.
    pub uptime_ms: u64,
    /// The daemon's version.
    pub version: String,
    /// Set while the daemon is degraded (state.db cannot be written, or
    /// was repaired): what is wrong and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Answer to `whoami`: what the daemon decided about the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `class:label`.
    pub actor: Actor,
    /// The actor's class.
    pub class: Class,
    /// What holds each app's processes together, which is what the
    /// attribution of processes to apps rests on: `cgroup2 (<dir>)` or
    /// `sessions (<why no cgroup>)`.
    #[serde(default)]
    pub containment: String,
    /// The actor's label.
    pub label: String,
    /// The socket the request came in on (`daemon`, `agent` or `lane`).
    pub socket: String,
    /// What the actor may do.
    pub tier: Tier,
}

/// What a request did to one app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// `define` made a new app.
    #[serde(rename = "created")]
    Created,
    /// `define` changed an app's spec.
    #[serde(rename = "changed")]
    Changed,
    /// `define` found the spec as it was.
    #[serde(rename = "unchanged")]
    Unchanged,
    /// A process was spawned.
    #[serde(rename = "started")]
    Started,
    /// A process was spawned again.
    #[serde(rename = "restarted")]
    Restarted,
    /// Nothing to start: it runs (or waits to).
    #[serde(rename = "already running")]
    AlreadyRunning,
    /// It will be spawned once its dependencies are ready.
    #[serde(rename = "waiting for dependencies")]
    WaitingForDependencies,
    /// The app was stopped and forgotten.
    #[serde(rename = "deleted")]
    Deleted,
}

impl Action {
    /// The action as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Changed => "changed",
            Action::Unchanged => "unchanged",
            Action::Started => "started",
            Action::Restarted => "restarted",
            Action::AlreadyRunning => "already running",
            Action::WaitingForDependencies => "waiting for dependencies",
            Action::Deleted => "deleted",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One app in the answer to `start`, `restart`, `resurrect` or `delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppAction {
    /// What was done.
    pub action: Action,
    /// The app's id.
    pub id: u64,
    /// The app's name.
    pub name: String,
    /// What else the request did because of this app (deleting an agent
    /// parks its routes), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The new process, when one was spawned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// One app in the answer to `define`, as it is once the request is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defined {
    /// What was done to its definition.
    pub action: Action,
    /// The app's id.
    pub id: u64,
    /// The app's name (`null` if it is gone already).
    pub name: Option<String>,
    /// Its process, if running.
    pub pid: Option<u32>,
    /// Its status (`null` if it is gone already).
    pub status: Option<Status>,
    /// What the caller should know about how it runs (for example, an
    /// agent that shares its uid with others is not isolated from them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// For an app whose spec changed: what changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<crate::SpecChange>,
}

/// One app in the answer to `stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    /// The app's id.
    pub id: u64,
    /// The app's name.
    pub name: String,
    /// Its status once the stop is done.
    pub status: Status,
}

/// The final answer to `logs` on a socket, after the streamed lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogsDone {
    /// Half the number of log files read (two streams per app).
    pub apps: usize,
    /// A search (`grep`) found more matches than the lines or bytes
    /// asked for: the older ones were left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Answer to `flush`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    /// The apps whose logs were emptied.
    pub flushed: Vec<String>,
}

/// Answer to `save`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The apps in the snapshot.
    pub apps: Vec<String>,
    /// The snapshot's name.
    pub snapshot: String,
}

/// Answer to `route_add`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteAdded {
    /// The route added.
    pub added: Route,
}

/// Answer to `lanes_release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameReleased {
    /// The name.
    pub released: String,
    /// Whose it was, or that nobody held it.
    pub note: String,
}

/// Answer to `lanes_migrate_keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysMigrated {
    /// `[from, to]` of each stream renamed.
    pub migrated: Vec<[String; 2]>,
    /// `[key, why]` of each stream left where it was.
    pub kept: Vec<[String; 2]>,
}

/// Answer to `route_rm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRemoved {
    /// The route removed.
    pub removed: Route,
}

/// Answer to `kill`, sent once every app is stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Killed {
    /// Always `true`.
    pub stopped: bool,
}

/// Answer to `reload_daemon_config`: what changed in daemon.toml and what
/// became of each change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigReloaded {
    /// The file read.
    pub path: String,
    /// Changed keys now in force (dotted, as in the file).
    pub applied: Vec<String>,
    /// Changed keys that take effect at the next daemon start, each with why.
    pub not_applied: Vec<NotApplied>,
}

/// A changed daemon.toml key the running daemon cannot take on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotApplied {
    /// The key, dotted (`lanes.enabled`).
    pub key: String,
    /// Why it waits for the next start.
    pub reason: String,
}

/// Every answer the daemon gives, as the `result` of a final line. It is
/// written without a tag: the operation asked tells which variant to read.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// `ping`.
    Pong(Pong),
    /// `whoami`.
    Identity(Identity),
    /// `status` (brief) and `show` (with spec and log files).
    Apps(Vec<AppInfo>),
    /// `define`.
    Defined(Vec<Defined>),
    /// `start`, `restart`, `resurrect` and `delete`.
    Actions(Vec<AppAction>),
    /// `stop`.
    Stopped(Vec<Stopped>),
    /// `logs` through an agent's lane, where the lines come at once.
    LogLines(Vec<LogLine>),
    /// `logs` on a socket, after the streamed lines.
    LogsDone(LogsDone),
    /// `events`.
    Events(Vec<EventRecord>),
    /// `flush`.
    Flushed(Flushed),
    /// `save`.
    Saved(Saved),
    /// `audit`.
    Audit(Vec<AuditRecord>),
    /// `lanes`.
    Lanes(LanesReport),
    /// `routes`.
    Routes(RoutesReport),
    /// `route_add`.
    RouteAdded(RouteAdded),
    /// `route_rm`.
    RouteRemoved(RouteRemoved),
    /// `lanes_release`.
    NameReleased(NameReleased),
    /// `lanes_migrate_keys`.
    KeysMigrated(KeysMigrated),
    /// `kill`.
    Killed(Killed),
    /// `signal`.
    Signalled(Vec<crate::verbs::Signalled>),
    /// `reset`.
    Reset(Vec<crate::verbs::ResetDone>),
    /// `reload`.
    Reloaded(Vec<crate::verbs::Reloaded>),
    /// `reload_daemon_config`.
    ConfigReloaded(ConfigReloaded),
}

impl Reply {
    /// The reply as the `result` of a response line.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }
}

macro_rules! reply_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Reply {
            fn from(r: $t) -> Reply {
                Reply::$v(r)
            }
        })*
    };
}

reply_from! {
    Pong => Pong,
    Identity => Identity,
    Vec<AppInfo> => Apps,
    Vec<Defined> => Defined,
    Vec<AppAction> => Actions,
    Vec<Stopped> => Stopped,
    Vec<LogLine> => LogLines,
    LogsDone => LogsDone,
    Vec<EventRecord> => Events,
    Flushed => Flushed,
    Saved => Saved,
    Vec<AuditRecord> => Audit,
    LanesReport => Lanes,
    RoutesReport => Routes,
    RouteAdded => RouteAdded,
    RouteRemoved => RouteRemoved,
    NameReleased => NameReleased,
    KeysMigrated => KeysMigrated,
    Killed => Killed,
    Vec<crate::verbs::Signalled> => Signalled,
    Vec<crate::verbs::ResetDone> => Reset,
    Vec<crate::verbs::Reloaded> => Reloaded,
    ConfigReloaded => ConfigReloaded,
}

#[cfg(test)]
mod tests;
