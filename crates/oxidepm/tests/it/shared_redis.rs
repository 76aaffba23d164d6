//! Several hosts on one shared Redis (`[lanes] redis_url`): real daemons
//! with homes of their own sharing one redis-server over TLS with ACLs
//! (and one Redis Cluster), provisioning only their own users and keys,
//! and claiming agent names in the registry `oxidepm:agents`.

use crate::harness::{read, Env};
use oxidepm_lanes::Secret;
use oxidepm_testkit::shared::{SharedRedis, OXIDEPM_PASSWORD, OXIDEPM_USER};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// A host: a home whose daemon uses `server` as host `id`.
fn host(url: &str, ca: Option<&std::path::Path>, id: &str, lease_secs: u64) -> Env {
    let env = Env::new();
    let ca = ca
        .map(|c| format!("tls_ca_file = \"{}\"\n", c.display()))
        .unwrap_or_default();
    env.daemon_toml(&format!(
        "agents_share_uid = true\n[lanes]\nredis_url = \"{url}\"\n{ca}host_id = \"{id}\"\nlease_secs = {lease_secs}\n"
    ));
    write_credential(&env, 0o600);
    env
}

/// `secrets/lanes_admin` as a person writes it.
fn write_credential(env: &Env, mode: u32) {
    let dir = env.home.join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = dir.join("lanes_admin");
    std::fs::write(&f, format!("{OXIDEPM_USER}\n{OXIDEPM_PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn tls_host(s: &SharedRedis, id: &str, lease_secs: u64) -> Env {
    host(&s.url(), s.tls_files().ca_file.as_deref(), id, lease_secs)
}

fn start_agent(env: &Env, name: &str) {
    env.ok(&[
        "start", "--kind", "agent", "--name", name, "--", "sleep", "100000",
    ]);
}

fn users(c: &mut redis::Connection) -> Vec<String> {
    let mut u: Vec<String> = redis::cmd("ACL").arg("USERS").query(c).unwrap();
    u.sort();
    u
}

fn getuser(c: &mut redis::Connection, user: &str) -> redis::Value {
    redis::cmd("ACL").arg("GETUSER").arg(user).query(c).unwrap()
}

fn owner(c: &mut redis::Connection, name: &str) -> Option<String> {
    let v: Option<String> = redis::cmd("HGET")
        .arg("oxidepm:agents")
        .arg(name)
        .query(c)
        .unwrap();
    v.map(|v| v.split(' ').next().unwrap_or("").to_string())
}

/// When `name`'s lease ends, in ms on the server's clock.
fn lease_end(c: &mut redis::Connection, name: &str) -> u64 {
    let v: String = redis::cmd("HGET")
        .arg("oxidepm:agents")
        .arg(name)
        .query(c)
        .unwrap();
    v.split(' ')
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a lease: {v:?}"))
}

/// The server's clock, in ms.
fn server_ms(c: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    secs * 1000 + micros / 1000
}

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
}

/// Every key on the server, sorted (SCAN as root).
fn all_keys(c: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter(c)
        .unwrap()
        .collect();
    keys.sort();
    keys
}

/// Another tenant of the shared server, made by its root before oxidepm.
fn other_tenant(root: &mut redis::Connection) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("tenant_x")
        .arg("on")
        .arg(">tenant-pw")
        .arg("~tenant:*")
        .arg("+@all")
        .query::<()>(root)
        .unwrap();
    redis::cmd("SET")
        .arg("tenant:k")
        .arg("v")
        .query::<()>(root)
        .unwrap();
    // A user named like an agent's, which no host of oxidepm made.
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("agent_zed")
        .arg("on")
        .arg(">zed-pw")
        .query::<()>(root)
        .unwrap();
}

fn tenant_untouched(root: &mut redis::Connection) {
    let u = users(root);
    assert!(u.contains(&"tenant_x".to_string()), "{u:?}");
    assert!(u.contains(&"agent_zed".to_string()), "{u:?}");
    let v: String = redis::cmd("GET").arg("tenant:k").query(root).unwrap();
    assert_eq!(v, "v");
}

