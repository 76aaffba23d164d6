//! Layer 3, bounds: Redis's `maxmemory`, the outbox families an agent may
//! append to, and the lane proxy's limits, as daemon.toml sets them.
//! Real daemon, real redis-server, real proxy.

use crate::harness::{read, strs, Env};
use crate::lanes::{conn, run, start_agents};
use oxidepm_lanes::Secret;
use oxidepm_testkit::{free_port, http, words, Sink, SinkMode};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A direct connection to the private Redis as `user`.
fn as_user(env: &Env, user: &str) -> redis::Connection {
    let mut c = conn(&env.home.join("redis/redis.sock"));
    let pw = Secret::read(&env.home.join("secrets").join(user)).unwrap();
    redis::cmd("AUTH")
        .arg(user)
        .arg(pw.expose())
        .query::<()>(&mut c)
        .unwrap();
    c
}

fn config_get(admin: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(key)
        .query(admin)
        .unwrap();
    v[1].clone()
}

/// Sends `args` on a raw connection and reads the first line of the reply.
fn first_line(s: &UnixStream, args: &[&[u8]]) -> String {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    let mut w = s;
    // The proxy may refuse on the header and close before the rest.
    let _ = w.write_all(&out);
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

#[test]
fn redis_has_a_memory_bound_and_a_writer_past_it_gets_oom_while_others_read() {
    let env = Env::new();
    env.daemon_toml("[lanes]\nmaxmemory = 33554432\nagent_quota = 0\n");
    start_agents(&env, &["alice", "bob"]);
    let mut admin = as_user(&env, "sys");
    assert_eq!(config_get(&mut admin, "maxmemory"), "33554432");
    assert_eq!(config_get(&mut admin, "maxmemory-policy"), "noeviction");
    // Replies a client leaves unread are bounded too: past a quarter of
    // maxmemory, Redis closes the connection holding the most.
    assert_eq!(config_get(&mut admin, "maxmemory-clients"), "25%");
    assert!(read(&env.home.join("redis/redis.conf")).contains("\nmaxmemory 33554432\n"));
    let mut bridge = as_user(&env, "bridge");
    run(
        &mut bridge,
        &["XADD", "bob:webhook:inbox", "*", "text", "for bob"],
    )
    .unwrap();

    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let value = vec![b'v'; 512 << 10];
    let mut written = 0;
    let oom = loop {
        let r: redis::RedisResult<String> = redis::cmd("XADD")
            .arg("alice:webhook:outbox")
            .arg("*")
            .arg("v")
            .arg(&value)
            .query(&mut alice);
        match r {
            Ok(_) => {
                written += 1;
                assert!(written < 128, "maxmemory never refused");
            }
            Err(e) => break e,
        }
    };
    assert_eq!(oom.code(), Some("OOM"), "{oom}");
    // Bob still reads (and acknowledges) his inbox.
    let mut bob = conn(&env.home.join("lanes/bob.sock"));
    let got = run(
        &mut bob,
        &strs(&words(
            "XREADGROUP GROUP bob c1 STREAMS bob:webhook:inbox >",
        )),
    )
    .unwrap();
    assert!(format!("{got:?}").contains("for bob"), "{got:?}");
    let n: i64 = redis::cmd("XLEN")
        .arg("alice:webhook:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, written);
}

#[test]
fn agents_append_only_to_configured_families_and_the_acl_follows_the_config() {
    let env = Env::new();
    let toml = |sources: &str, maxmemory: u64| {
        format!("[lanes]\nsources = [{sources}]\nresponders = [\"ops\"]\nmaxmemory = {maxmemory}\n")
    };
    env.daemon_toml(&toml("\"webhook\"", 64 << 20));
    start_agents(&env, &["alice"]);
    let sock = env.home.join("lanes/alice.sock");
    let mut alice = conn(&sock);
    run(&mut alice, &["XADD", "alice:webhook:outbox", "*", "a", "b"]).unwrap();
    run(&mut alice, &["XADD", "alice:ops:outbox", "*", "a", "b"]).unwrap();
    let e = run(&mut alice, &["XADD", "alice:email:outbox", "*", "a", "b"]).unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
    // Redis's own rule says the same, without the proxy.
    let mut admin = as_user(&env, "sys");
    let rules = format!(
        "{:?}",
        run(&mut admin, &["ACL", "GETUSER", "agent_alice"]).unwrap()
    );
    assert!(rules.contains("alice:webhook:outbox"), "{rules}");
    assert!(
        !rules.contains("email") && !rules.contains("*:outbox"),
        "{rules}"
    );

    // A new daemon with another source adopts Redis and changes the rule
    // live: no restart of Redis, no lost entry.
    let redis_pid = env.pid("oxidepm-redis");
    // Gone for good: its socket refuses and its lock is free (a CLI could
    // otherwise reach the dying one's socket).
    env.kill_daemon();
    env.daemon_toml(&toml("\"webhook\", \"email\"", 48 << 20));
    env.ok(&["ping"]);
    assert_eq!(env.pid("oxidepm-redis"), redis_pid);
    env.wait(20, "the email outbox to take XADD", || {
        let mut c = conn(&sock);
        run(&mut c, &["XADD", "email:outbox", "*", "a", "b"]).is_ok()
    });
    let mut admin = as_user(&env, "sys");
    assert_eq!(
        config_get(&mut admin, "maxmemory"),
        (48u64 << 20).to_string()
    );
    let n: i64 = redis::cmd("XLEN")
        .arg("alice:webhook:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn the_lane_proxy_takes_its_limits_from_daemon_toml() {
    let env = Env::new();
    env.daemon_toml(
        "[lanes]\nmax_connections = 2\nmaxmemory = 67108864\n\
         [lanes.limits]\nmax_bulk = 1024\nmax_command = 4096\n",
    );
    start_agents(&env, &["alice"]);
    let sock = env.home.join("lanes/alice.sock");
    let held: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    for s in &held {
        assert_eq!(first_line(s, &[b"PING"]), "+PONG\r\n");
    }
    let third = UnixStream::connect(&sock).unwrap();
    let refused = first_line(&third, &[b"PING"]);
    assert!(
        refused.starts_with("-OXIDEPM connections: agent 'alice' has 2 connections open"),
        "{refused}"
    );
    let big = vec![b'x'; 2000];
    let r = first_line(
        &held[0],
        &[b"XADD", b"alice:webhook:outbox", b"*", b"v", &big],
    );
    assert!(
        r.starts_with("-OXIDEPM too large: argument of 2000 bytes; at most 1024"),
        "{r}"
    );
    let mut admin = as_user(&env, "sys");
    let n: i64 = redis::cmd("EXISTS")
        .arg("alice:webhook:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 0);
}

/// Ten agents whose deliveries stall together (their email outboxes: no
/// email source is configured, so nothing delivers them) each fill their
/// outboxes up to their quota; an eleventh is still served — its own XADD,
/// an inbound webhook to it, its `ops` request and the answer — and
/// `oxidepm lanes` and `/metrics` show Redis within its bound.
#[test]
fn ten_agents_at_their_quotas_leave_an_eleventh_served() {
    let env = Env::new();
    let port = free_port();
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let addr = crate::metrics::with_metrics(
        &env,
        &format!(
            "[lanes]\nmaxmemory = 33554432\nsources = [\"webhook\", \"email\"]\n\
             [[lanes.routes]]\nsource = \"webhook\"\nchannel = \"quiet\"\nagent = \"quiet\"\n\
             [lanes.webhook]\nlisten = \"127.0.0.1:{port}\"\ndeliver = {{ \"*\" = \"{}\" }}\n",
            sink.url()
        ),
    );
    let stalled: Vec<String> = (0..10).map(|i| format!("stall{i}")).collect();
    let mut names: Vec<&str> = stalled.iter().map(String::as_str).collect();
    names.push("quiet");
    start_agents(&env, &names);
    let value = vec![b'v'; 64 << 10];
    for n in &stalled {
        let mut c = conn(&env.home.join(format!("lanes/{n}.sock")));
        let mut written = 0;
        let refused = loop {
            let r: redis::RedisResult<String> = redis::cmd("XADD")
                .arg(format!("{n}:email:outbox"))
                .arg("*")
                .arg("v")
                .arg(&value)
                .query(&mut c);
            match r {
                Ok(_) => {
                    written += 1;
                    assert!(written < 512, "{n}: its quota never refused");
                }
                Err(e) => break e.to_string(),
            }
        };
        assert!(refused.contains("quota: agent"), "{n}: {refused}");
        assert!(written > 0, "{n}: its first XADD was refused: {refused}");
    }
    // The quiet agent's share and the reserve are still there.
    let mut quiet = conn(&env.home.join("lanes/quiet.sock"));
    let _: String = redis::cmd("XADD")
        .arg("quiet:email:outbox")
        .arg("*")
        .arg("v")
        .arg(&value)
        .query(&mut quiet)
        .unwrap();
    env.wait(20, "the webhook listener", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let token = Secret::read(&env.home.join("secrets/webhook_token")).unwrap();
    let body = format!(
        r#"{{"channel":"quiet","sender":"carol","text":"{}"}}"#,
        "i".repeat(32 << 10)
    );
    let (code, answer) = http(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "POST",
        "/in/webhook",
        Some(token.expose()),
        &body,
    );
    assert!((200..300).contains(&code), "{code} {answer}");
    let got = run(
        &mut quiet,
        &strs(&words(
            "XREADGROUP GROUP quiet c BLOCK 10000 STREAMS quiet:webhook:inbox >",
        )),
    )
    .unwrap();
    assert!(format!("{got:?}").contains("iiii"), "the inbound message");
    let r = crate::ops::ops_answer(&mut quiet, "quiet", r#"{"op":"whoami"}"#);
    assert_eq!(r["result"]["actor"], "ai:quiet", "{r}");
    // What the report says: the bound, how close Redis is, the shares.
    let report = env.json(&["lanes"]);
    let m = &report["memory"];
    assert_eq!(m["maxmemory"], 33554432, "{m}");
    assert_eq!(m["outbox_budget"], 16777216, "{m}");
    assert_eq!(m["agent_quota"], 16777216 / 11, "{m}");
    let used = m["used"].as_u64().unwrap();
    assert!(used > 10 * (1 << 20) && used < 33554432, "{m}");
    let text = env.ok(&["lanes"]);
    assert!(text.contains("of maxmemory 33554432"), "{text}");
    let scraped = crate::metrics::scrape(&addr);
    assert_eq!(
        crate::metrics::value(&scraped, "oxidepm_lanes_redis_maxmemory_bytes"),
        Some(33554432.0),
        "{scraped}"
    );
    assert!(
        crate::metrics::value(&scraped, "oxidepm_lanes_redis_used_bytes")
            .is_some_and(|u| u > 0.0 && u < 33554432.0),
        "{scraped}"
    );
}
