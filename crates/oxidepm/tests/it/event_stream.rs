//! The event stream: `subscribe` on both sockets and `events --follow`,
//! under the caller's read scope, with bounded buffering and explicit
//! `missed` markers.

use crate::harness::{alive, bin, kill, read, Env, Raw};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Subscribes on a raw connection and waits for the `subscribed` record.
fn subscribe(env: &Env, socket: &str, req: Value) -> Raw {
    let mut raw = env.raw(socket);
    raw.send(&req.to_string());
    let head = raw.recv().expect("an answer to subscribe");
    assert!(head["stream"]["subscribed"].is_object(), "{head}");
    raw
}

/// The highest event sequence number recorded so far (0 for none).
fn last_seq(env: &Env) -> u64 {
    let v = env.request(json!({"op": "events", "limit": 1}));
    v.as_array()
        .unwrap()
        .last()
        .map_or(0, |e| e["seq"].as_u64().unwrap())
}

/// Every event recorded after `after`, oldest first.
fn recorded_after(env: &Env, after: u64) -> Vec<Value> {
    let v = env.request(json!({"op": "events", "limit": 100000}));
    v.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > after)
        .cloned()
        .collect()
}

/// What a stream delivered: events, and the sum of its `missed` markers.
#[derive(Default)]
struct Got {
    events: Vec<Value>,
    missed: u64,
    refusals: usize,
}

impl Got {
    /// Reads records until `done` holds of what was read.
    fn read_until(&mut self, raw: &mut Raw, done: impl Fn(&Got) -> bool) {
        while !done(self) {
            let r = raw.recv().expect("the stream goes on");
            let item = &r["stream"];
            if let Some(n) = item["missed"].as_u64() {
                self.missed += n;
            } else if item["event"].is_object() {
                self.events.push(item["event"].clone());
            } else if item["refusal"].is_object() {
                self.refusals += 1;
            } else {
                panic!("unexpected record {r}");
            }
        }
    }
}

