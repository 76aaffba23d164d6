//! A real client library (redis-rs) through a real lane of a real daemon:
//! its transactions run once or not at all, its handshakes and its
//! start-up group creation work with default options.

use crate::harness::Env;
use crate::lanes::{conn, host_conn, run, start_agents};

const INBOX: &str = "alice:webhook:inbox";
const OUTBOX: &str = "alice:webhook:outbox";

fn xlen(sys: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("XLEN").arg(key).query(sys).unwrap()
}

#[test]
fn a_library_transaction_runs_once_or_not_at_all() {
    let env = Env::new();
    start_agents(&env, &["alice"]);
    let mut sys = host_conn(&env, "sys");
    let mut bridge = host_conn(&env, "bridge");
    let _: String = redis::cmd("XADD")
        .arg(INBOX)
        .arg("*")
        .arg("text")
        .arg("question")
        .query(&mut bridge)
        .unwrap();
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("alice")
        .arg("c1")
        .arg("STREAMS")
        .arg(INBOX)
        .arg(">")
        .query(&mut alice)
        .unwrap();
    let id = read.keys[0].ids[0].id.clone();

    // The answer and the acknowledgement, atomically (MULTI … EXEC).
    let (_answer, acked): (String, i64) = redis::pipe()
        .atomic()
        .xadd(OUTBOX, "*", &[("text", "answer")])
        .xack(INBOX, "alice", &[&id])
        .query(&mut alice)
        .unwrap();
    assert_eq!(acked, 1);
    assert_eq!(xlen(&mut sys, OUTBOX), 1);

    // A transaction with a refused command in it fails as a whole: the
    // client is told so, and nothing of it ran.
    let failed = redis::pipe()
        .atomic()
        .xadd(OUTBOX, "*", &[("text", "again")])
        .cmd("KEYS")
        .arg("*")
        .xadd(OUTBOX, "*", &[("text", "and again")])
        .query::<redis::Value>(&mut alice);
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(xlen(&mut sys, OUTBOX), 1);
    // The connection goes on.
    let pong: String = redis::cmd("PING").query(&mut alice).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn handshakes_and_the_start_up_group_idiom_work() {
    let env = Env::new();
    start_agents(&env, &["alice"]);
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("worker-1")
        .query(&mut alice)
        .unwrap();
    let name: Option<String> = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query(&mut alice)
        .unwrap();
    assert_eq!(name.as_deref(), Some("worker-1"));
    let info: String = redis::cmd("INFO").query(&mut alice).unwrap();
    assert!(info.contains("loading:0"), "{info}");
    assert!(info.contains("redis_version:"), "{info}");
    // The daemon made the group: creating it again is the usual BUSYGROUP.
    let made = run(
        &mut alice,
        &["XGROUP", "CREATE", INBOX, "alice", "$", "MKSTREAM"],
    );
    assert!(
        matches!(&made, Err(e) if e.starts_with("BUSYGROUP")),
        "{made:?}"
    );
    // Another group is not the agent's to make.
    let other = run(&mut alice, &["XGROUP", "CREATE", INBOX, "mine", "$"]);
    assert!(
        matches!(&other, Err(e) if e.starts_with("NOPERM")),
        "{other:?}"
    );
    let mut sys = host_conn(&env, "sys");
    let groups: redis::Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(INBOX)
        .query(&mut sys)
        .unwrap();
    assert!(!format!("{groups:?}").contains("mine"), "{groups:?}");
}
