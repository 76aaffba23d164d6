//! Records the daemon keeps and reports: lifecycle events, audit rows, log lines.

use crate::actor::Actor;
use serde::{Deserialize, Serialize};
use std::fmt;

// The kinds are listed once: the enum, its names both ways and
// [`EVENT_KINDS`] (what `subscribe` accepts) are all made from this list.
macro_rules! event_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// What happened to an app, as recorded in its lifecycle events.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum EventKind {
            $($(#[doc = $doc])* $variant,)*
            /// A kind this version does not know, kept as written (records of
            /// another version of the daemon).
            Other(String),
        }

        /// Every event kind a daemon of this version records, by name.
        pub const EVENT_KINDS: &[&str] = &[$($name,)*];

        impl EventKind {
            /// The name of the kind, as stored and on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(EventKind::$variant => $name,)*
                    EventKind::Other(s) => s,
                }
            }

            /// Reads a kind by name; names this version does not know are kept.
            pub fn parse(s: &str) -> EventKind {
                match s {
                    $($name => EventKind::$variant,)*
                    other => EventKind::Other(other.to_string()),
                }
            }
        }
    };
}

event_kinds! {
    /// The app was created.
    Defined = "defined",
    /// Its spec was changed.
    Changed = "changed",
    /// It was forgotten.
    Deleted = "deleted",
    /// A process was spawned.
    Started = "started",
    /// A process was spawned again after a stop or an exit.
    Restarted = "restarted",
    /// A process left by an earlier daemon was taken over.
    Adopted = "adopted",
    /// The start waits for dependencies.
    Waiting = "waiting",
    /// A process could not be spawned.
    Failed = "failed",
    /// The process exited.
    Exited = "exited",
    /// The app is stopped.
    Stopped = "stopped",
    /// The app is not restarted any more after failures.
    Errored = "errored",
    /// The memory limit was exceeded (a restart follows).
    MemoryLimit = "memory-limit",
    /// The health check failed too often (a restart follows).
    Unhealthy = "unhealthy",
    /// A scheduled restart is due.
    Cron = "cron",
    /// A watched file changed (a restart follows).
    Watch = "watch",
    /// A process of an app this daemon does not have was found (kept running).
    Orphan = "orphan",
    /// The health state changed.
    Health = "health",
    /// A reload began, went on, or ended.
    Reload = "reload",
    /// A signal was sent to the app by request.
    Signal = "signal",
    /// The app's counters were reset.
    Reset = "reset",
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
    /// The front end the request came through (`mcp:restart`), when its
    /// sender named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
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
    /// In the answer to a search (`grep`): whether this line matched
    /// (false: a line of context around a match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_kind_is_a_kind_of_this_version() {
        for name in EVENT_KINDS {
            assert!(
                !matches!(EventKind::parse(name), EventKind::Other(_)),
                "{name}"
            );
        }
        assert!(EVENT_KINDS.contains(&"orphan") && EVENT_KINDS.contains(&"reset"));
    }

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
