//! Layer 3 against its own users: the next owner of a deleted agent's name,
//! someone who can write the bridge's Maildir, and an agent whose answer
//! is shaped to smuggle mail. Real daemon, redis-server, bridge process,
//! uids (made with useradd when run as root) and SMTP server.

use crate::harness::{read, strs, test_user, Env};
use crate::lanes::{conn, host_conn};
use oxidepm_lanes::Secret;
use oxidepm_testkit::{free_port, http, words, SmtpSink};
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The bridge's user when daemon.toml names none.
const BRIDGE_USER: &str = "oxidepm-bridge";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Defines agent `name` running `sleep`, as `user` when the tests run as
/// root.
fn start_agent(env: &Env, name: &str, user: &str) {
    let mut args = vec!["start", "--kind", "agent", "--name", name];
    if test_user(user).is_some() {
        args.extend(["--user", user]);
    }
    args.extend(["--", "sleep", "100000"]);
    env.ok(&args);
}

/// A connection to the private Redis as a host-side user (`sys`, `bridge`).
fn host(env: &Env, user: &str) -> redis::Connection {
    host_conn(env, user)
}

/// An agent's connection, through its socket.
fn agent(env: &Env, name: &str) -> redis::Connection {
    conn(&env.home.join(format!("lanes/{name}.sock")))
}

/// Every entry of a stream, as text fields.
fn entries(c: &mut redis::Connection, key: &str) -> Vec<std::collections::HashMap<String, String>> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(c)
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|e| {
            e.map
                .iter()
                .map(|(k, v)| {
                    let v = redis::from_redis_value::<String>(v).unwrap_or_default();
                    (k.clone(), v)
                })
                .collect()
        })
        .collect()
}

/// Every key matching `pattern`, as the admin user sees them.
fn keys(c: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, mut got): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .query(c)
            .unwrap();
        out.append(&mut got);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

fn bridge_online(env: &Env) -> bool {
    env.daemon_status()
        .iter()
        .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
}

/// Whether a bridge process of this home runs at all.
fn bridge_process(env: &Env) -> bool {
    let conf = env.home.join("bridge/bridge.json");
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("oxidepm-bridge") && c.contains(conf.to_str().unwrap())
        })
    })
}

/// Runs `args` as `uid`/`gid`.
fn run_as(uid: u32, gid: u32, args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap()
}

#[test]
fn a_deleted_agents_messages_never_reach_the_next_agent_of_that_name() {
    let env = Env::new();
    start_agent(&env, "alice", "oxpm-alice");
    let mut sys = host(&env, "sys");
    let mut bridge = host(&env, "bridge");
    for i in 0..3 {
        redis::cmd("XADD")
            .arg("alice:webhook:inbox")
            .arg("*")
            .arg("text")
            .arg(format!("for the first alice {i}"))
            .query::<String>(&mut bridge)
            .unwrap();
    }
    // She reads one and does not acknowledge it, answers once, and one of
    // her answers is a dead letter already.
    let mut old = agent(&env, "alice");
    let got: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("alice")
        .arg("c1")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg("alice:webhook:inbox")
        .arg(">")
        .query(&mut old)
        .unwrap();
    assert_eq!(got.keys[0].ids.len(), 1);
    redis::cmd("XADD")
        .arg("webhook:outbox")
        .arg("*")
        .arg("text")
        .arg("the first alice's answer")
        .query::<String>(&mut old)
        .unwrap();
    redis::cmd("XADD")
        .arg("alice:webhook:outbox:dead")
        .arg("*")
        .arg("text")
        .arg("the first alice's dead letter")
        .query::<String>(&mut sys)
        .unwrap();
    assert_eq!(entries(&mut sys, "alice:webhook:outbox").len(), 1);

    env.ok(&["delete", "alice"]);

    // Nothing of hers holds data any more: no stream, no group, no
    // password, no description, no socket.
    for k in keys(&mut sys, "alice:*") {
        let len: i64 = redis::cmd("XLEN").arg(&k).query(&mut sys).unwrap();
        assert_eq!(len, 0, "{k} survived the deletion");
    }
    for k in [
        "alice:webhook:inbox",
        "alice:webhook:outbox",
        "alice:webhook:outbox:dead",
    ] {
        let n: i64 = redis::cmd("EXISTS").arg(k).query(&mut sys).unwrap();
        assert_eq!(n, 0, "{k} survived the deletion");
    }
    assert!(!env.home.join("secrets/agent_alice").exists());
    assert!(!env.home.join("lanes/alice.json").exists());
    env.wait(20, "alice's socket to go", || {
        !env.home.join("lanes/alice.sock").exists()
    });

    // The next alice, another uid when possible, finds an empty lane.
    start_agent(&env, "alice", "oxpm-alice2");
    let mut new = agent(&env, "alice");
    for id in ["0", ">"] {
        let got: Option<redis::streams::StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("alice")
            .arg("c1")
            .arg("COUNT")
            .arg(100)
            .arg("STREAMS")
            .arg("alice:webhook:inbox")
            .arg(id)
            .query(&mut new)
            .unwrap();
        let n: usize = got
            .map(|g| g.keys.iter().map(|k| k.ids.len()).sum())
            .unwrap_or(0);
        assert_eq!(n, 0, "the new alice read the first one's mail ({id})");
    }
    assert!(entries(&mut new, "alice:webhook:inbox").is_empty());
    assert!(entries(&mut sys, "alice:webhook:outbox").is_empty());
    assert!(entries(&mut sys, "alice:webhook:outbox:dead").is_empty());
    if test_user("oxpm-alice2").is_some() {
        use std::os::unix::fs::MetadataExt;
        let (uid, _) = test_user("oxpm-alice2").unwrap();
        let meta = std::fs::metadata(env.home.join("lanes/alice.sock")).unwrap();
        assert_eq!(meta.uid(), uid);
    }
}

