//! Records the daemon keeps and reports: lifecycle events, audit rows, log lines.

use crate::actor::Actor;
use serde::{Deserialize, Serialize};

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
    /// `defined`, `started`, `stopped`, `exited`, `restarted`, `errored`, `deleted`, ...
    pub kind: String,
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
