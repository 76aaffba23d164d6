//! Nothing a client does grows state.db or daemon.log for ever: refusals
//! beyond the first few of a kind are counted into one summary row,
//! events and audit rows are pruned by count, daemon.log is rotated.

use crate::harness::*;
use oxidepm_testkit::words;
use serde_json::{json, Value};
use std::time::Instant;

/// Audit rows of `actor`, as the CLI prints them with --json.
fn audit_of(env: &Env, actor: &str) -> Vec<Value> {
    env.json(&["audit", "--actor", actor, "--limit", "100000"])
        .as_array()
        .unwrap()
        .clone()
}

/// The count of a summary row ("… and 19,990 more refusals …"), if it is one.
fn summarised(row: &Value) -> Option<u64> {
    let m = row["message"].as_str()?.strip_prefix("… and ")?;
    let n = m.split(' ').next()?;
    n.replace(',', "").parse().ok()
}

#[test]
fn a_refusal_flood_is_counted_into_one_row_and_the_person_is_still_answered() {
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 1000")));
    let db = env.pid("db");
    let started = Instant::now();
    // An AI asking to stop a protected app in a loop, from ten clients at
    // once, each reconnecting half-way. Past the written few, every
    // refusal waits before its answer, so a client gets far fewer through
    // than it would at full speed: that is the point of the flood penalty.
    let (connections, each) = (10, 300);
    let socket = env.home.join("daemon.sock");
    let flooders: Vec<_> = (0..connections)
        .map(|c| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut raw = Raw::connect(&socket);
                for i in 0..each {
                    if i == each / 2 {
                        raw = Raw::connect(&socket);
                    }
                    let r = raw.call(json!({
                        "id": c * each + i, "op": "stop", "target": "db", "claim": "ai:assistant"
                    }));
                    assert_eq!(r["ok"], false, "{r}");
                    assert_eq!(r["error"]["code"], "E_PROTECTED", "{r}");
                }
            })
        })
        .collect();
    // A person is answered in the middle of it, and db is untouched.
    while flooders.iter().any(|t| !t.is_finished()) {
        assert_eq!(env.pid("db"), db);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for t in flooders {
        t.join().unwrap();
    }
    let flood = (connections * each) as u64;
    // Windows of 60 s: the flood spans at most this many of them.
    let windows = started.elapsed().as_secs() / 60 + 2;

    let rows = audit_of(&env, "ai:assistant");
    assert!(
        rows.len() as u64 <= windows * 11,
        "{} rows for {flood} refusals",
        rows.len()
    );
    assert!(rows
        .iter()
        .all(|r| r["op"] == "stop" && r["outcome"] == "E_PROTECTED"));

    // The window still open is written when the daemon stops.
    env.ok(&["kill"]);
    env.ok(&["ping"]);
    let rows = audit_of(&env, "ai:assistant");
    assert!(rows.len() as u64 <= windows * 11, "{}", rows.len());
    let written = rows.iter().filter(|r| summarised(r).is_none()).count() as u64;
    let counted: u64 = rows.iter().filter_map(summarised).sum();
    assert!(counted > 0, "no summary row: {rows:?}");
    assert_eq!(
        written + counted,
        flood,
        "every refusal is written or counted"
    );

    // `oxidepm audit` shows the count.
    let table = env.ok(&["audit", "--actor", "ai:assistant"]);
    assert!(table.contains("more refusals of the same kind"), "{table}");
}

#[test]
fn events_and_audit_rows_beyond_the_configured_counts_are_pruned() {
    let env = Env::new();
    env.daemon_toml(
        "[retention]\naudit_max_rows = 30\nevents_max_rows = 20\nprune_interval_secs = 1\n",
    );
    env.ok(&["start", "--name", "w", "--", "sleep", "1000"]);
    let mut raw = env.raw("daemon.sock");
    for i in 0..40 {
        let r = raw.call(json!({"id": i, "op": "restart", "target": "w"}));
        assert_eq!(r["ok"], true, "{r}");
    }
    let last = raw.call(json!({"id": 99, "op": "stop", "target": "w"}));
    assert_eq!(last["ok"], true, "{last}");
    let rows = |op: &str| -> Vec<Value> {
        env.request(json!({"id": 1, "op": op, "limit": 100000}))
            .as_array()
            .unwrap()
            .clone()
    };
    env.wait(30, "the prune", || {
        rows("audit").len() <= 30 && rows("events").len() <= 20
    });
    let audit = rows("audit");
    let events = rows("events");
    // The newest stay, with no gap: only the oldest went.
    assert_eq!(audit.last().unwrap()["op"], "stop");
    assert_eq!(events.last().unwrap()["kind"], "stopped");
    for list in [&audit, &events] {
        let seqs: Vec<u64> = list.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        assert!(seqs[0] > 1, "the oldest rows are gone: {seqs:?}");
    }
}

