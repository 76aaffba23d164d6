//! Agents' lanes on a shared Redis reached over TLS, in the tagged key
//! form: the proxy trusts the CA it is given and nothing else.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod support;

use oxidepm_testkit::shared::SharedRedis;
use oxidepm_testkit::tls::Certs;
use oxidepm_testkit::{bulk, words, Value};
use support::{agent_setuser, inbox, outbox, tagged, ProxyProcess};

/// A TLS shared server with alice's and bob's users and groups, as the
/// daemon provisions them.
fn shared() -> SharedRedis {
    tagged();
    let redis = SharedRedis::start(true);
    let mut root = redis.root();
    for a in ["alice", "bob"] {
        let _: () = redis::cmd("ACL")
            .arg(agent_setuser(a))
            .query(&mut root)
            .unwrap();
        for f in support::FAMILIES {
            let _: () = redis::cmd("XGROUP")
                .arg(&["CREATE", &inbox(a, f), a, "0", "MKSTREAM"])
                .query(&mut root)
                .unwrap();
        }
    }
    redis
}

fn xadd(root: &mut redis::Connection, key: &str, text: &str) -> String {
    redis::cmd("XADD")
        .arg(&[key, "*", "text", text])
        .query(root)
        .unwrap()
}

fn xlen(root: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("XLEN").arg(key).query(root).unwrap()
}

