//! Records the daemon keeps and reports: lifecycle events, audit rows, log lines.

use crate::actor::Actor;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What happened to an app, as recorded in its lifecycle events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The app was created.
    Defined,
    /// Its spec was changed.
    Changed,
    /// It was forgotten.
    Deleted,
    /// A process was spawned.
    Started,
    /// A process was spawned again after a stop or an exit.
    Restarted,
    /// A process left by an earlier daemon was taken over.
    Adopted,
    /// The start waits for dependencies.
    Waiting,
    /// A process could not be spawned.
    Failed,
    /// The process exited.
    Exited,
    /// The app is stopped.
    Stopped,
    /// The app is not restarted any more after failures.
    Errored,
    /// The memory limit was exceeded (a restart follows).
    MemoryLimit,
    /// The health check failed too often (a restart follows).
    Unhealthy,
    /// A scheduled restart is due.
    Cron,
    /// A kind this version does not know, kept as written (records of
    /// another version of the daemon).
    Other(String),
}

impl EventKind {
    /// The name of the kind, as stored and on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Defined => "defined",
            EventKind::Changed => "changed",
            EventKind::Deleted => "deleted",
            EventKind::Started => "started",
            EventKind::Restarted => "restarted",
            EventKind::Adopted => "adopted",
            EventKind::Waiting => "waiting",
            EventKind::Failed => "failed",
            EventKind::Exited => "exited",
            EventKind::Stopped => "stopped",
            EventKind::Errored => "errored",
            EventKind::MemoryLimit => "memory-limit",
            EventKind::Unhealthy => "unhealthy",
            EventKind::Cron => "cron",
            EventKind::Other(s) => s,
        }
    }

    /// Reads a kind by name; names this version does not know are kept.
    pub fn parse(s: &str) -> EventKind {
        match s {
            "defined" => EventKind::Defined,
            "changed" => EventKind::Changed,
            "deleted" => EventKind::Deleted,
            "started" => EventKind::Started,
            "restarted" => EventKind::Restarted,
            "adopted" => EventKind::Adopted,
            "waiting" => EventKind::Waiting,
            "failed" => EventKind::Failed,
            "exited" => EventKind::Exited,
            "stopped" => EventKind::Stopped,
            "errored" => EventKind::Errored,
            "memory-limit" => EventKind::MemoryLimit,
            "unhealthy" => EventKind::Unhealthy,
            "cron" => EventKind::Cron,
            other => EventKind::Other(other.to_string()),
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        Ok(EventKind::parse(&String::deserialize(d)?))
    }
}

/// One lifecycle event of an app, credited to the actor that caused it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventRecord {
    /// Sequence number.
    pub seq: u64,
    /// RFC 3339 time (UTC, milliseconds).
    pub at: String,
    /// Id of the app.
    pub app_id: u64,
    /// Name of the app at the time.
    pub app: String,
    /// What happened.
    pub kind: EventKind,
    /// Who caused it.
    pub actor: Actor,
    /// Free-form detail (exit status, pid, reason).
    pub detail: String,
}

/// One audited request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Sequence number.
    pub seq: u64,
    /// RFC 3339 time (UTC, milliseconds).
    pub at: String,
    /// Who asked.
    pub actor: Actor,
    /// `daemon` or `agent` (or `lane` for the ops responder).
    pub socket: String,
    /// The operation.
    pub op: String,
    /// Apps the request touched, by name.
    pub apps: Vec<String>,
    /// `ok` or the error code.
    pub outcome: String,
    /// Error message, when refused or failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Which output stream of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

impl LogStream {
    /// `out` or `err`, as used in log file names.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Out => "out",
            LogStream::Err => "err",
        }
    }
}

/// One line of an app's log, as streamed by `logs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogLine {
    /// App name.
    pub app: String,
    /// Stream.
    pub stream: LogStream,
    /// The line as stored (with its timestamp prefix when timestamps are on).
    pub line: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_by_name() {
        for name in [
            "defined",
            "changed",
            "deleted",
            "started",
            "restarted",
            "adopted",
            "waiting",
            "failed",
            "exited",
            "stopped",
            "errored",
            "memory-limit",
            "unhealthy",
            "cron",
        ] {
            let k = EventKind::parse(name);
            assert!(!matches!(k, EventKind::Other(_)), "{name}");
            assert_eq!(k.as_str(), name);
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{name}\""));
        }
        let odd: EventKind = serde_json::from_str("\"reloaded\"").unwrap();
        assert_eq!(odd, EventKind::Other("reloaded".into()));
        assert_eq!(serde_json::to_string(&odd).unwrap(), "\"reloaded\"");
    }
}
