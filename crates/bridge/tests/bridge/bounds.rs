//! What one agent's outbox can do to the bridge, and what it cannot: huge
//! entries, poisoned entries, a backlog while the sink is down. Each test
//! writes to Redis directly as the agent (no proxy in front to limit it),
//! runs the real bridge, and asserts on what the bridge delivered,
//! dead-lettered, kept and trimmed, and on its memory.

use super::agent_says;
use super::harness::*;
use nix::sys::signal::Signal;
use oxidepm_testkit::Value as Resp;
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// The bridge's peak RSS (VmHWM) from `/proc`, in bytes.
fn peak_rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    kb * 1024
}

/// Length of a stream.
fn xlen(admin: &mut oxidepm_testkit::Client, key: &str) -> i64 {
    match admin.cmd(&["XLEN", key]) {
        Resp::Int(n) => n,
        other => panic!("XLEN {key}: {other:?}"),
    }
}

/// The raw entries of a stream: `(id, [(field, value)])` as bytes.
type RawEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

fn raw_entries(admin: &mut oxidepm_testkit::Client, key: &str) -> Vec<RawEntry> {
    let Resp::Array(list) = admin.cmd(&["XRANGE", key, "-", "+"]) else {
        panic!("XRANGE {key}")
    };
    list.into_iter()
        .map(|e| {
            let Resp::Array(parts) = e else {
                panic!("entry {e:?}")
            };
            let id = parts[0].text().unwrap();
            let Resp::Array(f) = &parts[1] else {
                panic!("fields {parts:?}")
            };
            let bytes = |v: &Resp| match v {
                Resp::Bulk(b) => b.clone(),
                other => panic!("{other:?}"),
            };
            let fields = f.chunks(2).map(|c| (bytes(&c[0]), bytes(&c[1]))).collect();
            (id, fields)
        })
        .collect()
}

/// The value of field `k` of a raw entry, as text.
fn raw_field(e: &RawEntry, k: &str) -> Option<String> {
    e.1.iter()
        .find(|(n, _)| n == k.as_bytes())
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// The texts the sink was given for `agent`.
fn texts_for(sink: &Sink, agent: &str) -> HashSet<String> {
    sink.bodies()
        .iter()
        .filter(|b| b["agent"] == agent)
        .filter_map(|b| b["text"].as_str().map(String::from))
        .collect()
}

/// The bridge's peak memory while it is handed 8 entries of 32 MiB (and
/// one of 1.8 MiB made of fields each under the limit): what it may hold
/// for an outbox (2 MiB, plus one entry of up to 1 MiB) plus the process
/// itself (about 8 MiB), with room to spare; it used to take 1.2 GiB.
const PEAK_BUDGET: usize = 32 * MIB;

#[test]
fn huge_entries_are_dead_lettered_unread_and_others_still_delivered() {
    let redis = Redis::start(&["alice", "bob"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let cfg = redis.config_path();
    redis.write_config(
        &cfg,
        json!({"agents": ["alice", "bob"], "webhook": {"deliver": {"*": sink.url()}}}),
    );
    let outbox = "alice:webhook:outbox";
    let mut alice = redis.agent("alice");
    let big = vec![b'x'; 32 * MIB];
    for i in 0..8 {
        let text = format!("huge {i}");
        let r = alice.cmd(&[
            b"XADD".as_slice(),
            outbox.as_bytes(),
            b"*",
            b"channel",
            b"c",
            b"text",
            text.as_bytes(),
            b"blob",
            &big,
        ]);
        assert!(r.text().is_some(), "XADD gave {r:?}");
    }
    drop(big);
    // Several fields, each under the limit, over it together.
    let part = "y".repeat(600 * 1024);
    agent_says(
        &redis,
        "alice",
        "webhook",
        &[("a", &part), ("b", &part), ("c", &part)],
    );
    agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "c"), ("text", "alice small")],
    );

    let log = redis.dir.path().join("bridge.log");
    let bridge = BridgeProcess::spawn(&cfg, &log);
    // Bob keeps talking while the bridge deals with alice's entries.
    for i in 0..20 {
        let text = format!("bob {i}");
        agent_says(
            &redis,
            "bob",
            "webhook",
            &[("channel", "c"), ("text", &text)],
        );
    }
    let want: HashSet<String> = (0..20).map(|i| format!("bob {i}")).collect();
    eventually(WAIT, "bob's messages at the sink", || {
        want.is_subset(&texts_for(&sink, "bob")).then_some(())
    });
    let mut admin = redis.admin();
    let dead_key = "alice:webhook:outbox:dead";
    let dead = eventually(WAIT, "alice's huge entries dead-lettered", || {
        let d = raw_entries(&mut admin, dead_key);
        (d.len() == 9).then_some(d)
    });
    eventually(WAIT, "alice's small entry at the sink", || {
        texts_for(&sink, "alice")
            .contains("alice small")
            .then_some(())
    });
    for (i, d) in dead.iter().enumerate() {
        let error = raw_field(d, "error").unwrap();
        assert!(
            error.contains("larger than outbox.max_entry_bytes"),
            "{error}"
        );
        let bytes: usize = raw_field(d, "bytes").unwrap().parse().unwrap();
        assert!(bytes > MIB, "{bytes}");
        assert_eq!(raw_field(d, "text"), None, "fields are not copied");
        if i < 8 {
            assert!(bytes > 32 * MIB, "{bytes}");
        }
    }
    // Nothing of alice's reached the sink but her small entry.
    assert_eq!(texts_for(&sink, "alice").len(), 1);
    eventually(WAIT, "every entry acknowledged", || {
        (pending(&mut admin, outbox) == 0).then_some(())
    });
    let s = stats(&mut admin);
    assert_eq!(s.get("too_large"), Some(&9), "{s:?}");
    assert_eq!(s.get("dead"), Some(&9), "{s:?}");
    // What is done is trimmed: the huge entries leave Redis too.
    eventually(WAIT, "alice's outbox trimmed", || {
        (xlen(&mut admin, outbox) < 10).then_some(())
    });
    let peak = peak_rss(bridge.child.id());
    assert!(
        peak < PEAK_BUDGET,
        "the bridge peaked at {} MiB (budget {} MiB)\n{}",
        peak / MIB,
        PEAK_BUDGET / MIB,
        bridge.log()
    );
}