#[test]
fn lanes_work_through_tls_and_stay_apart() {
    let redis = shared();
    let proxy = ProxyProcess::start(&redis.url(), &redis.tls_files(), &["alice", "bob"]);
    let mut root = redis.root();
    let mut alice = proxy.client("alice");
    assert_eq!(alice.whoami(), bulk("agent_alice"));

    // Out: the shared form lands in alice's tagged outbox.
    let id = alice.cmd(&["XADD", "webhook:outbox", "*", "text", "out"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    assert_eq!(xlen(&mut root, &outbox("alice", "webhook")), 1);
    let id = alice.cmd(&["XADD", &outbox("alice", "email"), "*", "text", "out"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");

    // In: one read over both inboxes, then acknowledged.
    xadd(&mut root, &inbox("alice", "webhook"), "in 1");
    xadd(&mut root, &inbox("alice", "email"), "in 2");
    let (w, e) = (inbox("alice", "webhook"), inbox("alice", "email"));
    let got = alice.cmd(&words(&format!(
        "XREADGROUP GROUP alice c1 COUNT 10 STREAMS {w} {e} > >"
    )));
    let s = got.strings();
    assert!(
        s.contains(&"in 1".into()) && s.contains(&"in 2".into()),
        "{got:?}"
    );
    let ids: Vec<String> = s
        .iter()
        .filter(|x| x.contains('-') && x.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .cloned()
        .collect();
    assert_eq!(alice.cmd(&["XACK", &w, "alice", &ids[0]]), Value::Int(1));
    assert_eq!(alice.cmd(&["XACK", &e, "alice", &ids[1]]), Value::Int(1));

    // Bob's keys, in either form, are not alice's.
    xadd(&mut root, &inbox("bob", "webhook"), "for bob");
    let before = xlen(&mut root, &inbox("bob", "webhook"));
    for c in [
        words("XADD {bob}:webhook:outbox * text spoof"),
        words("XADD bob:webhook:outbox * text spoof"),
        words("XRANGE {bob}:webhook:inbox - +"),
        words("XREADGROUP GROUP bob c STREAMS {bob}:webhook:inbox >"),
        words("XADD {bob}:webhook:inbox * text spoof"),
        words("CLUSTER SLOTS"),
    ] {
        let r = alice.cmd(&c);
        assert!(matches!(r, Value::Error(_)), "{c:?}: {r:?}");
    }
    assert_eq!(xlen(&mut root, &inbox("bob", "webhook")), before);
    assert_eq!(xlen(&mut root, &outbox("bob", "webhook")), 0);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("bob:webhook:outbox")
        .query(&mut root)
        .unwrap();
    assert_eq!(exists, 0);
    let mut bob = proxy.client("bob");
    assert_eq!(bob.whoami(), bulk("agent_bob"));
}

#[test]
fn a_server_signed_by_another_ca_is_refused() {
    let redis = shared();
    let other = tempfile::tempdir().unwrap();
    let wrong = Certs::generate(other.path());
    let tls = oxidepm_lanes::TlsFiles {
        ca_file: Some(wrong.ca.clone()),
        ..Default::default()
    };
    let proxy = ProxyProcess::start(&redis.url(), &tls, &["alice"]);
    let mut alice = proxy.client("alice");
    let r = alice.cmd(&["XADD", "webhook:outbox", "*", "text", "leak?"]);
    assert!(r.error_starts("ERR lane unavailable"), "{r:?}");
    alice.assert_closed();
    // Nothing reached the server.
    assert_eq!(xlen(&mut redis.root(), &outbox("alice", "webhook")), 0);
}

#[test]
fn a_plain_client_of_a_tls_server_gets_an_error_not_a_hang() {
    let redis = shared();
    // The same port, without TLS: the server never answers in plain text.
    let url = redis.url().replace("rediss://", "redis://");
    let proxy = ProxyProcess::start(&url, &Default::default(), &["alice"]);
    let mut alice = proxy.client("alice");
    let r = alice.cmd(&["PING"]);
    assert!(r.error_starts("ERR lane unavailable"), "{r:?}");
}

/// A redis-server that asks every client for a certificate of its CA
/// (`tls-auth-clients yes`); killed on drop.
struct MutualTls {
    /// Its files, removed on drop.
    _dir: tempfile::TempDir,
    port: u16,
    certs: Certs,
    child: std::process::Child,
}

impl MutualTls {
    fn start() -> MutualTls {
        use oxidepm_testkit::shared::{acl_file, connect, ROOT_PASSWORD, ROOT_USER};
        let dir = tempfile::tempdir().unwrap();
        let certs = Certs::generate(dir.path());
        std::fs::write(dir.path().join("users.acl"), acl_file()).unwrap();
        let port = oxidepm_testkit::free_port();
        let conf = format!(
            "port 0\ntls-port {port}\n{}bind 127.0.0.1\nprotected-mode no\n\
             aclfile {d}/users.acl\ndir {d}\nsave \"\"\nappendonly no\nlogfile {d}/redis.log\n",
            certs.server_conf(true),
            d = dir.path().display()
        );
        std::fs::write(dir.path().join("redis.conf"), conf).unwrap();
        let child = std::process::Command::new("redis-server")
            .arg(dir.path().join("redis.conf"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let s = MutualTls {
            _dir: dir,
            port,
            certs,
            child,
        };
        oxidepm_testkit::eventually(std::time::Duration::from_secs(20), "redis-server", || {
            connect(port, Some(&s.certs), ROOT_USER, ROOT_PASSWORD).is_ok()
        });
        s
    }

    fn root(&self) -> redis::Connection {
        use oxidepm_testkit::shared::{connect, ROOT_PASSWORD, ROOT_USER};
        connect(self.port, Some(&self.certs), ROOT_USER, ROOT_PASSWORD).unwrap()
    }
}

impl Drop for MutualTls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_the_configured_one() {
    tagged();
    let redis = MutualTls::start();
    let _: () = redis::cmd("ACL")
        .arg(agent_setuser("alice"))
        .query(&mut redis.root())
        .unwrap();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let with_cert = oxidepm_lanes::TlsFiles {
        ca_file: Some(redis.certs.ca.clone()),
        cert_file: Some(redis.certs.client_cert.clone()),
        key_file: Some(redis.certs.client_key.clone()),
    };
    let proxy = ProxyProcess::start(&url, &with_cert, &["alice"]);
    let id = proxy
        .client("alice")
        .cmd(&["XADD", "webhook:outbox", "*", "text", "with cert"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    assert_eq!(xlen(&mut redis.root(), &outbox("alice", "webhook")), 1);
    drop(proxy);

    // Without the certificate the server closes the handshake.
    let ca_only = oxidepm_lanes::TlsFiles {
        ca_file: Some(redis.certs.ca.clone()),
        ..Default::default()
    };
    let proxy = ProxyProcess::start(&url, &ca_only, &["alice"]);
    let r = proxy
        .client("alice")
        .cmd(&["XADD", "webhook:outbox", "*", "text", "without"]);
    assert!(r.error_starts("ERR lane unavailable"), "{r:?}");
    assert_eq!(xlen(&mut redis.root(), &outbox("alice", "webhook")), 1);
}

#[test]
fn a_responder_answers_only_pending_requests_in_the_tagged_form() {
    let redis = shared();
    let mut root = redis.root();
    let responder = oxidepm_lanes::AclUser::Responder("triage".into());
    for (user, extra) in [
        (
            oxidepm_lanes::AclUser::Agent("alice".parse().unwrap()),
            &["triage"][..],
        ),
        (
            oxidepm_lanes::AclUser::Agent("bob".parse().unwrap()),
            &["triage"][..],
        ),
        (responder, &[][..]),
    ] {
        let _: () = redis::cmd("ACL")
            .arg(support::setuser(user, extra))
            .query(&mut root)
            .unwrap();
    }
    // As the daemon makes them: the responder's group on every agent's
    // outbox of its family, the agent's on its inbox.
    for a in ["alice", "bob"] {
        for (key, group) in [(outbox(a, "triage"), "triage"), (inbox(a, "triage"), a)] {
            let _: () = redis::cmd("XGROUP")
                .arg(&["CREATE", &key, group, "0", "MKSTREAM"])
                .query(&mut root)
                .unwrap();
        }
    }
    let proxy = ProxyProcess::start_with(
        &redis.url(),
        &redis.tls_files(),
        &["alice", "bob"],
        &["triage"],
    );
    let mut alice = proxy.client("alice");
    let Value::Bulk(request) = alice.cmd(&["XADD", "triage:outbox", "*", "text", "help"]) else {
        panic!("alice's request refused");
    };
    let request = String::from_utf8(request).unwrap();
    let mut triage = proxy.client("triage");
    assert_eq!(triage.whoami(), bulk("resp_triage"));
    let a_out = outbox("alice", "triage");
    let got = triage.cmd(&words(&format!(
        "XREADGROUP GROUP triage r1 STREAMS {a_out} >"
    )));
    assert!(got.strings().contains(&"help".to_string()), "{got:?}");

    // A reply to bob, who asked nothing, is refused; alice's goes through.
    let b_in = inbox("bob", "triage");
    let r = triage.cmd(&[
        "XADD", &b_in, "MAXLEN", "~", "100", "*", "re", &request, "text", "spoof",
    ]);
    assert!(r.error_starts("NOPERM"), "{r:?}");
    assert_eq!(xlen(&mut root, &b_in), 0);
    let a_in = inbox("alice", "triage");
    let r = triage.cmd(&[
        "XADD", &a_in, "MAXLEN", "~", "100", "*", "re", &request, "text", "answer",
    ]);
    assert!(matches!(r, Value::Bulk(_)), "{r:?}");
    let got = alice.cmd(&["XREADGROUP", "GROUP", "alice", "c", "STREAMS", &a_in, ">"]);
    assert!(got.strings().contains(&"answer".to_string()), "{got:?}");
    // The reply acknowledged its request, in one step with appending it.
    assert_eq!(
        triage.cmd(&["XACK", &a_out, "triage", &request]),
        Value::Int(0)
    );
    let r = triage.cmd(&[
        "XADD", &a_in, "MAXLEN", "~", "100", "*", "re", &request, "text", "twice",
    ]);
    assert!(r.error_starts("NOPERM reply refused"), "{r:?}");
}