/// Mail in the Maildir for alice, numbered.
fn mail(n: u64) -> String {
    format!(
        "From: carol@example.com\r\nTo: alice@example.org\r\nSubject: m{n}\r\n\r\nlegit {n}\r\n"
    )
}

const MARKER: &str = "ROOT-ONLY-MARKER";

#[test]
fn the_bridge_runs_as_its_own_user_and_cannot_be_turned_against_root() {
    if !is_root() {
        eprintln!("not root: the bridge runs as the daemon's own user; test skipped");
        return;
    }
    let smtp = SmtpSink::start();
    let env = Env::new();
    let port = free_port();
    let maildir = env.path("Maildir");
    let relay = smtp
        .as_ref()
        .map(|s| s.relay())
        .unwrap_or_else(|| "127.0.0.1:1".into());
    env.daemon_toml(&format!(
        r#"
[lanes]
sources = ["webhook", "email"]

[[lanes.routes]]
source = "email"
address = "alice@example.org"
agent = "alice"

[[lanes.routes]]
source = "webhook"
channel = "support"
agent = "alice"

[lanes.webhook]
listen = "127.0.0.1:{port}"

[lanes.email]
maildir = "{}"
smtp = "{relay}"
domain = "example.org"
"#,
        maildir.display()
    ));
    start_agent(&env, "alice", "oxpm-alice");
    env.wait(20, "the bridge", || bridge_online(&env));
    let user = nix::unistd::User::from_name(BRIDGE_USER)
        .unwrap()
        .expect("the daemon made the bridge's user");
    let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
    assert_ne!(uid, 0);

    // The process runs as that user, every id of it.
    let pid = env.pid("oxidepm-bridge");
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    for (key, want) in [("Uid:", uid), ("Gid:", gid)] {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        let ids: Vec<u32> = line[key.len()..]
            .split_whitespace()
            .map(|i| i.parse().unwrap())
            .collect();
        assert_eq!(ids, vec![want; 4], "{line}");
    }

    // It reads its own files and nothing else of the home.
    let h = |p: &str| env.home.join(p).display().to_string();
    let own = run_as(uid, gid, &["cat", &h("bridge/password")]);
    assert!(own.status.success(), "{own:?}");
    assert_eq!(
        String::from_utf8_lossy(&own.stdout),
        Secret::read(&env.home.join("secrets/bridge"))
            .unwrap()
            .expose()
    );
    for other in [
        "secrets/sys",
        "secrets/bridge",
        "secrets/agent_alice",
        "secrets/webhook_token",
        "redis/users.acl",
        "redis/redis.conf",
        "redis/proxy.json",
        "state.db",
    ] {
        let o = run_as(uid, gid, &["cat", &h(other)]);
        assert!(!o.status.success(), "the bridge's user read {other}");
    }
    for dir in ["secrets", "redis", "bridge", "lanes"] {
        let o = run_as(uid, gid, &["ls", &h(dir)]);
        assert!(!o.status.success(), "the bridge's user listed {dir}/");
    }

    // And it still does its job: the webhook into alice's inbox.
    let token = Secret::read(&env.home.join("secrets/webhook_token")).unwrap();
    env.wait(20, "the webhook", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let (code, body) = http(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "POST",
        "/in/webhook",
        Some(token.expose()),
        r#"{"channel":"support","sender":"carol","text":"by the webhook"}"#,
    );
    assert!((200..300).contains(&code), "{code} {body}");
    let mut sys = host(&env, "sys");
    env.wait(20, "the webhook message", || {
        entries(&mut sys, "alice:webhook:inbox")
            .iter()
            .any(|e| e["text"] == "by the webhook")
    });

    // The Maildir the daemon made for it.
    env.wait(20, "the Maildir", || maildir.join("new").is_dir());
    // A file only root may read, which would parse as mail for alice; and
    // whoever can write new/ keeps swapping mail for links to it, and plants
    // a hard link to another such file.
    let secret = env.path("root-only");
    let text = format!(
        "From: root@example.com\r\nTo: alice@example.org\r\nSubject: s\r\n\r\n{MARKER}\r\n"
    );
    std::fs::write(&secret, &text).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let linked = env.path("root-only-2");
    std::fs::write(&linked, &text).unwrap();
    std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&linked, maildir.join("new/hardlink")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, maildir, secret) = (stop.clone(), maildir.clone(), secret.clone());
        std::thread::spawn(move || {
            let name = |i: usize, round: u64| maildir.join(format!("new/{round}.x{i}.host"));
            let (mut n, mut round) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                for i in 0..8 {
                    let _ = std::fs::remove_file(name(i, round.wrapping_sub(1)));
                    let tmp = maildir.join(format!("tmp/r{i}"));
                    std::fs::write(&tmp, mail(n)).unwrap();
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
                    std::fs::rename(&tmp, name(i, round)).unwrap();
                    n += 1;
                }
                for i in 0..8 {
                    let link = maildir.join(format!("tmp/l{i}"));
                    let _ = std::fs::remove_file(&link);
                    symlink(&secret, &link).unwrap();
                    std::fs::rename(&link, name(i, round)).unwrap();
                }
                round += 1;
            }
        })
    };
    env.wait(120, "legitimate mail to be published", || {
        entries(&mut sys, "alice:email:inbox").len() >= 16
    });
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let inbox = entries(&mut sys, "alice:email:inbox");
    let unrouted = entries(&mut sys, "bridge:unrouted");
    for e in inbox.iter().chain(unrouted.iter()) {
        assert!(
            !e["text"].contains(MARKER),
            "published a root-only file: {e:?}"
        );
        assert!(e["text"].starts_with("legit "), "{e:?}");
    }
    env.wait(20, "the hard link to be set aside", || {
        std::fs::read_dir(maildir.join("cur"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy() == "hardlink:2,FS")
    });

    // An answer with bare CRs: one message, CRLF only.
    let Some(smtp) = smtp else {
        return;
    };
    let mut alice = agent(&env, "alice");
    redis::cmd("XADD")
        .arg("email:outbox")
        .arg("*")
        .arg("to")
        .arg("carol@example.com")
        .arg("text")
        .arg("hi\r.\rMAIL FROM:<ceo@example.org>\rRCPT TO:<victim@example.net>\rDATA\r\rpay\n.\nbye\r\n.\r\nend")
        .query::<String>(&mut alice)
        .unwrap();
    redis::cmd("XADD")
        .arg("email:outbox")
        .arg("*")
        .arg("to")
        .arg("dan@example.com")
        .arg("text")
        .arg("second")
        .query::<String>(&mut alice)
        .unwrap();
    let got = smtp.received(2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["to"], serde_json::json!(["carol@example.com"]));
    assert_eq!(got[1]["to"], serde_json::json!(["dan@example.com"]));
    let data = got[0]["data"].as_str().unwrap();
    let b = data.as_bytes();
    for (i, c) in b.iter().enumerate() {
        match c {
            b'\r' => assert_eq!(b.get(i + 1), Some(&b'\n'), "a lone CR: {data:?}"),
            b'\n' => assert!(i > 0 && b[i - 1] == b'\r', "a lone LF: {data:?}"),
            _ => {}
        }
    }
    assert!(
        data.contains("hi\r\n.\r\nMAIL FROM:<ceo@example.org>\r\nRCPT TO:"),
        "{data:?}"
    );
}