fn kinds_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_follower_sees_start_stop_crash_and_restart_in_order_with_their_actors() {
    let env = Env::new();
    env.ok(&["ping"]);
    let before = last_seq(&env);
    let mut raw = subscribe(&env, "daemon.sock", json!({"id": 3, "op": "subscribe"}));
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    env.ok(&["stop", "web"]);
    env.ok(&["start", "web"]);
    let pid = env.pid("web");
    kill(pid, libc::SIGKILL);
    env.wait(20, "web to be back after its crash", || {
        let a = env.daemon_app("web");
        a["status"] == "online" && a["pid"].as_u64().is_some_and(|p| p as u32 != pid)
    });
    env.ok(&["restart", "web"]);
    env.ok(&["stop", "web"]);
    let recorded = recorded_after(&env, before);
    let mut got = Got::default();
    got.read_until(&mut raw, |g| g.events.len() >= recorded.len());
    assert_eq!(got.missed, 0);
    let key = |e: &Value| (e["seq"].clone(), e["kind"].clone(), e["actor"].clone());
    assert_eq!(
        got.events.iter().map(key).collect::<Vec<_>>(),
        recorded.iter().map(key).collect::<Vec<_>>(),
        "the stream is what `events` records, in order"
    );
    let kinds = kinds_of(&got.events);
    for k in ["defined", "started", "stopped", "exited", "restarted"] {
        assert!(kinds.contains(&k.to_string()), "no {k} in {kinds:?}");
    }
    // The person's requests carry the person; the crash's restart does not.
    let by = |kind: &str| -> Vec<String> {
        got.events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["actor"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert!(
        by("stopped").iter().all(|a| a.starts_with("human:")),
        "{:?}",
        by("stopped")
    );
    assert!(
        by("exited").iter().any(|a| a.starts_with("system:")),
        "the crash is the system's: {:?}",
        by("exited")
    );
}

#[test]
fn events_follow_prints_json_lines_and_a_closed_pipe_ends_it_quietly() {
    let env = Env::new();
    env.ok(&["ping"]);
    let out = env.path("follow.out");
    let err = env.path("follow.err");
    // `head -n 2` closes the pipe after two records: the follower must end.
    let script = format!(
        "OXIDEPM_HOME={} {} events --follow --json --kind started 2> {} | head -n 2 > {}",
        env.home.display(),
        bin("oxidepm").display(),
        err.display(),
        out.display()
    );
    let mut follower = std::process::Command::new("sh")
        .args(["-c", &script])
        .spawn()
        .unwrap();
    // The follower may not be subscribed yet: start apps until it has
    // printed its two records and ended.
    let mut i = 0;
    let status = env.wait(60, "the follower to end after two records", || {
        if let Some(s) = follower.try_wait().unwrap() {
            return Some(s);
        }
        env.ok(&["start", "--name", &format!("a{i}"), "--", "sleep", "1000"]);
        i += 1;
        None
    });
    assert!(status.success(), "{status:?}: {}", read(&err));
    assert_eq!(read(&err), "", "ended quietly");
    let lines: Vec<Value> = read(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines[0]["subscribed"].is_object(), "{lines:?}");
    assert_eq!(lines[1]["event"]["kind"], "started", "{lines:?}");
}

/// Apps in the crash storm.
const STORM_APPS: usize = 100;

#[test]
fn a_subscriber_sees_every_event_of_a_crash_storm_in_order_or_a_missed_marker() {
    let env = Env::new();
    env.ok(&["ping"]);
    let before = last_seq(&env);
    let mut raw = subscribe(&env, "daemon.sock", json!({"id": 1, "op": "subscribe"}));
    // Read all along, as a live follower does.
    let reader = std::thread::spawn(move || {
        let mut got = Got::default();
        let mut last = 0;
        got.read_until(&mut raw, |g| {
            g.events.last().is_some_and(|e| e["app"] == "sentinel")
        });
        for e in &got.events {
            let seq = e["seq"].as_u64().unwrap();
            assert!(seq > last, "out of order: {seq} after {last}");
            last = seq;
        }
        got
    });
    let mut file = String::new();
    for i in 0..STORM_APPS {
        write!(
            file,
            "[[apps]]\nname = \"crash{i}\"\nscript = \"/bin/sh\"\nargs = [\"-c\", \"exit 3\"]\nrestart_delay = \"0ms\"\nmax_restarts = 2\nmin_uptime = \"60s\"\n\n"
        )
        .unwrap();
    }
    let cfg = env.path("storm.toml");
    std::fs::write(&cfg, file).unwrap();
    env.ok(&["start", cfg.to_str().unwrap()]);
    env.wait(240, "every storm app to be errored", || {
        env.daemon_status()
            .iter()
            .filter(|a| a["status"] == "errored")
            .count()
            == STORM_APPS
    });
    // The last event of all, so the reader knows when to stop.
    env.ok(&["start", "--name", "sentinel", "--", "sleep", "1000"]);
    let got = reader.join().unwrap();
    let recorded = recorded_after(&env, before);
    let streamed: Vec<u64> = got
        .events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let stored: Vec<u64> = recorded
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    // Stored events after the sentinel's first one may follow; count up to it.
    let upto = stored
        .iter()
        .position(|s| Some(s) == streamed.last())
        .expect("the stream's last event is recorded");
    assert_eq!(
        streamed.len() as u64 + got.missed,
        upto as u64 + 1,
        "every event streamed or counted as missed, never a silent gap"
    );
    if got.missed == 0 {
        assert_eq!(streamed, stored[..=upto]);
    }
    let errored = got.events.iter().filter(|e| e["kind"] == "errored").count();
    assert!(
        got.missed > 0 || errored == STORM_APPS,
        "{errored} errored events"
    );
}

/// Apps defined at once to fill a subscriber that does not read.
const FLOOD_APPS: usize = 3000;

#[test]
fn a_subscriber_that_never_reads_gets_a_missed_marker_and_status_keeps_answering() {
    let env = Env::new();
    env.ok(&["ping"]);
    let before = last_seq(&env);
    let mut slow = subscribe(&env, "daemon.sock", json!({"id": 1, "op": "subscribe"}));
    // In files of 500 apps: one request line stays under its 1 MiB cap.
    for part in 0..FLOOD_APPS / 500 {
        let mut file = String::new();
        for i in part * 500..(part + 1) * 500 {
            write!(
                file,
                "[[apps]]\nname = \"idle{i}\"\nscript = \"/bin/true\"\nautostart = false\n\n"
            )
            .unwrap();
        }
        let cfg = env.path(&format!("many{part}.toml"));
        std::fs::write(&cfg, file).unwrap();
        env.ok(&["start", cfg.to_str().unwrap()]);
    }
    // The slow subscriber is not read: the daemon answers everyone else.
    for _ in 0..3 {
        assert_eq!(env.daemon_status().len(), FLOOD_APPS);
    }
    let recorded = recorded_after(&env, before);
    assert!(recorded.len() >= FLOOD_APPS);
    let mut got = Got::default();
    got.read_until(&mut slow, |g| {
        g.events.len() as u64 + g.missed >= recorded.len() as u64
    });
    assert!(
        got.missed > 0,
        "a subscriber that did not read was told what it missed"
    );
    assert_eq!(got.events.len() as u64 + got.missed, recorded.len() as u64);
    // What it did get is in order and is what was recorded.
    let seqs: Vec<u64> = got
        .events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // And it is still subscribed: a new event comes through.
    env.ok(&["start", "idle0"]);
    got.read_until(&mut slow, |g| {
        g.events
            .last()
            .is_some_and(|e| e["app"] == "idle0" && e["kind"] == "started")
    });
}

#[test]
fn an_adapter_subscriber_sees_only_its_grant_and_no_refusals() {
    let env = Env::new();
    env.daemon_toml("[adapters.chat]\ntier = \"control\"\napps = [\"web\"]\n");
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "db", "--", "sleep", "1000"]);
    let mut admin = subscribe(&env, "daemon.sock", json!({"id": 1, "op": "subscribe"}));
    let out = env.path("chat.out");
    let err = env.path("chat.err");
    let refusals = env.path("chat.refusals");
    let cli = bin("oxidepm").display().to_string();
    // Inside the adapter's tree: a follower, then a refused request, then a
    // request to read refusals (refused too).
    let script = format!(
        "{cli} events --follow --json > {out} 2> {err} & \
         while ! grep -q subscribed {out}; do sleep 0.05; done; \
         {cli} stop db; \
         {cli} events --follow --kind refusal > /dev/null 2> {refusals}; \
         sleep 1000",
        out = out.display(),
        err = err.display(),
        refusals = refusals.display(),
    );
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    env.ok(&[
        "start", "--name", "chat", "--kind", "adapter", "--env", &home, "--", "sh", "-c", &script,
    ]);
    env.wait(20, "the adapter's refused refusal subscription", || {
        read(&refusals).contains("E_POLICY_DENIED")
    });
    env.ok(&["stop", "db"]);
    env.ok(&["restart", "web"]);
    env.ok(&["stop", "web"]);
    // The admin sees the adapter's refusal and db's events; then web's last.
    let mut got = Got::default();
    got.read_until(&mut admin, |g| {
        g.events
            .last()
            .is_some_and(|e| e["app"] == "web" && e["kind"] == "stopped")
    });
    assert!(got.refusals >= 1, "the admin sees the refusal");
    assert!(got.events.iter().any(|e| e["app"] == "db"));
    // The restart is a stop and a start: the adapter's follower has seen
    // everything once it has web's last event (the stop that ended it).
    let web = env.events("web");
    let last = web.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(web.last().unwrap()["kind"], "stopped");
    env.wait(20, "the adapter's follower to see web's last stop", || {
        read(&out).lines().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v["event"]["seq"].as_u64() == Some(last))
        })
    });
    let lines: Vec<Value> = read(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines[0]["subscribed"].is_object(), "{lines:?}");
    for l in &lines[1..] {
        assert_eq!(l["event"]["app"], "web", "outside the grant: {l}");
        assert!(
            l.get("refusal").is_none(),
            "a refusal reached the adapter: {l}"
        );
    }
    assert!(lines.len() >= 3, "web's restart and stop: {lines:?}");
}

