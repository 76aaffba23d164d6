//! Requests, responses and error codes.

use crate::app::AppSpec;
use crate::record::LogStream;
use crate::route::Route;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One request line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Echoed in every response line to this request.
    #[serde(default)]
    pub id: u64,
    /// What the client says it is (`human:<label>` or `ai:<label>`); a claim
    /// can only make a request stricter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// Which front end the request came through (`mcp:restart`): written
    /// in its audit row beside the actor, never a source of rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The operation and its arguments.
    #[serde(flatten)]
    pub op: Op,
}

/// The front end a request came through, as its sender names it: 1 to
/// [`Via::MAX`] bytes of ASCII letters, digits, `:`, `.`, `_` and `-`, so
/// an audit row stays one short word whoever wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Via(String);

impl Via {
    /// The longest `via` taken, in bytes.
    pub const MAX: usize = 64;

    /// `text` as a `via`, or what is wrong with it.
    pub fn new(text: &str) -> Result<Via, String> {
        let ok = |c: u8| c.is_ascii_alphanumeric() || b":._-".contains(&c);
        if text.is_empty() || text.len() > Via::MAX || !text.bytes().all(ok) {
            return Err(format!(
                "via must be 1 to {} bytes of ASCII letters, digits, ':', '.', '_' or '-' (as in \"mcp:restart\")",
                Via::MAX
            ));
        }
        Ok(Via(text.to_string()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Via {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Via, D::Error> {
        let text = String::deserialize(d)?;
        Via::new(&text).map_err(serde::de::Error::custom)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Op {
    /// `logs --follow` of `target` from now on: new lines only.
    pub fn logs_follow(target: String) -> Op {
        Op::logs_of(target, 0, true)
    }

    /// `logs` of the last `lines` lines of `target`'s files, nothing else.
    pub fn logs_tail(target: String, lines: usize) -> Op {
        Op::logs_of(target, lines, false)
    }

    fn logs_of(target: String, lines: usize, follow: bool) -> Op {
        Op::Logs {
            target,
            lines,
            follow,
            stream: None,
            since: None,
            until: None,
            grep: None,
            regex: false,
            context: 0,
        }
    }
}

/// An operation and its arguments. `target` is a selector: a name, a numeric
/// id, `all`, or `@tag`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Liveness check.
    Ping,
    /// What the daemon decided about the caller.
    Whoami,
    /// Every app, briefly.
    Status,
    /// Apps matching `target`, in full.
    Show {
        /// Selector.
        target: String,
    },
    /// Defines apps (or changes their spec), then starts those with `autostart`.
    Define {
        /// The apps.
        apps: Vec<AppSpec>,
        /// Whether an existing app whose spec differs is changed (`true`,
        /// the default: files are the truth) or the request is refused
        /// with what differs (`false`: a start from the command line
        /// never redefines an app silently).
        #[serde(default = "yes", skip_serializing_if = "is_yes")]
        update: bool,
    },
    /// Starts existing apps.
    Start {
        /// Selector.
        target: String,
    },
    /// Stops apps.
    Stop {
        /// Selector.
        target: String,
    },
    /// Restarts apps.
    Restart {
        /// Selector.
        target: String,
    },
    /// Stops and forgets apps.
    Delete {
        /// Selector.
        target: String,
    },
    /// Reads an app's log. On a socket the answer is streamed: one
    /// [`Response`] item per line, a `LogLine` (`{"app","stream","line"}`),
    /// oldest first, each stream of each app in turn, as many as `lines`
    /// asks for (no other cap); a line longer than 1 MiB comes in pieces of
    /// 1 MiB. Then, with `follow`, new lines as they are written until the
    /// client closes; else a final `LogsDone`. Through an agent's `ops`
    /// lane the answer is one list of `LogLine`s, bounded in bytes: the
    /// newest lines that fit, with a `truncated` field on the reply entry
    /// when older ones were left out.
    Logs {
        /// Selector (one or more apps); empty (or absent): every app the
        /// caller may read.
        #[serde(default)]
        target: String,
        /// Lines from the end of each stream.
        #[serde(default = "default_lines")]
        lines: usize,
        /// Keep streaming new lines.
        #[serde(default)]
        follow: bool,
        /// One stream only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<LogStream>,
        /// Only lines stamped at or after this time (RFC 3339 in UTC with
        /// milliseconds, `2026-11-30T10:00:00.000Z`); a line without a
        /// stamp goes with the stamped line before it. With several apps,
        /// or with `since`/`until`, the lines of every file are merged by
        /// time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<String>,
        /// Only lines stamped at or before this time (same form).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
        /// Only lines holding this text (or matching it, with `regex`),
        /// searched in every kept file, current and rotated: the newest
        /// `lines` matches with their context, each line marked `matched`,
        /// and `truncated` on the final answer when older ones were left
        /// out. With `follow`, new lines are filtered the same way.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grep: Option<String>,
        /// `grep` is a regular expression (Rust's `regex` syntax), not text.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        regex: bool,
        /// Lines before and after each match (at most 10).
        #[serde(default, skip_serializing_if = "is_zero")]
        context: u32,
    },
    /// Lifecycle events.
    Events {
        /// Selector; every app when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// Most recent events to return.
        #[serde(default = "default_events")]
        limit: usize,
        /// Only events at or after this RFC 3339 time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<String>,
    },
    /// Streams what happens as it happens, under the caller's read scope
    /// (the apps `events` would show it): one [`Response`] item per
    /// [`crate::Streamed`] record, first `subscribed`, then `event`s,
    /// `refusal`s (to admins) and `missed` markers, until the client
    /// closes. Never a final line unless the request is refused.
    Subscribe {
        /// Selector; every app in the caller's scope when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// Event kinds (`started`, `exited`, …, and `refusal`); all when
        /// empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kinds: Vec<String>,
    },
    /// Empties log files.
    Flush {
        /// Selector; every app when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Saves the running set as a named snapshot.
    Save {
        /// Snapshot name (`default` when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Starts the apps of a saved snapshot.
    Resurrect {
        /// Snapshot name (`default` when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Audited requests.
    Audit {
        /// Only requests that touched this app.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        app: Option<String>,
        /// Only requests by this actor (`class:label`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actor: Option<String>,
        /// Only requests at or after this RFC 3339 time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<String>,
        /// Most recent rows to return.
        #[serde(default = "default_events")]
        limit: usize,
        /// Only requests at or before this RFC 3339 time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
    },
    /// Agent lanes: sockets, ACL users, streams.
    Lanes,
    /// The bridge's routing table and counters.
    Routes,
    /// Adds a route at runtime.
    RouteAdd {
        /// The route.
        route: Route,
    },
    /// Frees a name another host holds in a shared server's registry
    /// (`lanes release <name> --force`).
    LanesRelease {
        /// The agent or responder name.
        name: String,
    },
    /// Renames this host's agents' streams to the tagged key form
    /// (`lanes migrate-keys`).
    LanesMigrateKeys,
    /// Removes a route added at runtime.
    RouteRm {
        /// The route (all its fields must match).
        route: Route,
    },
    /// Stops every app, then the daemon.
    Kill,
    /// Sends a signal to the main process of each selected app.
    Signal {
        /// Selector.
        target: String,
        /// Signal name (`SIGUSR1`, `USR1`, `usr1`) or number.
        signal: SignalName,
    },
    /// Zeroes restart counters and turns `errored` into `stopped`.
    Reset {
        /// Selector.
        target: String,
    },
    /// Replaces each selected app's process without downtime when it has a
    /// health check (new one healthy, then the old one stopped); a restart
    /// otherwise.
    Reload {
        /// Selector.
        target: String,
    },
    /// Runs `instances` copies of an app (`<name>-0` … `<name>-N-1`).
    Scale {
        /// The app (or instance group) to scale.
        target: String,
        /// How many instances to run.
        instances: u32,
    },
    /// Reads daemon.toml again and applies what can change without a
    /// restart; answers with the keys applied and those that wait for the
    /// next start.
    ReloadDaemonConfig,
}

/// A signal as a request names it: a name, or a number (the `ops` lane
/// reads a field that looks like a number as one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SignalName {
    /// `SIGUSR1`, `USR1`, `usr1` or `10`.
    Name(String),
    /// `10`.
    Number(u32),
}

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignalName::Name(s) => f.write_str(s),
            SignalName::Number(n) => write!(f, "{n}"),
        }
    }
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

fn default_lines() -> usize {
    15
}

fn default_events() -> usize {
    100
}

impl Op {
    /// The operation's name as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Ping => "ping",
            Op::Whoami => "whoami",
            Op::Status => "status",
            Op::Show { .. } => "show",
            Op::Define { .. } => "define",
            Op::Start { .. } => "start",
            Op::Stop { .. } => "stop",
            Op::Restart { .. } => "restart",
            Op::Delete { .. } => "delete",
            Op::Logs { .. } => "logs",
            Op::Events { .. } => "events",
            Op::Subscribe { .. } => "subscribe",
            Op::Flush { .. } => "flush",
            Op::Save { .. } => "save",
            Op::Resurrect { .. } => "resurrect",
            Op::Audit { .. } => "audit",
            Op::Lanes => "lanes",
            Op::Routes => "routes",
            Op::RouteAdd { .. } => "route-add",
            Op::RouteRm { .. } => "route-rm",
            Op::LanesRelease { .. } => "lanes-release",
            Op::LanesMigrateKeys => "lanes-migrate-keys",
            Op::Kill => "kill",
            Op::Signal { .. } => "signal",
            Op::Reset { .. } => "reset",
            Op::Reload { .. } => "reload",
            Op::Scale { .. } => "scale",
            Op::ReloadDaemonConfig => "reload-daemon-config",
        }
    }
}

/// Stable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The actor's tier does not allow the request.
    #[serde(rename = "E_POLICY_DENIED")]
    PolicyDenied,
    /// A protected app can be changed by a human only.
    #[serde(rename = "E_PROTECTED")]
    Protected,
    /// No app matches.
    #[serde(rename = "E_NOT_FOUND")]
    NotFound,
    /// The request is malformed or its arguments are invalid.
    #[serde(rename = "E_BAD_REQUEST")]
    BadRequest,
    /// The request line is too long.
    #[serde(rename = "E_TOO_LARGE")]
    TooLarge,
    /// The request conflicts with the current state.
    #[serde(rename = "E_CONFLICT")]
    Conflict,
    /// Spawning or another system call failed.
    #[serde(rename = "E_SPAWN")]
    Spawn,
    /// Something the daemon needs is missing (a program, a service).
    #[serde(rename = "E_UNAVAILABLE")]
    Unavailable,
    /// An internal error (storage); the request may be retried.
    #[serde(rename = "E_INTERNAL")]
    Internal,
    /// The actor has read more than its share of log bytes lately; retry
    /// after the time the message gives.
    #[serde(rename = "E_RATE_LIMITED")]
    RateLimited,
    /// The daemon did not finish the request in the time allowed; it may
    /// still complete.
    #[serde(rename = "E_TIMEOUT")]
    Timeout,
    /// The change was made but could not be written to the state
    /// database; the daemon keeps it in memory and writes it again.
    #[serde(rename = "E_STORAGE")]
    Storage,
}

impl ErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::PolicyDenied => "E_POLICY_DENIED",
            ErrorCode::Protected => "E_PROTECTED",
            ErrorCode::NotFound => "E_NOT_FOUND",
            ErrorCode::BadRequest => "E_BAD_REQUEST",
            ErrorCode::TooLarge => "E_TOO_LARGE",
            ErrorCode::Conflict => "E_CONFLICT",
            ErrorCode::Spawn => "E_SPAWN",
            ErrorCode::Unavailable => "E_UNAVAILABLE",
            ErrorCode::Internal => "E_INTERNAL",
            ErrorCode::RateLimited => "E_RATE_LIMITED",
            ErrorCode::Timeout => "E_TIMEOUT",
            ErrorCode::Storage => "E_STORAGE",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error: a stable code and a message a person can act on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// Stable code.
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorBody {}

/// One response line. A final line has `ok` and either `result` or `error`;
/// a streamed item has only `stream`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// Present on the final line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The answer, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// A streamed item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<serde_json::Value>,
    /// On a final line of `ping` and `status`: the daemon is degraded
    /// (state.db cannot be written, or was repaired), what and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl Response {
    /// A successful final line.
    pub fn ok(id: u64, result: serde_json::Value) -> Response {
        Response {
            id,
            ok: Some(true),
            result: Some(result),
            error: None,
            stream: None,
            warning: None,
        }
    }

    /// A failed final line.
    pub fn err(id: u64, error: ErrorBody) -> Response {
        Response {
            id,
            ok: Some(false),
            result: None,
            error: Some(error),
            stream: None,
            warning: None,
        }
    }

    /// A streamed item.
    pub fn item(id: u64, item: serde_json::Value) -> Response {
        Response {
            id,
            ok: None,
            result: None,
            error: None,
            stream: Some(item),
            warning: None,
        }
    }

    /// Whether this is the last line of the answer.
    pub fn is_final(&self) -> bool {
        self.ok.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_shape() {
        let r: Request =
            serde_json::from_str(r#"{"id":7,"op":"stop","target":"web","claim":"ai:x"}"#).unwrap();
        assert_eq!(r.id, 7);
        assert_eq!(r.claim.as_deref(), Some("ai:x"));
        assert!(matches!(r.op, Op::Stop { ref target } if target == "web"));
        let r: Request = serde_json::from_str(r#"{"op":"ping"}"#).unwrap();
        assert!(matches!(r.op, Op::Ping));
        assert!(serde_json::from_str::<Request>(r#"{"op":"nope"}"#).is_err());
        let e = Response::err(1, ErrorBody::new(ErrorCode::NotFound, "x"));
        let s = serde_json::to_string(&e).unwrap();
        assert!(s.contains("\"E_NOT_FOUND\""), "{s}");
    }

    #[test]
    fn define_updates_unless_told_not_to() {
        // An older client's define (from a file) keeps changing apps.
        let r: Request = serde_json::from_str(r#"{"op":"define","apps":[]}"#).unwrap();
        assert!(matches!(r.op, Op::Define { update: true, .. }));
        let keep = Op::Define {
            apps: vec![],
            update: false,
        };
        let line = serde_json::to_string(&keep).unwrap();
        assert_eq!(line, r#"{"op":"define","apps":[],"update":false}"#);
        let change = Op::Define {
            apps: vec![],
            update: true,
        };
        let line = serde_json::to_string(&change).unwrap();
        assert_eq!(line, r#"{"op":"define","apps":[]}"#);
    }
}