#[test]
fn a_bridge_that_cannot_run_as_its_own_user_stays_stopped_and_lanes_says_why() {
    if !is_root() {
        eprintln!("not root: the bridge runs as the daemon's own user; test skipped");
        return;
    }
    // A user that does not exist, and no useradd on the daemon's PATH.
    let env = Env::new();
    env.daemon_toml(&format!(
        "agents_share_uid = true\n[lanes]\nsources = [\"webhook\"]\nbridge_user = \"oxpm-nobridge\"\n\n\
         [lanes.webhook]\nlisten = \"127.0.0.1:{}\"\n",
        free_port()
    ));
    let o = env
        .cmd()
        .env("PATH", "/usr/bin:/bin")
        .args([
            "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let lanes = env.json(&["lanes"]);
    let problem = lanes["bridge"]["problem"].as_str().unwrap_or_default();
    assert!(
        problem.contains("\"oxpm-nobridge\"") && problem.contains("useradd"),
        "{lanes}"
    );
    assert!(env.ok(&["lanes"]).contains("bridge: not running: "));
    assert!(!bridge_process(&env), "a bridge runs anyway");
    assert!(nix::unistd::User::from_name("oxpm-nobridge")
        .unwrap()
        .is_none());
    drop(env);

    // The Maildir is root's alone: said so, and the bridge waits until the
    // operator gives it to the bridge's user.
    let env = Env::new();
    let maildir = env.path("Maildir");
    for sub in ["tmp", "new", "cur"] {
        std::fs::create_dir_all(maildir.join(sub)).unwrap();
        std::fs::set_permissions(maildir.join(sub), std::fs::Permissions::from_mode(0o700))
            .unwrap();
    }
    std::fs::set_permissions(&maildir, std::fs::Permissions::from_mode(0o700)).unwrap();
    env.daemon_toml(&format!(
        "[lanes]\nsources = [\"email\"]\n\n[lanes.email]\nmaildir = \"{}\"\nsmtp = \"127.0.0.1:1\"\ndomain = \"example.org\"\n",
        maildir.display()
    ));
    start_agent(&env, "alice", "oxpm-alice");
    let lanes: Value = env.json(&["lanes"]);
    let problem = lanes["bridge"]["problem"].as_str().unwrap_or_default();
    assert!(
        problem.contains(maildir.to_str().unwrap()) && problem.contains(BRIDGE_USER),
        "{lanes}"
    );
    assert!(!bridge_process(&env), "a bridge runs anyway");

    let o = Command::new("chown")
        .args(["-R", BRIDGE_USER, maildir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    env.ok(&strs(&words(
        "route add --source email --address alice@example.org --agent alice",
    )));
    env.wait(20, "the bridge", || bridge_online(&env));
    assert!(env.json(&["lanes"])["bridge"]["problem"].is_null());
}

/// The bridge's user reads the bridge's Redis password and the webhook
/// token: no app, whoever defines it and whatever its kind, runs as it.
#[test]
fn no_app_runs_as_the_bridge_s_user() {
    if !is_root() {
        eprintln!("not root: the bridge runs as the daemon's own user; test skipped");
        return;
    }
    let env = Env::new();
    start_agent(&env, "alice", "oxpm-alice");
    for kind in ["agent", "app", "adapter", "responder"] {
        let e = env.fails(&strs(&words(&format!(
            "start --kind {kind} --name mallory --user {BRIDGE_USER} -- sleep 100000"
        ))));
        assert!(e.contains("the bridge"), "{kind}: {e}");
        assert!(env.status().iter().all(|a| a["name"] != "mallory"));
    }
}
