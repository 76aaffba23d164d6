//! Agents' lanes on a primary found through Sentinel (`redis+sentinel://`),
//! and a Sentinel failover survived by reconnecting.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod support;

use oxidepm_testkit::shared::{acl_file, connect, ROOT_PASSWORD, ROOT_USER};
use oxidepm_testkit::{bulk, eventually, free_port, Client, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{agent_setuser, inbox, outbox, tagged, ProxyProcess, FAMILIES};

/// A redis-server or sentinel process; killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, conf: &str, sentinel: bool) -> Server {
    let path = dir.join(if sentinel {
        "sentinel.conf"
    } else {
        "redis.conf"
    });
    std::fs::write(&path, conf).unwrap();
    let mut cmd = Command::new("redis-server");
    cmd.arg(&path);
    if sentinel {
        cmd.arg("--sentinel");
    }
    Server(
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (Debian: redis-server)"),
    )
}

/// A data node on `port`: the shared server's ACL file, a replica of
/// `primary` when given.
fn node(dir: &Path, port: u16, primary: Option<u16>) -> Server {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("users.acl"), acl_file()).unwrap();
    let mut conf = format!(
        "port {port}\nbind 127.0.0.1\nprotected-mode no\naclfile {d}/users.acl\ndir {d}\n\
         save \"\"\nappendonly no\nlogfile {d}/redis.log\nmasteruser {ROOT_USER}\n\
         masterauth {ROOT_PASSWORD}\n",
        d = dir.display()
    );
    if let Some(p) = primary {
        conf.push_str(&format!("replicaof 127.0.0.1 {p}\n"));
    }
    let s = spawn(dir, &conf, false);
    eventually(Duration::from_secs(20), "redis-server to start", || {
        connect(port, None, ROOT_USER, ROOT_PASSWORD).is_ok()
    });
    s
}

fn root(port: u16) -> redis::Connection {
    connect(port, None, ROOT_USER, ROOT_PASSWORD).unwrap()
}

/// The node's role; empty while it cannot be asked (a failover closes
/// the connections of the node it demotes).
fn role(port: u16) -> String {
    let Ok(mut c) = connect(port, None, ROOT_USER, ROOT_PASSWORD) else {
        return String::new();
    };
    let v: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).unwrap_or_default();
    match v.first() {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn replica_synced(port: u16) -> bool {
    let Ok(mut c) = connect(port, None, ROOT_USER, ROOT_PASSWORD) else {
        return false;
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut c)
        .unwrap_or_default();
    info.contains("master_link_status:up")
}

#[test]
fn lanes_follow_the_primary_the_sentinels_name() {
    tagged();
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2, ps) = (free_port(), free_port(), free_port());
    let _primary = node(&dir.path().join("a"), p1, None);
    let _replica = node(&dir.path().join("b"), p2, Some(p1));
    // ACLs are not replicated: the users go on both, as the daemon does.
    for port in [p1, p2] {
        let _: () = redis::cmd("ACL")
            .arg(agent_setuser("alice"))
            .query(&mut root(port))
            .unwrap();
    }
    for f in FAMILIES {
        let _: () = redis::cmd("XGROUP")
            .arg(&["CREATE", &inbox("alice", f), "alice", "0", "MKSTREAM"])
            .query(&mut root(p1))
            .unwrap();
    }
    eventually(Duration::from_secs(20), "the replica in sync", || {
        replica_synced(p2)
    });
    let sdir = dir.path().join("s");
    std::fs::create_dir_all(&sdir).unwrap();
    let _sentinel = spawn(
        &sdir,
        &format!(
            "port {ps}\nbind 127.0.0.1\nprotected-mode no\ndir {d}\nlogfile {d}/sentinel.log\n\
             sentinel monitor lanes 127.0.0.1 {p1} 1\n\
             sentinel auth-user lanes {ROOT_USER}\nsentinel auth-pass lanes {ROOT_PASSWORD}\n\
             sentinel down-after-milliseconds lanes 1000\nsentinel failover-timeout lanes 5000\n",
            d = sdir.display()
        ),
        true,
    );
    let ask = |cmd: &[&str]| -> redis::RedisResult<redis::Value> {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{ps}"))?.get_connection()?;
        redis::cmd(cmd[0]).arg(&cmd[1..]).query(&mut c)
    };
    eventually(
        Duration::from_secs(20),
        "the sentinel to know the replica",
        || matches!(ask(&["SENTINEL", "REPLICAS", "lanes"]), Ok(redis::Value::Array(v)) if !v.is_empty()),
    );

    let url = format!("redis+sentinel://127.0.0.1:{ps}/lanes");
    let proxy = ProxyProcess::start(&url, &Default::default(), &["alice"]);
    let mut alice = proxy.client("alice");
    assert_eq!(alice.whoami(), bulk("agent_alice"));
    let id = alice.cmd(&["XADD", "webhook:outbox", "*", "text", "before"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    let w = inbox("alice", "webhook");
    let _: String = redis::cmd("XADD")
        .arg(&[&w, "*", "text", "msg 1"])
        .query(&mut root(p1))
        .unwrap();
    let got = alice.cmd(&["XREADGROUP", "GROUP", "alice", "c", "STREAMS", &w, ">"]);
    let id = got.strings()[1].clone();
    assert_eq!(alice.cmd(&["XACK", &w, "alice", &id]), Value::Int(1));
    eventually(Duration::from_secs(20), "the replica to catch up", || {
        let n: i64 = redis::cmd("XLEN")
            .arg(outbox("alice", "webhook"))
            .query(&mut root(p2))
            .unwrap_or(0);
        n == 1
    });

    // The sentinels make the replica the primary.
    // Refused (NOGOODSLAVE) until the sentinel has checked the replica.
    eventually(
        Duration::from_secs(60),
        "the sentinel to start a failover",
        || {
            let started = ask(&["SENTINEL", "FAILOVER", "lanes"]).is_ok();
            if !started {
                std::thread::sleep(Duration::from_millis(500));
            }
            started
        },
    );
    eventually(Duration::from_secs(30), "the failover", || {
        role(p2) == "master" && role(p1) == "slave"
    });

    // The connection opened before was on the old primary: the sentinel
    // had its clients killed, or a write there gets a plain error; either
    // way it closes. The retry reaches the new primary, where what was
    // acknowledged still is.
    alice.send_maybe(&["XADD", "webhook:outbox", "*", "text", "during"]);
    match alice.try_read() {
        None => {}
        Some(r) => {
            assert!(r.error_starts("TRYAGAIN"), "{r:?}");
            alice.assert_closed();
        }
    }
    let mut again: Option<Client> = None;
    for _ in 0..20 {
        let mut c = proxy.client("alice");
        let r = c.cmd(&["XADD", "webhook:outbox", "*", "text", "after"]);
        if matches!(r, Value::Bulk(_)) {
            again = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut again = again.expect("the lane works again after the failover");
    let all = again.cmd(&["XRANGE", &w, "-", "+"]);
    assert!(all.strings().contains(&"msg 1".to_string()), "{all:?}");
    let pending = again.cmd(&["XPENDING", &w, "alice"]);
    assert_eq!(pending.strings().len(), 0, "{pending:?}");
    let n: i64 = redis::cmd("XLEN")
        .arg(outbox("alice", "webhook"))
        .query(&mut root(p2))
        .unwrap();
    assert_eq!(n, 2, "'before' and 'after', not the refused 'during'");
}
