//! Layer 3, part 1: one private Redis, per-agent ACL users and per-agent
//! proxy sockets. Real redis-server, real uids (created with useradd when
//! the tests run as root).

use crate::harness::{alive, bin, kill, read, strs, test_user, Env};
use oxidepm_lanes::Secret;
use oxidepm_testkit::words;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One RESP connection (the `redis` crate: a real client).
pub fn conn(sock: &Path) -> redis::Connection {
    redis::Client::open(format!("redis+unix://{}", sock.display()).as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

/// A connection to the private Redis as a host-side user (`sys`, `bridge`).
pub fn host_conn(env: &Env, user: &str) -> redis::Connection {
    if let Some(server) = &env.shared {
        // The shared pass: the daemon's admin is the server's `oxidepm`.
        use oxidepm_testkit::shared::{OXIDEPM_PASSWORD, OXIDEPM_USER};
        if user == "sys" {
            return server.connect(OXIDEPM_USER, OXIDEPM_PASSWORD).unwrap();
        }
        let pw = Secret::read(&env.home.join("secrets").join(user)).unwrap();
        // A host's bridge is `bridge@<host id>` on a shared server.
        let name = match user {
            "bridge" => {
                let lanes = env.json(&["lanes"]);
                let host = lanes["shared"]["host_id"].as_str().expect("a host id");
                format!("bridge@{host}")
            }
            _ => user.to_string(),
        };
        return server.connect(&name, pw.expose()).unwrap();
    }
    let mut c = conn(&env.home.join("redis/redis.sock"));
    let pw = Secret::read(&env.home.join("secrets").join(user)).unwrap();
    redis::cmd("AUTH")
        .arg(user)
        .arg(pw.expose())
        .query::<()>(&mut c)
        .unwrap();
    c
}

pub fn run(c: &mut redis::Connection, args: &[&str]) -> Result<redis::Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(c).map_err(|e| {
        // The code and the text, as the server sent them.
        format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
    })
}

fn whoami(c: &mut redis::Connection) -> String {
    redis::cmd("ACL").arg("WHOAMI").query(c).unwrap()
}

pub fn start_agents(env: &Env, names: &[&str]) {
    for n in names {
        let mut args = vec!["start", "--kind", "agent", "--name", n];
        let user = format!("oxpm-{n}");
        if test_user(&user).is_some() {
            args.extend(["--user", user.as_str()]);
        }
        args.extend(["--", "sleep", "100000"]);
        env.ok(&args);
    }
}

#[test]
fn an_agent_can_use_its_own_lane_and_nothing_else() {
    let env = Env::new();
    start_agents(&env, &["alice", "bob"]);
    let alice_sock = env.home.join("lanes/alice.sock");
    let mut alice = conn(&alice_sock);
    assert_eq!(whoami(&mut alice), "agent_alice");

    // The bridge writes her inbox; she reads and acknowledges it.
    let mut bridge = host_conn(&env, "bridge");
    let id: String = redis::cmd("XADD")
        .arg("alice:webhook:inbox")
        .arg("*")
        .arg("text")
        .arg("hello")
        .query(&mut bridge)
        .unwrap();
    let got = run(
        &mut alice,
        &strs(&words(
            "XREADGROUP GROUP alice c1 COUNT 10 STREAMS alice:webhook:inbox >",
        )),
    )
    .unwrap();
    assert!(format!("{got:?}").contains("hello"), "{got:?}");
    let acked: i64 = redis::cmd("XACK")
        .arg("alice:webhook:inbox")
        .arg("alice")
        .arg(&id)
        .query(&mut alice)
        .unwrap();
    assert_eq!(acked, 1);

    // Her outbox takes XADD, also under the spec's shared name.
    run(
        &mut alice,
        &["XADD", "alice:webhook:outbox", "*", "text", "hi"],
    )
    .unwrap();
    run(&mut alice, &["XADD", "email:outbox", "*", "text", "hi"]).unwrap();
    let mut admin = host_conn(&env, "sys");
    let n: i64 = redis::cmd("XLEN")
        .arg("alice:email:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("EXISTS")
        .arg("email:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 0);

    let refused: Vec<Vec<&str>> = vec![
        vec!["XRANGE", "alice:webhook:outbox", "-", "+"],
        vec!["XREAD", "STREAMS", "alice:webhook:outbox", "0"],
        vec![
            "XREADGROUP",
            "GROUP",
            "alice",
            "c",
            "STREAMS",
            "alice:webhook:outbox",
            ">",
        ],
        vec!["XCLAIM", "alice:webhook:outbox", "g", "c", "0", "0-1"],
        vec!["XAUTOCLAIM", "alice:webhook:outbox", "g", "c", "0", "0"],
        vec!["XLEN", "alice:webhook:outbox"],
        vec!["XLEN", "bob:webhook:outbox"],
        vec!["XTRIM", "alice:webhook:inbox", "MAXLEN", "0"],
        vec!["XDEL", "alice:webhook:inbox", "0-1"],
        vec!["DEL", "alice:webhook:inbox"],
        vec!["DEL", "bob:webhook:inbox"],
        vec!["XLEN", "bob:webhook:inbox"],
        vec!["XRANGE", "bob:webhook:inbox", "-", "+"],
        vec![
            "XREADGROUP",
            "GROUP",
            "bob",
            "c",
            "STREAMS",
            "bob:webhook:inbox",
            ">",
        ],
        vec!["XADD", "bob:webhook:outbox", "*", "a", "b"],
        vec!["XADD", "bob:webhook:inbox", "*", "a", "b"],
        vec!["KEYS", "*"],
        vec!["SCAN", "0"],
        vec!["RANDOMKEY"],
        vec!["DBSIZE"],
        vec!["MONITOR"],
        vec!["CONFIG", "GET", "*"],
        vec!["EVAL", "return 1", "0"],
        vec!["FUNCTION", "LIST"],
        vec!["FUNCTION", "FLUSH"],
        vec!["SELECT", "1"],
        vec!["PUBSUB", "CHANNELS"],
        vec!["CLIENT", "LIST"],
        vec!["CLIENT", "KILL", "ID", "1"],
        vec!["CLIENT", "TRACKING", "on"],
        vec!["FLUSHALL"],
    ];
    for args in refused {
        let r = run(&mut alice, &args);
        match r {
            Err(e) => assert!(e.starts_with("NOPERM"), "{args:?}: {e}"),
            Ok(v) => panic!("{args:?} was allowed: {v:?}"),
        }
        assert_eq!(whoami(&mut alice), "agent_alice");
    }
    // Nothing of bob's was touched.
    let n: i64 = redis::cmd("XLEN")
        .arg("bob:webhook:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn an_agent_cannot_become_someone_else() {
    let env = Env::new();
    start_agents(&env, &["alice"]);
    let sock = env.home.join("lanes/alice.sock");
    let bridge_pw = Secret::read(&env.home.join("secrets/bridge")).unwrap();
    let bridge_pw = bridge_pw.expose().to_string();
    let mut c = conn(&sock);
    for args in [
        vec!["AUTH", "bridge", bridge_pw.as_str()],
        vec!["AUTH", "default", "x"],
        vec!["AUTH", bridge_pw.as_str()],
        vec!["HELLO", "3", "AUTH", "bridge", bridge_pw.as_str()],
        vec!["RESET"],
    ] {
        let r = run(&mut c, &args);
        assert!(r.is_err(), "{args:?} was allowed: {r:?}");
        assert_eq!(whoami(&mut c), "agent_alice", "after {args:?}");
    }
    // MULTI + AUTH + EXEC, sent as one pipeline: the AUTH is refused and
    // so is the transaction.
    let mut raw = UnixStream::connect(&sock).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let pipeline = format!(
        "*1\r\n$5\r\nMULTI\r\n*3\r\n$4\r\nAUTH\r\n$6\r\nbridge\r\n${}\r\n{}\r\n*1\r\n$4\r\nEXEC\r\n*2\r\n$3\r\nACL\r\n$6\r\nWHOAMI\r\n",
        bridge_pw.len(),
        bridge_pw
    );
    raw.write_all(pipeline.as_bytes()).unwrap();
    let mut r = BufReader::new(raw.try_clone().unwrap());
    let mut lines = Vec::new();
    for _ in 0..4 {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l.starts_with('$') {
            let mut v = String::new();
            r.read_line(&mut v).unwrap();
            l.push_str(&v);
        }
        lines.push(l);
    }
    assert!(
        lines[0] == "+OK\r\n"
            && lines[1].starts_with("-NOPERM")
            && lines[2].starts_with("-EXECABORT"),
        "{lines:?}"
    );
    assert!(lines[3].contains("agent_alice"), "{lines:?}");
    // An inline command is refused and the connection closed.
    let mut inline = UnixStream::connect(&sock).unwrap();
    inline
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    inline
        .write_all(format!("AUTH bridge {bridge_pw}\r\n").as_bytes())
        .unwrap();
    let mut buf = String::new();
    let _ = BufReader::new(inline).read_line(&mut buf);
    assert!(buf.starts_with("-ERR"), "{buf}");
    assert_eq!(whoami(&mut conn(&sock)), "agent_alice");
}

#[test]
fn sockets_secrets_and_names_are_private() {
    let Some((bob_uid, bob_gid)) = test_user("oxpm-bob") else {
        eprintln!("not root: the uid checks of this test are skipped");
        return;
    };
    let (alice_uid, _) = test_user("oxpm-alice").unwrap();
    let env = Env::new();
    start_agents(&env, &["alice", "bob"]);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(env.home.join("lanes/alice.sock")).unwrap();
    assert_eq!(meta.uid(), alice_uid);
    assert_eq!(meta.mode() & 0o777, 0o600);
    let secrets = std::fs::metadata(env.home.join("secrets")).unwrap();
    assert_eq!(secrets.mode() & 0o777, 0o700);

    let as_bob = |args: &[&str]| {
        Command::new(args[0])
            .args(&args[1..])
            .uid(bob_uid)
            .gid(bob_gid)
            .output()
            .unwrap()
    };
    let alice_sock = env.home.join("lanes/alice.sock");
    let bob_sock = env.home.join("lanes/bob.sock");
    let o = as_bob(&["redis-cli", "-s", alice_sock.to_str().unwrap(), "PING"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("ermission denied"),
        "bob reached alice's socket: {text}"
    );
    let o = as_bob(&[
        "redis-cli",
        "-s",
        bob_sock.to_str().unwrap(),
        "ACL",
        "WHOAMI",
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "agent_bob");
    let o = as_bob(&[
        "cat",
        env.home.join("secrets/agent_alice").to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "bob read alice's password");
    let o = as_bob(&["ls", env.home.join("secrets").to_str().unwrap()]);
    assert!(!o.status.success());

    for bad in ["a*", "x:y", "Alice", "bridge", "default", "webhook"] {
        let err = env.fails(&[
            "start", "--kind", "agent", "--name", bad, "--", "sleep", "1",
        ]);
        assert!(
            err.contains("E_BAD_REQUEST") || err.contains("agent name"),
            "{bad}: {err}"
        );
    }
    if env.shared.is_some() {
        // The rest is the private server's ACL file.
        return;
    }
    let acl = read(&env.home.join("redis/users.acl"));
    let default = acl
        .lines()
        .find(|l| l.starts_with("user default "))
        .expect("a default user line");
    assert!(
        default.contains(" off") && !default.contains(" on ") && !default.contains("nopass"),
        "{default}"
    );
    assert!(
        !acl.contains(
            Secret::read(&env.home.join("secrets/agent_alice"))
                .unwrap()
                .expose()
        ),
        "clear password in the ACL file"
    );
}

#[test]
fn the_agent_is_told_about_its_lane() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    let home = env.home.display().to_string();
    let e = env.agent_environment("carol");
    assert!(e.contains("OXIDEPM_AGENT=carol"), "{e}");
    assert!(
        e.contains(&format!("OXIDEPM_LANE=unix://{home}/lanes/carol.sock\n")),
        "{e}"
    );
    assert!(
        e.contains(&format!("OXIDEPM_LANE_SOCKET={home}/lanes/carol.sock\n")),
        "{e}"
    );
    assert!(
        e.contains("OXIDEPM_INBOXES=carol:webhook:inbox,carol:email:inbox,carol:ops:inbox"),
        "{e}"
    );
    assert!(e.contains("OXIDEPM_OUTBOXES=carol:webhook:outbox"), "{e}");
    assert!(
        e.contains(&format!("OXIDEPM_SOCKET={home}/agent.sock")),
        "{e}"
    );
    let desc: Value = serde_json::from_str(&read(&env.home.join("lanes/carol.json"))).unwrap();
    assert_eq!(desc["acl_user"], "agent_carol");
    assert_eq!(desc["lane"], format!("unix://{home}/lanes/carol.sock"));
    assert_eq!(desc["socket"], format!("{home}/lanes/carol.sock"));
    let lanes = env.json(&["lanes"]);
    let carol = &lanes["agents"].as_array().unwrap()[0];
    assert!(lanes["bridge"]["routes"].is_array(), "{lanes}");
    assert_eq!(carol["agent"], "carol");
    assert_eq!(carol["acl_user"], "agent_carol");
    assert!(carol["streams"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["key"] == "carol:ops:inbox" && s["length"] == 0));
    // With no source configured no bridge runs (and none crash-loops).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        env.status().iter().all(|a| a["name"] != "oxidepm-bridge"),
        "{:?}",
        env.status()
    );
    // The system apps are protected from an AI.
    let system_app = match env.shared {
        Some(_) => "oxidepm-lanes",
        None => "oxidepm-redis",
    };
    let o = env
        .cmd()
        .env("OXIDEPM_ACTOR", "ai:x")
        .args(["stop", system_app])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("E_PROTECTED"));
    // Deleting the agent removes its user and socket, live.
    env.ok(&["delete", "carol"]);
    let mut admin = host_conn(&env, "sys");
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut admin).unwrap();
    assert!(!users.contains(&"agent_carol".to_string()), "{users:?}");
    env.wait(5, "the socket to go", || {
        !env.home.join("lanes/carol.sock").exists()
    });
}

#[test]
fn acknowledged_writes_survive_a_redis_crash_and_new_agents_do_not_break_old_connections() {
    if crate::harness::shared_lanes() {
        return; // The private redis-server's crash: a shared one is not ours to crash.
    }
    let env = Env::new();
    env.daemon_toml("[lanes]\nappendfsync = \"always\"\n");
    start_agents(&env, &["alice"]);
    let sock = env.home.join("lanes/alice.sock");
    let mut alice = conn(&sock);
    for i in 0..1000 {
        redis::cmd("XADD")
            .arg("alice:webhook:outbox")
            .arg("*")
            .arg("n")
            .arg(i)
            .query::<String>(&mut alice)
            .unwrap();
    }
    let redis_pid = env.pid("oxidepm-redis");
    kill(redis_pid, libc::SIGKILL);
    env.wait(20, "redis back", || {
        env.daemon_app("oxidepm-redis")["pid"]
            .as_u64()
            .is_some_and(|p| p as u32 != redis_pid)
    });
    assert!(!alive(redis_pid));
    let url = format!(
        "redis+unix://{}",
        env.home.join("redis/redis.sock").display()
    );
    let pw = Secret::read(&env.home.join("secrets/sys")).unwrap();
    let mut admin = env.wait(20, "redis to serve again", || {
        let mut c = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .ok()?;
        redis::cmd("AUTH")
            .arg("sys")
            .arg(pw.expose())
            .query::<()>(&mut c)
            .ok()?;
        // AUTH is answered while the append-only file is still loading;
        // reads get -LOADING until it is done.
        match redis::cmd("XLEN")
            .arg("alice:webhook:outbox")
            .query::<i64>(&mut c)
        {
            Err(e) if e.code() == Some("LOADING") => None,
            _ => Some(c),
        }
    });
    let n: i64 = redis::cmd("XLEN")
        .arg("alice:webhook:outbox")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 1000, "acknowledged writes were lost");

    // A blocking read of alice survives adding another agent.
    let mut alice = conn(&sock);
    let reader = std::thread::spawn(move || {
        redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("alice")
            .arg("c")
            .arg("BLOCK")
            .arg(20000)
            .arg("STREAMS")
            .arg("alice:email:inbox")
            .arg(">")
            .query::<redis::Value>(&mut alice)
    });
    // Parked in Redis before the new agent arrives, or it proves nothing.
    env.wait(20, "alice's read to block", || {
        redis::cmd("CLIENT")
            .arg("LIST")
            .query::<String>(&mut admin)
            .unwrap()
            .lines()
            .any(|c| c.contains("user=agent_alice") && c.contains("cmd=xreadgroup"))
    });
    start_agents(&env, &["dave"]);
    let mut bridge = host_conn(&env, "bridge");
    redis::cmd("XADD")
        .arg("alice:email:inbox")
        .arg("*")
        .arg("text")
        .arg("still here")
        .query::<String>(&mut bridge)
        .unwrap();
    let got = reader.join().unwrap().expect("the blocking read failed");
    assert!(format!("{got:?}").contains("still here"), "{got:?}");
}

#[test]
fn the_proxy_serves_sockets_handed_over_by_systemd() {
    let env = Env::new();
    start_agents(&env, &["alice"]);
    // A second proxy, socket-activated, for alice only.
    let dir = env.path("activated");
    std::fs::create_dir_all(&dir).unwrap();
    let conf: Value = serde_json::from_str(&read(&env.home.join("redis/proxy.json"))).unwrap();
    let mut conf2 = conf.clone();
    conf2["lanes_dir"] = Value::String(dir.display().to_string());
    let cfg = env.path("proxy2.json");
    std::fs::write(&cfg, conf2.to_string()).unwrap();
    let listen = dir.join("alice.sock");
    let mut child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&listen)
        .arg("--fdname=alice")
        .arg(bin("oxidepm-lane-proxy"))
        .arg("--config")
        .arg(&cfg)
        .spawn()
        .expect("systemd-socket-activate (Debian package systemd)");
    env.wait(10, "the activated socket", || {
        UnixStream::connect(&listen).is_ok()
    });
    let mut c = conn(&listen);
    assert_eq!(whoami(&mut c), "agent_alice");
    let _ = child.kill();
    let _ = child.wait();
    // Whatever the activated proxy started goes too.
    let _ = Command::new("pkill")
        .args(["-f", cfg.to_str().unwrap()])
        .status();
}