/// A crash loop records a run at every restart: past `runs_max_rows` the
/// oldest ended ones go, and a running app's run stays.
#[test]
fn runs_of_a_crash_loop_are_pruned_to_the_configured_count() {
    let env = Env::new();
    env.daemon_toml(
        "[retention]\nruns_max_rows = 5\nevents_max_rows = 3\nprune_interval_secs = 1\n",
    );
    env.ok(&[
        "start",
        "--name",
        "crash",
        "--restart-delay",
        "0ms",
        "--min-uptime",
        "0ms",
        "--max-restarts",
        "100000",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    env.wait(60, "30 restarts", || {
        env.daemon_app("crash")["restarts"].as_u64() >= Some(30)
    });
    env.ok(&["stop", "crash"]);
    // A pruning that ran after the stop: the events it cut down to three
    // hold the marker's start, recorded after the stop (runs are pruned
    // first in each round).
    env.ok(&["start", "--name", "marker", "--", "sleep", "100000"]);
    env.wait(30, "a pruning after the stop", || {
        let events = env.request(json!({"id": 1, "op": "events", "limit": 100}));
        let events = events.as_array().cloned().unwrap_or_default();
        events.len() <= 3 && events.iter().any(|e| e["app"] == "marker")
    });
    // Read once the daemon, which holds state.db alone, is gone (killed:
    // the marker's run is still its current one).
    env.kill_daemon();
    let db = rusqlite::Connection::open(env.home.join("state.db")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert!(count("SELECT max(id) FROM runs") > 30);
    assert!(
        count("SELECT count(*) FROM runs") <= 7,
        "{} runs",
        count("SELECT count(*) FROM runs")
    );
    // The running app's run is there (recovery finds its process by it).
    let current = count("SELECT run_id FROM apps WHERE name = 'marker'");
    assert_eq!(
        count(&format!("SELECT count(*) FROM runs WHERE id = {current}")),
        1
    );
}

#[test]
fn daemon_log_is_rotated_by_size_and_a_planted_link_is_never_followed() {
    let env = Env::new();
    env.daemon_toml("log_level = \"debug\"\ndaemon_log_max_bytes = 4096\ndaemon_log_keep = 2\n");
    // A link where a rotated file will go, pointing at a file of someone's.
    let precious = env.path("precious");
    std::fs::write(&precious, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&precious, env.home.join("daemon.log.1")).unwrap();
    env.daemon_pid();
    let mut raw = env.raw("daemon.sock");
    // Every read is a debug line: far more than three files' worth.
    for i in 0..400 {
        let r = raw.call(json!({"id": i, "op": "status"}));
        assert_eq!(r["ok"], true, "{r}");
    }
    env.daemon_pid();
    assert_eq!(read(&precious), "keep me\n");
    let mut total = 0;
    for name in ["daemon.log", "daemon.log.1", "daemon.log.2"] {
        let path = env.home.join(name);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "{name}");
        // A record is never split, so a file ends within one line of the size.
        assert!(meta.len() <= 4096 + 512, "{name}: {} bytes", meta.len());
        total += meta.len();
    }
    assert!(!env.home.join("daemon.log.3").exists());
    assert!(total <= 3 * (4096 + 512), "{total}");
    // The newest records are in daemon.log (the ping above, the last
    // statuses there or in the file before it).
    let newest = read(&env.home.join("daemon.log"));
    assert!(newest.contains("by human:cli"), "{newest}");
    let before = read(&env.home.join("daemon.log.1"));
    assert!((before + &newest).contains("status by human:cli"));
}
