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
}

/// Answer to `whoami`: what the daemon decided about the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `class:label`.
    pub actor: Actor,
    /// The actor's class.
    pub class: Class,
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
    /// `kill`.
    Killed(Killed),
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
    Killed => Killed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::StreamReport;
    use crate::report::{AgentLaneReport, BridgeCounters, Counters, RouteOrigin, RouteReport};
    use serde_json::{json, Value};

    /// Writes `t` directly and through `Value` (sorted keys): the two agree
    /// when the fields are declared in sorted order.
    fn same_both_ways<T: Serialize>(t: &T) -> String {
        let direct = serde_json::to_string(t).unwrap();
        let sorted = serde_json::to_string(&serde_json::to_value(t).unwrap()).unwrap();
        assert_eq!(direct, sorted);
        direct
    }

    fn route() -> Route {
        Route {
            source: "webhook".into(),
            channel: Some("support".into()),
            guild: None,
            address: None,
            agent: "alice".into(),
        }
    }

    #[test]
    fn answers_keep_their_shape() {
        let pong = Pong {
            home: "/h".into(),
            pid: 7,
            pong: true,
            protocol: 1,
            uptime_ms: 5,
            version: "0.1.0".into(),
        };
        assert_eq!(
            same_both_ways(&pong),
            r#"{"home":"/h","pid":7,"pong":true,"protocol":1,"uptime_ms":5,"version":"0.1.0"}"#
        );
        let who = Identity {
            actor: Actor::new(Class::Ai, "bot"),
            class: Class::Ai,
            label: "bot".into(),
            socket: "agent".into(),
            tier: Tier::Control,
        };
        assert_eq!(
            same_both_ways(&who),
            r#"{"actor":"ai:bot","class":"ai","label":"bot","socket":"agent","tier":"control"}"#
        );
        let started = AppAction {
            action: Action::Started,
            id: 2,
            name: "web".into(),
            pid: Some(9),
        };
        let waiting = AppAction {
            action: Action::WaitingForDependencies,
            pid: None,
            ..started.clone()
        };
        assert_eq!(
            same_both_ways(&vec![started, waiting]),
            r#"[{"action":"started","id":2,"name":"web","pid":9},{"action":"waiting for dependencies","id":2,"name":"web"}]"#
        );
        let gone = Defined {
            action: Action::Created,
            id: 3,
            name: None,
            pid: None,
            status: None,
        };
        assert_eq!(
            same_both_ways(&gone),
            r#"{"action":"created","id":3,"name":null,"pid":null,"status":null}"#
        );
        let stopped = Stopped {
            id: 1,
            name: "db".into(),
            status: Status::Stopped,
        };
        assert_eq!(
            same_both_ways(&stopped),
            r#"{"id":1,"name":"db","status":"stopped"}"#
        );
        assert_eq!(same_both_ways(&LogsDone { apps: 1 }), r#"{"apps":1}"#);
        assert_eq!(
            same_both_ways(&Flushed {
                flushed: vec!["a".into()]
            }),
            r#"{"flushed":["a"]}"#
        );
        assert_eq!(
            same_both_ways(&Saved {
                apps: vec!["a".into()],
                snapshot: "default".into()
            }),
            r#"{"apps":["a"],"snapshot":"default"}"#
        );
        assert_eq!(
            same_both_ways(&Killed { stopped: true }),
            r#"{"stopped":true}"#
        );
        // A route inside an answer is written through Value, like every answer.
        let added = Reply::from(RouteAdded { added: route() })
            .to_value()
            .unwrap();
        assert_eq!(
            added.to_string(),
            r#"{"added":{"agent":"alice","channel":"support","source":"webhook"}}"#
        );
    }

    #[test]
    fn reports_keep_their_shape() {
        let counters = BridgeCounters {
            dead: 1,
            delivered: 2,
            pending: 3,
            retried: 4,
            routed: 5,
            unrouted: 6,
            unrouted_stream: 7,
        };
        let lanes = LanesReport {
            agents: vec![AgentLaneReport {
                acl_user: "agent_alice".into(),
                agent: "alice".into(),
                socket: "/h/lanes/alice.sock".into(),
                streams: vec![StreamReport {
                    key: "alice:ops:inbox".into(),
                    length: 2,
                    pending: 1,
                }],
            }],
            bridge: RoutesReport {
                counters: Some(Counters::Read(counters)),
                default_agent: None,
                routes: vec![RouteReport::new(route(), RouteOrigin::Config)],
            },
        };
        let text = same_both_ways(&lanes);
        assert_eq!(
            text,
            concat!(
                r#"{"agents":[{"acl_user":"agent_alice","agent":"alice","socket":"/h/lanes/alice.sock","#,
                r#""streams":[{"key":"alice:ops:inbox","length":2,"pending":1}]}],"#,
                r#""bridge":{"counters":{"dead":1,"delivered":2,"pending":3,"retried":4,"routed":5,"unrouted":6,"unrouted_stream":7},"#,
                r#""default_agent":null,"routes":[{"agent":"alice","channel":"support","origin":"config","source":"webhook"}]}}"#
            )
        );
        assert_eq!(serde_json::from_str::<LanesReport>(&text).unwrap(), lanes);
        let r = lanes.bridge.routes[0].clone();
        assert_eq!(r.matcher(), Some(("channel", "support")));
    }

    #[test]
    fn counters_read_unread_or_missing() {
        let unread: Option<Counters> = serde_json::from_value(json!({})).unwrap();
        assert_eq!(unread, Some(Counters::Unread {}));
        assert_eq!(serde_json::to_value(&unread).unwrap(), json!({}));
        let missing: Option<Counters> = serde_json::from_value(Value::Null).unwrap();
        assert_eq!(missing, None);
        let full = json!({"dead":0,"delivered":0,"pending":0,"retried":0,"routed":1,"unrouted":0,"unrouted_stream":0});
        let read: Counters = serde_json::from_value(full.clone()).unwrap();
        assert!(matches!(read, Counters::Read(c) if c.routed == 1));
        assert_eq!(serde_json::to_value(&read).unwrap(), full);
    }

    #[test]
    fn actions_by_name() {
        for a in [
            Action::Created,
            Action::Changed,
            Action::Unchanged,
            Action::Started,
            Action::Restarted,
            Action::AlreadyRunning,
            Action::WaitingForDependencies,
            Action::Deleted,
        ] {
            let v = serde_json::to_value(a).unwrap();
            assert_eq!(v, Value::String(a.as_str().into()));
            assert_eq!(serde_json::from_value::<Action>(v).unwrap(), a);
        }
    }
}
