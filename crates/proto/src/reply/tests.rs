//! The answers keep the shape clients have always read.

use super::*;
use crate::report::{AgentLaneReport, BridgeCounters, Counters, RouteOrigin, RouteReport};
use crate::report::{LanesMemory, SourceReport, StreamReport};
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
        warning: None,
    };
    assert_eq!(
        same_both_ways(&pong),
        r#"{"home":"/h","pid":7,"pong":true,"protocol":1,"uptime_ms":5,"version":"0.1.0"}"#
    );
    let who = Identity {
        actor: Actor::new(Class::Ai, "bot"),
        class: Class::Ai,
        containment: "sessions (test)".into(),
        label: "bot".into(),
        socket: "agent".into(),
        tier: Tier::Control,
    };
    assert_eq!(
        same_both_ways(&who),
        r#"{"actor":"ai:bot","class":"ai","containment":"sessions (test)","label":"bot","socket":"agent","tier":"control"}"#
    );
    let started = AppAction {
        action: Action::Started,
        id: 2,
        name: "web".into(),
        note: None,
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
        warnings: Vec::new(),
        changes: Vec::new(),
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
    assert_eq!(
        same_both_ways(&LogsDone {
            apps: 1,
            truncated: false
        }),
        r#"{"apps":1}"#
    );
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
        malformed: 8,
        too_large: 9,
        trimmed: 10,
        delivery_ms: 0,
        lost: 11,
        waited: 12,
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
            problem: None,
            default_agent_parked: None,
            reload_error: None,
            routes: vec![RouteReport::new(route(), RouteOrigin::Config)],
            consult: Vec::new(),
            sources: vec![
                SourceReport {
                    error: Some("Discord refused the bot token".into()),
                    failed_at: Some("2026-01-01T00:00:00.000Z".into()),
                    name: "discord".into(),
                    up: false,
                },
                SourceReport {
                    error: None,
                    failed_at: None,
                    name: "webhook".into(),
                    up: true,
                },
            ],
        },
        warnings: Vec::new(),
        responders: Vec::new(),
        shared: None,
        memory: Some(LanesMemory {
            agent_quota: Some(2),
            maxmemory: 10,
            outbox_budget: 5,
            used: 4,
        }),
    };
    let text = same_both_ways(&lanes);
    assert_eq!(
        text,
        concat!(
            r#"{"agents":[{"acl_user":"agent_alice","agent":"alice","socket":"/h/lanes/alice.sock","#,
            r#""streams":[{"key":"alice:ops:inbox","length":2,"pending":1}]}],"#,
            r#""bridge":{"counters":{"dead":1,"delivered":2,"lost":11,"malformed":8,"pending":3,"retried":4,"routed":5,"too_large":9,"trimmed":10,"unrouted":6,"unrouted_stream":7,"waited":12},"#,
            r#""default_agent":null,"routes":[{"agent":"alice","channel":"support","origin":"config","source":"webhook"}],"#,
            r#""sources":[{"error":"Discord refused the bot token","failed_at":"2026-01-01T00:00:00.000Z","name":"discord","up":false},"#,
            r#"{"name":"webhook","up":true}]},"#,
            r#""memory":{"agent_quota":2,"maxmemory":10,"outbox_budget":5,"used":4}}"#
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
    let full = json!({"dead":0,"delivered":0,"lost":0,"malformed":0,"pending":0,"retried":0,"routed":1,
                      "too_large":0,"trimmed":0,"unrouted":0,"unrouted_stream":0,"waited":0});
    let read: Counters = serde_json::from_value(full.clone()).unwrap();
    assert!(matches!(read, Counters::Read(c) if c.routed == 1));
    assert_eq!(serde_json::to_value(&read).unwrap(), full);
    // An older daemon's counters, without the newer ones.
    let old = json!({"dead":0,"delivered":0,"pending":0,"retried":0,"routed":1,"unrouted":0,"unrouted_stream":0});
    let read: Counters = serde_json::from_value(old).unwrap();
    assert!(matches!(read, Counters::Read(c) if c.routed == 1 && c.trimmed == 0));
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

#[test]
fn decoded_answers_write_the_same_bytes() {
    // Answers as the daemon writes them; a client that decodes one and
    // writes it through Value again gets the same bytes.
    let show = concat!(
        r#"[{"cpu_percent":0.10000000149011612,"defined_by":"human:cli","health":"healthy","id":2,"kind":"app","#,
        r#""last_exit_code":null,"log_files":["/h/logs/web-out.log","/h/logs/web-err.log"],"memory_bytes":1339392,"#,
        r#""name":"web","pid":13134,"protected":false,"restarts":0,"spec":{"args":["-c","sleep 9"],"autostart":true,"#,
        r#""command":"sh","cron_restart":"0 3 * * *","cwd":"/w","depends_on":[{"app":"db","condition":"healthy"}],"#,
        r#""env":{"A":"<redacted>"},"exp_backoff_ms":100,"health":{"command":["true"],"interval_ms":200,"retries":3,"#,
        r#""start_period_ms":0,"timeout_ms":2000},"kill_timeout_ms":5000,"kind":"app","log_keep":5,"#,
        r#""log_max_bytes":52428800,"log_timestamps":false,"max_memory_bytes":524288000,"max_restarts":15,"#,
        r#""min_uptime_ms":1000,"name":"web","protected":false,"restart":"on-failure","restart_delay_ms":0,"#,
        r#""stop_signal":"SIGTERM","tags":["bots"]},"status":"online","tags":["bots"],"uptime_ms":379},"#,
        r#"{"cpu_percent":null,"defined_by":"system:lanes","id":3,"kind":"system","last_exit_code":0,"#,
        r#""memory_bytes":null,"name":"db","pid":null,"protected":true,"restarts":2,"status":"stopped","tags":[],"#,
        r#""uptime_ms":null}]"#
    );
    let apps: Vec<AppInfo> = serde_json::from_str(show).unwrap();
    assert_eq!(serde_json::to_value(&apps).unwrap().to_string(), show);
    let events = concat!(
        r#"[{"actor":"system:health","app":"web","app_id":2,"at":"2026-01-01T00:00:00.000Z","detail":"x","#,
        r#""kind":"unhealthy","seq":2},{"actor":"human:cli","app":"web","app_id":2,"#,
        r#""at":"2026-01-01T00:00:00.001Z","detail":"","kind":"reloaded","seq":3}]"#
    );
    let ev: Vec<EventRecord> = serde_json::from_str(events).unwrap();
    assert_eq!(serde_json::to_value(&ev).unwrap().to_string(), events);
    let audit = concat!(
        r#"[{"actor":"ai:bot","apps":["web"],"at":"2026-01-01T00:00:00.000Z","message":"no","op":"delete","#,
        r#""outcome":"E_POLICY_DENIED","seq":1,"socket":"daemon"},{"actor":"human:cli","apps":[],"#,
        r#""at":"2026-01-01T00:00:00.000Z","op":"save","outcome":"ok","seq":2,"socket":"daemon"}]"#
    );
    let rows: Vec<AuditRecord> = serde_json::from_str(audit).unwrap();
    assert_eq!(serde_json::to_value(&rows).unwrap().to_string(), audit);
}