#[test]
fn a_malformed_subscribe_gets_a_clear_error_and_the_connection_goes_on() {
    let env = Env::new();
    env.ok(&["ping"]);
    let mut raw = env.raw("daemon.sock");
    let r = raw.call(json!({"id": 1, "op": "subscribe", "kinds": ["nope"]}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"nope\"") && msg.contains("started"), "{msg}");
    let r = raw.call(json!({"id": 2, "op": "subscribe", "kinds": "started"}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    let r = raw.call(json!({"id": 3, "op": "subscribe", "target": "ghost"}));
    assert_eq!(r["error"]["code"], "E_NOT_FOUND", "{r}");
    let r = raw.call(json!({"id": 4, "op": "ping"}));
    assert_eq!(r["ok"], true, "{r}");
    // An AI on agent.sock may not read refusals.
    let mut ai = env.raw("agent.sock");
    let r = ai.call(json!({"id": 5, "op": "subscribe", "kinds": ["refusal"]}));
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
}

#[test]
fn one_peer_holds_a_bounded_number_of_subscriptions_and_a_closed_one_is_given_back() {
    let env = Env::new();
    env.ok(&["ping"]);
    let req = json!({"id": 1, "op": "subscribe"});
    let mut held: Vec<Raw> = (0..4)
        .map(|_| subscribe(&env, "daemon.sock", req.clone()))
        .collect();
    let mut extra = env.raw("daemon.sock");
    let r = extra.call(req.clone());
    assert_eq!(r["error"]["code"], "E_UNAVAILABLE", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("close one"),
        "{r}"
    );
    // The refused one is still a working connection.
    assert_eq!(extra.call(json!({"id": 2, "op": "ping"}))["ok"], true);
    // A subscriber that hangs up gives its place back.
    let gone = held.pop().unwrap();
    drop(gone);
    env.wait(20, "the closed subscription's place", || {
        let mut again = env.raw("daemon.sock");
        again.send(&req.to_string());
        again
            .recv()
            .is_some_and(|r| r["stream"]["subscribed"].is_object())
    });
    // Those still held keep streaming.
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    for raw in &mut held {
        let mut got = Got::default();
        got.read_until(raw, |g| g.events.iter().any(|e| e["app"] == "web"));
    }
}

#[test]
fn a_subscriber_to_health_sees_an_app_turn_healthy_then_unhealthy() {
    let env = Env::new();
    env.ok(&["ping"]);
    let flag = env.path("up");
    let cfg = env.path("apps.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[apps]]\nname = \"web\"\nscript = \"sleep\"\nargs = [\"1000\"]\n[apps.health]\ncommand = [\"test\", \"-e\", \"{}\"]\ninterval = \"200ms\"\nretries = 100\nstart_period = \"0s\"\n",
            flag.display()
        ),
    )
    .unwrap();
    let mut raw = subscribe(
        &env,
        "daemon.sock",
        json!({"id": 1, "op": "subscribe", "kinds": ["health"]}),
    );
    env.ok(&["start", cfg.to_str().unwrap()]);
    let mut got = Got::default();
    got.read_until(&mut raw, |g| !g.events.is_empty());
    assert!(
        got.events[0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("unhealthy"),
        "{:?}",
        got.events
    );
    std::fs::write(&flag, "").unwrap();
    got.read_until(&mut raw, |g| g.events.len() >= 2);
    std::fs::remove_file(&flag).unwrap();
    got.read_until(&mut raw, |g| g.events.len() >= 3);
    let details: Vec<&str> = got
        .events
        .iter()
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(details[1], "healthy", "{details:?}");
    assert!(details[2].starts_with("unhealthy"), "{details:?}");
    for e in &got.events {
        assert_eq!(
            (e["kind"].as_str(), e["actor"].as_str()),
            (Some("health"), Some("system:health"))
        );
    }
    // Only changes are events: the checks in between are not.
    assert_eq!(
        env.daemon_events("web")
            .iter()
            .filter(|e| e["kind"] == "health")
            .count(),
        3
    );
}

/// An adapter follows the events of the apps its grant holds; daemon.toml
/// then takes `web` out of its grant and is reloaded. Its open
/// subscription must not go on streaming `web`'s events under the grant it
/// was opened with: the stream ends, and a new one gets the new grant.
#[test]
fn a_grant_narrowed_by_a_config_reload_ends_open_subscriptions() {
    let env = Env::new();
    env.daemon_toml(
        "[lanes]\nbackend = \"off\"\n[adapters.chat]\ntier = \"read\"\napps = [\"web\", \"chat\"]\n",
    );
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let oxpm = crate::harness::bin("oxidepm").display().to_string();
    env.ok(&[
        "start",
        "--name",
        "chat",
        "--kind",
        "adapter",
        "--restart",
        "never",
        "--",
        &oxpm,
        "events",
        "--follow",
        "--json",
    ]);
    let chat = env.pid("chat");
    let out = env.home.join("logs/chat-out.log");
    let saw = |pid: u32| crate::harness::read(&out).contains(&format!("pid {pid}\""));
    // The stream is open (an event before it was would never show) and
    // shows web, in the grant.
    env.wait(60, "chat's subscription in place", || {
        crate::harness::read(&out).contains("{\"subscribed\":")
    });
    env.ok(&["restart", "web"]);
    let first = env.pid("web");
    env.wait(60, "web's restart streamed", || saw(first));

    // A reload that changes no grant leaves the stream open.
    env.ok(&["reload-daemon-config"]);
    env.ok(&["restart", "web"]);
    let kept = env.pid("web");
    env.wait(60, "web's restart still streamed", || saw(kept));

    env.daemon_toml(
        "[lanes]\nbackend = \"off\"\n[adapters.chat]\ntier = \"read\"\napps = [\"chat\"]\n",
    );
    env.ok(&["reload-daemon-config"]);
    env.ok(&["restart", "web"]);
    let second = env.pid("web");
    env.wait(
        60,
        "web's second restart streamed, or the stream ended",
        || saw(second) || !alive(chat),
    );
    let streamed = saw(second);
    if alive(chat) {
        crate::harness::kill(chat, libc::SIGKILL);
    }
    assert!(!streamed, "web's events still streamed outside the grant");
}