fn app_names(env: &Env) -> Vec<String> {
    env.status()
        .iter()
        .filter_map(|a| a["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn two_hosts_provision_their_own_agents_and_a_name_is_one_host_s() {
    let s = SharedRedis::start(true);
    let mut root = s.root();
    other_tenant(&mut root);
    let a = tls_host(&s, "host-a", 60);
    let b = tls_host(&s, "host-b", 60);
    start_agent(&a, "alice");
    start_agent(&b, "bob");
    let u = users(&mut root);
    for want in ["agent_alice", "agent_bob"] {
        assert!(u.contains(&want.to_string()), "{want} missing: {u:?}");
    }
    // The hosts' own per-host users carry their id; no `sys` is made.
    assert!(!u.contains(&"sys".to_string()), "{u:?}");
    assert_eq!(owner(&mut root, "alice").as_deref(), Some("host-a"));
    assert_eq!(owner(&mut root, "bob").as_deref(), Some("host-b"));
    // Keys in the tagged form: one slot per agent.
    assert!(exists(&mut root, "{alice}:webhook:inbox"));
    assert!(exists(&mut root, "{bob}:webhook:inbox"));

    // B asks for A's name: refused, naming A, and nothing is made on B
    // or changed on the server. (Each host's ops responder makes its
    // agents' ops outboxes a moment after they start: done first.)
    for agent in ["alice", "bob"] {
        let key = format!("{{{agent}}}:ops:outbox");
        b.wait(30, &key, || exists(&mut root, &key));
    }
    let alice_before = getuser(&mut root, "agent_alice");
    let keys_before = all_keys(&mut root);
    let err = b.fails(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    assert!(err.contains("host-a"), "{err}");
    assert!(!app_names(&b).contains(&"alice".to_string()));
    assert!(!b.home.join("secrets/agent_alice").exists());
    assert!(!b.home.join("lanes/alice.sock").exists());
    assert_eq!(getuser(&mut root, "agent_alice"), alice_before);
    assert_eq!(all_keys(&mut root), keys_before);
    assert_eq!(owner(&mut root, "alice").as_deref(), Some("host-a"));

    // `oxidepm lanes` shows the server (no credential), the host and the
    // registry's entry of this host's names.
    let report = a.json(&["lanes"]);
    let shared = &report["shared"];
    assert_eq!(shared["url"], s.url());
    assert_eq!(shared["host_id"], "host-a");
    assert_eq!(shared["names"][0]["name"], "alice");
    assert_eq!(shared["names"][0]["host"], "host-a");
    assert!(shared["names"][0]["lease_ms_left"].as_i64().unwrap() > 0);
    assert!(!report.to_string().contains(OXIDEPM_PASSWORD));

    // Deleting A's agent removes its user, its keys and its claim, and
    // nothing of B's.
    a.ok(&["delete", "alice"]);
    let u = users(&mut root);
    assert!(!u.contains(&"agent_alice".to_string()), "{u:?}");
    assert!(u.contains(&"agent_bob".to_string()), "{u:?}");
    assert!(!exists(&mut root, "{alice}:webhook:inbox"));
    assert!(exists(&mut root, "{bob}:webhook:inbox"));
    assert_eq!(owner(&mut root, "alice"), None);
    assert_eq!(owner(&mut root, "bob").as_deref(), Some("host-b"));
    // The name is free: B may take it now.
    start_agent(&b, "alice");
    assert_eq!(owner(&mut root, "alice").as_deref(), Some("host-b"));
    tenant_untouched(&mut root);
}

#[test]
fn an_agent_cannot_use_another_host_s_agent_s_keys_directly() {
    let s = SharedRedis::start(true);
    let a = tls_host(&s, "host-a", 60);
    let b = tls_host(&s, "host-b", 60);
    start_agent(&a, "alice");
    start_agent(&b, "bob");
    let pw = Secret::read(&b.home.join("secrets/agent_bob")).unwrap();
    // Bob, with his own password, straight to the shared server.
    let mut bob = s.connect("agent_bob", pw.expose()).unwrap();
    let mut root = s.root();
    let before = all_keys(&mut root);
    for args in [
        vec!["XADD", "{alice}:webhook:inbox", "*", "text", "forged"],
        vec!["XRANGE", "{alice}:webhook:inbox", "-", "+"],
        vec![
            "XREADGROUP",
            "GROUP",
            "alice",
            "bob",
            "STREAMS",
            "{alice}:webhook:inbox",
            ">",
        ],
        vec!["XADD", "{alice}:webhook:outbox", "*", "text", "forged"],
        vec!["HGETALL", "oxidepm:agents"],
        vec!["HSET", "oxidepm:agents", "alice", "host-b 99999999999999"],
        vec!["KEYS", "*"],
        vec!["ACL", "USERS"],
    ] {
        let r: redis::RedisResult<redis::Value> =
            redis::cmd(args[0]).arg(&args[1..]).query(&mut bob);
        let e = r.expect_err(&format!("{args:?} allowed"));
        assert!(e.to_string().contains("NOPERM"), "{args:?}: {e}");
    }
    // His own inbox he may read.
    let n: i64 = redis::cmd("XLEN")
        .arg("{bob}:webhook:inbox")
        .query(&mut bob)
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(all_keys(&mut root), before);
    assert_eq!(owner(&mut root, "alice").as_deref(), Some("host-a"));
}

#[test]
fn a_dead_host_s_names_free_up_when_its_lease_ends_or_by_force() {
    let s = SharedRedis::start(true);
    let a = tls_host(&s, "host-a", 3);
    let b = tls_host(&s, "host-b", 3);
    start_agent(&a, "carol");
    start_agent(&a, "dave");
    let mut root = s.root();
    // A renews while it lives: its names outlast their first lease, renewed
    // again and again (seen in the registry, on the server's own clock).
    let first = lease_end(&mut root, "carol");
    let mut renewals = 0;
    let mut last = first;
    oxidepm_testkit::eventually(
        Duration::from_secs(30),
        "carol's first lease to pass, renewed",
        || {
            let end = lease_end(&mut root, "carol");
            if end > last {
                renewals += 1;
                last = end;
            }
            renewals >= 2 && server_ms(&mut root) > first
        },
    );
    assert_eq!(owner(&mut root, "carol").as_deref(), Some("host-a"));
    assert!(b
        .fails(&["start", "--kind", "agent", "--name", "carol", "--", "sleep", "100000"])
        .contains("host-a"));

    // A's daemon dies (SIGKILL): nothing renews its leases.
    a.kill_daemon();
    // Until a person frees it, dave stays A's while the lease lasts;
    // `--force` is required.
    let o = b.run(&["lanes", "release", "dave"]);
    assert!(!o.status.success());
    assert_eq!(owner(&mut root, "dave").as_deref(), Some("host-a"));
    let said = b.ok(&["lanes", "release", "dave", "--force"]);
    assert!(said.contains("host-a"), "{said}");
    assert_eq!(owner(&mut root, "dave"), None);
    start_agent(&b, "dave");
    assert_eq!(owner(&mut root, "dave").as_deref(), Some("host-b"));
    // B holds dave now: forcing its own name is refused.
    let err = b.fails(&["lanes", "release", "dave", "--force"]);
    assert!(err.contains("host-b"), "{err}");
    assert_eq!(owner(&mut root, "dave").as_deref(), Some("host-b"));

    // carol's lease ends on its own.
    b.wait(30, "carol's lease to end", || {
        b.run(&[
            "start", "--kind", "agent", "--name", "carol", "--", "sleep", "100000",
        ])
        .status
        .success()
    });
    assert_eq!(owner(&mut root, "carol").as_deref(), Some("host-b"));
}

#[test]
fn a_readable_credential_and_a_password_in_the_url_are_refused() {
    let s = SharedRedis::start(true);
    let a = tls_host(&s, "host-a", 60);
    write_credential(&a, 0o644);
    let err = a.fails(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    assert!(
        err.contains("lanes_admin") && err.contains("chmod 600"),
        "{err}"
    );
    let mut root = s.root();
    assert!(!users(&mut root).contains(&"agent_alice".to_string()));
    assert_eq!(owner(&mut root, "alice"), None);
    assert!(!app_names(&a).contains(&"alice".to_string()));

    let b = Env::new();
    b.daemon_toml(&format!(
        "agents_share_uid = true\n[lanes]\nredis_url = \"rediss://oxidepm:{OXIDEPM_PASSWORD}@127.0.0.1:{}\"\n",
        s.port
    ));
    let err = b.fails(&["ping"]);
    assert!(err.contains("daemon.toml"), "{err}");
    // The answer does not repeat the password; the daemon's log (in the
    // home, beside daemon.toml) says what to do instead.
    assert!(!err.contains(OXIDEPM_PASSWORD), "{err}");
    let log = read(&b.home.join("daemon.log"));
    assert!(log.contains("secrets/lanes_admin"), "{log}");
    assert!(!b.home.join("redis").exists(), "nothing set up");
}

#[test]
fn a_single_host_daemon_writes_no_registry_and_keeps_plain_keys() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    start_agent(&env, "alice");
    let mut sys = crate::lanes::host_conn(&env, "sys");
    assert!(!exists(&mut sys, "oxidepm:agents"));
    assert!(exists(&mut sys, "alice:webhook:inbox"));
    assert!(!exists(&mut sys, "{alice}:webhook:inbox"));
    let report = env.json(&["lanes"]);
    assert!(report.get("shared").is_none(), "{report}");
    assert!(!env.home.join("secrets/lanes_admin").exists());
    assert!(read(&env.home.join("redis/proxy.json")).contains("\"key_form\":\"plain\""));
}

#[test]
fn agents_reach_their_lanes_on_the_shared_server() {
    let s = SharedRedis::start(true);
    let a = tls_host(&s, "host-a", 60);
    let b = tls_host(&s, "host-b", 60);
    start_agent(&a, "alice");
    start_agent(&b, "bob");
    let mut alice = crate::lanes::conn(&a.home.join("lanes/alice.sock"));
    let mut bob = crate::lanes::conn(&b.home.join("lanes/bob.sock"));
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut alice).unwrap();
    assert_eq!(who, "agent_alice");
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut bob).unwrap();
    assert_eq!(who, "agent_bob");
    // Through his socket, bob cannot touch alice's keys either.
    let r: redis::RedisResult<redis::Value> = redis::cmd("XADD")
        .arg("{alice}:webhook:inbox")
        .arg("*")
        .arg("t")
        .arg("x")
        .query(&mut bob);
    assert!(r.is_err());
    let mut root = s.root();
    let n: i64 = redis::cmd("XLEN")
        .arg("{alice}:webhook:inbox")
        .query(&mut root)
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn on_a_cluster_the_users_are_on_every_node_replicas_too() {
    let c = oxidepm_testkit::cluster::Cluster::start(false);
    let a = host(&c.url(), None, "host-a", 60);
    start_agent(&a, "alice");
    let ports: Vec<u16> = c.nodes.iter().map(|n| n.port).collect();
    assert_eq!(ports.len(), 6);
    for p in &ports {
        let mut n = c.node(*p);
        let u = users(&mut n);
        assert!(u.contains(&"agent_alice".to_string()), "node {p}: {u:?}");
        assert!(u.iter().any(|u| u == "bridge@host-a"), "node {p}: {u:?}");
    }
    let mut n = c.node(c.primary_of("{alice}:webhook:inbox"));
    assert!(exists(&mut n, "{alice}:webhook:inbox"));
    let mut n = c.node(c.primary_of("oxidepm:agents"));
    assert_eq!(owner(&mut n, "alice").as_deref(), Some("host-a"));
    // Deleting it deletes the user on every node.
    a.ok(&["delete", "alice"]);
    for p in &ports {
        let mut n = c.node(*p);
        assert!(
            !users(&mut n).contains(&"agent_alice".to_string()),
            "node {p}"
        );
    }
}

#[test]
fn migrate_keys_moves_an_agent_s_plain_streams_to_the_tagged_form() {
    let s = SharedRedis::start(false);
    let env = host(&s.url(), None, "host-a", 60);
    let toml = read(&env.home.join("daemon.toml"));
    env.daemon_toml(&toml.replace("[lanes]\n", "[lanes]\nkey_form = \"plain\"\n"));
    start_agent(&env, "alice");
    let mut root = s.root();
    assert!(exists(&mut root, "alice:webhook:inbox"));
    let id: String = redis::cmd("XADD")
        .arg("alice:webhook:inbox")
        .arg("*")
        .arg("text")
        .arg("kept")
        .query(&mut root)
        .unwrap();
    // A key of another tenant that looks like the agent's is not its.
    redis::cmd("SET")
        .arg("alicex:webhook:inbox")
        .arg("v")
        .query::<()>(&mut root)
        .unwrap();
    env.ok(&["kill"]);
    env.daemon_toml(&toml);
    env.ok(&["ping"]);
    let out = env.json(&["lanes", "migrate-keys"]);
    assert!(
        out["migrated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m[0] == "alice:webhook:inbox" && m[1] == "{alice}:webhook:inbox"),
        "{out}"
    );
    assert!(!exists(&mut root, "alice:webhook:inbox"));
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("{alice}:webhook:inbox")
        .arg("-")
        .arg("+")
        .query(&mut root)
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, id);
    // The agent's group came along.
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("{alice}:webhook:inbox")
        .query(&mut root)
        .unwrap();
    assert_eq!(groups.len(), 1);
    assert!(exists(&mut root, "alicex:webhook:inbox"));
}