/// XADD with raw bytes, as the agent.
fn agent_says_raw(redis: &Redis, agent: &str, fields: &[(&[u8], &[u8])]) -> String {
    let key = format!("{agent}:webhook:outbox");
    let mut cmd: Vec<&[u8]> = vec![b"XADD", key.as_bytes(), b"*"];
    for (k, v) in fields {
        cmd.push(k);
        cmd.push(v);
    }
    let r = redis.agent(agent).cmd(&cmd);
    r.text().unwrap_or_else(|| panic!("XADD gave {r:?}"))
}

#[test]
fn a_poisoned_entry_is_dead_lettered_and_the_rest_delivered_also_after_a_restart() {
    let redis = Redis::start(&["alice"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let cfg = redis.config_path();
    redis.write_config(
        &cfg,
        json!({"agents": ["alice"], "webhook": {"deliver": {"*": sink.url()}}}),
    );
    let outbox = "alice:webhook:outbox";
    let good = |text: &str| {
        agent_says(
            &redis,
            "alice",
            "webhook",
            &[("channel", "c"), ("text", text)],
        )
    };
    good("one");
    let poison_name = agent_says_raw(
        &redis,
        "alice",
        &[(b"\xff\xfename", b"x"), (b"text", b"poison name")],
    );
    good("two");
    // A bridge read these and died before answering for them: they are
    // pending with its consumer, as a restarted bridge finds them.
    let mut bridge_user = redis.bridge();
    let r = bridge_user.cmd(&["XGROUP", "CREATE", outbox, "bridge", "0", "MKSTREAM"]);
    assert_eq!(r, oxidepm_testkit::ok());
    let r = bridge_user.cmd(&words(&format!(
        "XREADGROUP GROUP bridge bridge-1 COUNT 10 STREAMS {outbox} >"
    )));
    assert!(matches!(r, Resp::Array(_)), "{r:?}");
    let mut admin = redis.admin();
    assert_eq!(pending(&mut admin, outbox), 3);
    // And new ones after them.
    let poison_value = agent_says_raw(
        &redis,
        "alice",
        &[(b"channel", b"c"), (b"text", b"\xc3\x28 broken")],
    );
    good("three");

    let log = redis.dir.path().join("bridge.log");
    let first = BridgeProcess::spawn(&cfg, &log);
    let want: HashSet<String> = ["one", "two", "three"].map(String::from).into();
    eventually(WAIT, "the good entries at the sink", || {
        want.is_subset(&texts_for(&sink, "alice")).then_some(())
    });
    let dead_key = "alice:webhook:outbox:dead";
    let dead = eventually(WAIT, "two dead letters", || {
        let d = raw_entries(&mut admin, dead_key);
        (d.len() == 2).then_some(d)
    });
    let by_id = |id: &str| {
        dead.iter()
            .find(|d| raw_field(d, "original_id").as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no dead letter for {id}: {dead:?}"))
    };
    let d = by_id(&poison_name);
    assert!(
        raw_field(d, "error").unwrap().contains("is not UTF-8"),
        "{d:?}"
    );
    // Kept as it was written, for whoever looks into it.
    assert!(
        d.1.iter().any(|(k, v)| k == b"\xff\xfename" && v == b"x"),
        "{d:?}"
    );
    let d = by_id(&poison_value);
    assert!(d
        .1
        .iter()
        .any(|(k, v)| k == b"text" && v == b"\xc3\x28 broken"));
    eventually(WAIT, "every entry acknowledged", || {
        (pending(&mut admin, outbox) == 0).then_some(())
    });

    // Killed, and poisoned again while it is down.
    first.signal(Signal::SIGKILL);
    drop(first);
    agent_says_raw(&redis, "alice", &[(b"\x80", b"\x80")]);
    good("four");
    let second = BridgeProcess::spawn(&cfg, &log);
    eventually(WAIT, "the entry after the poison, after a restart", || {
        texts_for(&sink, "alice").contains("four").then_some(())
    });
    eventually(WAIT, "a third dead letter", || {
        (raw_entries(&mut admin, dead_key).len() == 3).then_some(())
    });
    eventually(WAIT, "every entry acknowledged", || {
        (pending(&mut admin, outbox) == 0).then_some(())
    });
    assert_eq!(stats(&mut admin).get("malformed"), Some(&3));
    // The good ones were delivered, each as itself.
    let bodies = sink.bodies();
    assert!(bodies.iter().all(|b| b["agent"] == "alice"));
    let texts: Vec<&str> = bodies.iter().filter_map(|b| b["text"].as_str()).collect();
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("poison") || t.contains("broken")),
        "{texts:?}"
    );
    drop(second);
}

#[test]
fn while_the_sink_is_down_nothing_is_trimmed_then_all_delivered_and_trimmed() {
    let redis = Redis::start(&["alice"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    // Nothing listens on this port: the target is down.
    let down = format!("http://127.0.0.1:{}/out", free_port());
    let cfg = redis.config_path();
    let members = |url: &str| {
        json!({
            "agents": ["alice"],
            "webhook": {"deliver": {"*": url}},
            "retry": {"attempts": 1000, "base_ms": 5, "max_ms": 20},
        })
    };
    redis.write_config(&cfg, members(&down));
    const N: usize = 3000;
    let outbox = "alice:webhook:outbox";
    let mut alice = redis.agent("alice");
    for i in 0..N {
        let text = format!("m{i}");
        alice.send(&["XADD", outbox, "*", "channel", "c", "text", &text]);
    }
    for _ in 0..N {
        assert!(alice.read().text().is_some());
    }
    let tb = TestBridge::start(&cfg);
    let mut admin = redis.admin();
    eventually(WAIT, "deliveries failing", || {
        (stats(&mut admin).get("retried").copied().unwrap_or(0) >= 20).then_some(())
    });
    assert_eq!(xlen(&mut admin, outbox), N as i64, "trimmed while down");
    assert!(pending(&mut admin, outbox) > 0);

    // The target comes back.
    redis.write_config(&cfg, members(&sink.url()));
    tb.bridge.reload().unwrap();
    let ids: HashSet<String> = entries(&mut admin, outbox)
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(ids.len(), N);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        // Length first, deliveries second: whatever was trimmed by then
        // had been delivered by then.
        let len = xlen(&mut admin, outbox) as usize;
        let seen: HashSet<String> = sink
            .bodies()
            .iter()
            .filter_map(|b| b["id"].as_str().map(String::from))
            .collect();
        let delivered = ids.intersection(&seen).count();
        assert!(
            len + delivered >= N,
            "{len} entries left and {delivered} delivered: something undelivered was trimmed"
        );
        if delivered == N {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{delivered} of {N} delivered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eventually(WAIT, "the outbox trimmed", || {
        (xlen(&mut admin, outbox) < N as i64 / 2).then_some(())
    });
    let s = stats(&mut admin);
    assert!(s.get("trimmed").copied().unwrap_or(0) > 0, "{s:?}");
    assert_eq!(s.get("dead"), None, "{s:?}");
    assert_eq!(entries(&mut admin, "alice:webhook:outbox:dead").len(), 0);
}

#[test]
fn entries_near_the_limit_are_read_a_budget_at_a_time_and_delivered_in_order() {
    let redis = Redis::start(&["alice"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let cfg = redis.config_path();
    redis.write_config(
        &cfg,
        json!({"agents": ["alice"], "webhook": {"deliver": {"*": sink.url()}}}),
    );
    // 40 entries of 900 KiB: each under the limit, together 18 times the
    // outbox's budget of 2 MiB.
    const N: usize = 40;
    let pad = "z".repeat(900 * 1024);
    let ids: Vec<String> = (0..N)
        .map(|i| {
            let text = format!("big {i}");
            agent_says(
                &redis,
                "alice",
                "webhook",
                &[("channel", "c"), ("text", &text), ("pad", &pad)],
            )
        })
        .collect();
    let log = redis.dir.path().join("bridge.log");
    let bridge = BridgeProcess::spawn(&cfg, &log);
    let got = eventually(WAIT, "every entry at the sink", || {
        let b = sink.bodies();
        (b.len() >= N).then_some(b)
    });
    let order: Vec<&str> = got.iter().filter_map(|b| b["id"].as_str()).collect();
    assert_eq!(order, ids, "delivered once each, in order");
    assert!(got
        .iter()
        .all(|b| b["fields"]["pad"].as_str() == Some(&pad)));
    let mut admin = redis.admin();
    assert_eq!(entries(&mut admin, "alice:webhook:outbox:dead").len(), 0);
    let peak = peak_rss(bridge.child.id());
    assert!(
        peak < PEAK_BUDGET,
        "the bridge peaked at {} MiB",
        peak / MIB
    );
}

#[test]
fn one_agents_backlog_does_not_hold_back_another() {
    let redis = Redis::start(&["alice", "bob"]);
    // Alice's channel goes to a slow sink, bob's to a quick one.
    let slow = Sink::start(SinkMode::Ok, Duration::from_millis(20));
    let quick = Sink::start(SinkMode::Ok, Duration::ZERO);
    let cfg = redis.config_path();
    redis.write_config(
        &cfg,
        json!({"agents": ["alice", "bob"],
               "webhook": {"deliver": {"slow": slow.url(), "quick": quick.url()}}}),
    );
    const BACKLOG: usize = 500;
    let mut alice = redis.agent("alice");
    for i in 0..BACKLOG {
        let text = format!("a{i}");
        alice.send(&words(&format!(
            "XADD alice:webhook:outbox * channel slow text {text}"
        )));
    }
    for _ in 0..BACKLOG {
        assert!(alice.read().text().is_some());
    }
    let _tb = TestBridge::start(&cfg);
    eventually(WAIT, "alice's backlog moving", || {
        (!slow.bodies().is_empty()).then_some(())
    });
    agent_says(
        &redis,
        "bob",
        "webhook",
        &[("channel", "quick"), ("text", "b")],
    );
    eventually(WAIT, "bob's message", || {
        (!quick.bodies().is_empty()).then_some(())
    });
    let done = slow.bodies().len();
    assert!(
        done < BACKLOG,
        "bob's message waited for alice's backlog ({done} of {BACKLOG} delivered first)"
    );
}

/// What an agent can make the bridge keep in its dead-letter stream is
/// bounded in bytes per letter: a refused entry just under the delivery
/// limit, and a malformed one, are cut to `dead_entry_bytes` and say how
/// large they were.
#[test]
fn a_dead_letter_keeps_a_bounded_part_of_a_large_entry() {
    let redis = Redis::start(&["alice"]);
    let sink = Sink::start(SinkMode::Always(400), Duration::ZERO);
    let cfg = redis.config_path();
    redis.write_config(
        &cfg,
        json!({"agents": ["alice"], "webhook": {"deliver": {"*": sink.url()}},
               "outbox": {"dead_entry_bytes": 1000}}),
    );
    let big = "é".repeat(300 * 1024); // 600 KiB of text, a 2-byte character
    let refused = agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "c"), ("text", &big), ("after", "x")],
    );
    let mut raw = vec![0x80u8; 600 * 1024];
    raw[0] = b'!';
    let malformed = agent_says_raw(&redis, "alice", &[(b"channel", b"c"), (b"text", &raw)]);
    let log = redis.dir.path().join("bridge.log");
    let bridge = BridgeProcess::spawn(&cfg, &log);
    let mut admin = redis.admin();
    let dead = eventually(WAIT, "two dead letters", || {
        let d = raw_entries(&mut admin, "alice:webhook:outbox:dead");
        (d.len() == 2).then_some(d)
    });
    for (id, written) in [(&refused, 600 * 1024 + 18), (&malformed, 600 * 1024 + 12)] {
        let d = dead
            .iter()
            .find(|d| raw_field(d, "original_id").as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("no dead letter for {id}"));
        let total: usize = d.1.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(total < 1000 + 300, "{total} bytes kept");
        assert_eq!(raw_field(d, "truncated"), Some(written.to_string()));
        // What is kept is the start of the entry, in order.
        assert_eq!(d.1.iter().filter(|(k, _)| k == b"channel").count(), 1);
        assert!(!d.1.iter().any(|(k, _)| k == b"after"));
    }
    let text = dead
        .iter()
        .find(|d| raw_field(d, "original_id").as_deref() == Some(refused.as_str()))
        .and_then(|d| raw_field(d, "text"))
        .unwrap();
    // Cut at a character boundary.
    assert!(text.chars().all(|c| c == 'é'), "{text:?}");
    drop(bridge);
}
