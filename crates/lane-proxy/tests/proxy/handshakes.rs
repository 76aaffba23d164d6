//! What client libraries send when they connect (client names, HELLO,
//! INFO), answered by the proxy without reaching Redis, in order with
//! the replies that do come from Redis.

use super::alice;
use super::harness::{bulk, ok, Client, Value};
use std::io::Read;

/// The names of the clients Redis has, as `sys` sees them.
fn names_in_redis(admin: &mut Client) -> Vec<String> {
    let list = admin.cmd(&["CLIENT", "LIST"]).text().unwrap();
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("name=")))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn a_client_name_lives_in_the_proxy_and_is_checked_like_redis_checks_it() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), Value::Nil);
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", "worker-1"]), ok());
    assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), bulk("worker-1"));
    for bad in ["has space", "new\nline", "\u{e9}t\u{e9}"] {
        let r = a.cmd(&["CLIENT", "SETNAME", bad]);
        assert!(
            r.error_starts("ERR Client names cannot contain spaces"),
            "{bad:?}: {r:?}"
        );
    }
    let r = a.cmd(&["CLIENT", "SETNAME", &"n".repeat(257)]);
    assert!(r.error_starts("OXIDEPM client name"), "{r:?}");
    assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), bulk("worker-1"));
    // Another connection has its own (no) name.
    assert_eq!(
        proxy.client("alice").cmd(&["CLIENT", "GETNAME"]),
        Value::Nil
    );
    // Nothing reached Redis.
    assert!(names_in_redis(&mut redis.admin()).is_empty());
    // Other CLIENT subcommands stay refused.
    for c in [&["CLIENT", "LIST"][..], &["CLIENT", "KILL", "ID", "1"]] {
        assert!(a.cmd(c).error_starts("NOPERM"), "{c:?}");
    }
    assert_eq!(a.whoami(), bulk("agent_alice"));
}

#[test]
fn hello_3_with_setname_negotiates_and_keeps_the_name() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    let hello = a.cmd(&["HELLO", "3", "SETNAME", "x"]);
    let Value::Map(fields) = &hello else {
        panic!("HELLO 3: {hello:?}")
    };
    let proto = fields.chunks(2).find(|kv| kv[0] == bulk("proto"));
    assert_eq!(proto.map(|kv| &kv[1]), Some(&Value::Int(3)), "{hello:?}");
    assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), bulk("x"));
    assert!(names_in_redis(&mut redis.admin()).is_empty());
    // No name, in RESP3: its own null.
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", ""]), ok());
    a.send(&["CLIENT", "GETNAME"]);
    let mut raw = [0u8; 3];
    a.stream.read_exact(&mut raw).unwrap();
    assert_eq!(&raw, b"_\r\n");
    // AUTH stays refused, with or without a name.
    let r = a.cmd(&["HELLO", "3", "SETNAME", "y", "AUTH", "bridge", "pw"]);
    assert!(r.error_starts("NOPERM"), "{r:?}");
    assert_eq!(a.whoami(), bulk("agent_alice"));
}

#[test]
fn info_is_a_minimal_answer_of_the_proxy() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    let info = a.cmd(&["INFO"]).text().unwrap();
    let real = redis.admin().cmd(&["INFO", "server"]).text().unwrap();
    let version = real
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap();
    assert!(
        info.contains(&format!("\r\nredis_version:{version}\r\n")),
        "{info}"
    );
    assert!(info.contains("\r\nloading:0\r\n"), "{info}");
    for secret in [
        "used_memory",
        "connected_clients",
        "executable",
        "config_file",
    ] {
        assert!(!info.contains(secret), "{secret} in {info}");
    }
    assert_eq!(a.cmd(&["INFO", "everything"]).text().unwrap(), info);
}

#[test]
fn pipelined_local_and_upstream_replies_stay_in_order() {
    let (_redis, proxy) = alice();
    let mut a = proxy.client("alice");
    let pipeline: &[&[&str]] = &[
        &["PING"],
        &["CLIENT", "SETNAME", "a"],
        &["ECHO", "one"],
        &["CLIENT", "GETNAME"],
        &["INFO"],
        &["ECHO", "two"],
        &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
        &["KEYS", "*"],
        &["HELLO", "2", "SETNAME", "b"],
        &["CLIENT", "GETNAME"],
        &["ECHO", "three"],
    ];
    for c in pipeline {
        a.send(c);
    }
    let r: Vec<Value> = pipeline.iter().map(|_| a.read()).collect();
    assert_eq!(r[0], Value::Simple("PONG".into()));
    assert_eq!(r[1], ok());
    assert_eq!(r[2], bulk("one"));
    assert_eq!(r[3], bulk("a"));
    assert!(r[4].text().unwrap().contains("loading:0"), "{r:?}");
    assert_eq!(r[5], bulk("two"));
    assert_eq!(r[6], ok());
    assert!(r[7].error_starts("NOPERM"), "{r:?}");
    assert!(matches!(r[8], Value::Array(_)), "{r:?}");
    assert_eq!(r[9], bulk("b"));
    assert_eq!(r[10], bulk("three"));
}

#[test]
fn client_library_introspection_is_forwarded() {
    let (_redis, proxy) = alice();
    let mut a = proxy.client("alice");
    assert!(
        matches!(a.cmd(&["COMMAND", "COUNT"]), Value::Int(n) if n > 0),
        "COMMAND COUNT"
    );
    let docs = a.cmd(&["COMMAND", "INFO", "XADD"]);
    assert!(docs.strings().contains(&"xadd".to_string()), "{docs:?}");
}
