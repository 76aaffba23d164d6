//! Socket activation, peer uids, and the binary as a daemon would run it.

use super::harness::{bulk, Agent, Client, Redis, TestProxy};
use oxidepm_sys::activation::ActivatedSocket;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn wait_for<R: oxidepm_testkit::Ready>(what: &str, ok: impl FnMut() -> R) -> R::Output {
    oxidepm_testkit::eventually(Duration::from_secs(20), what, ok)
}

fn inherited(dir: &Path, name: &str) -> (PathBuf, ActivatedSocket) {
    let path = dir.join(format!("{name}.sock"));
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    (
        path,
        ActivatedSocket {
            name: name.into(),
            fd: OwnedFd::from(l),
        },
    )
}

#[test]
fn inherited_sockets_are_served_by_name() {
    let redis = Redis::start(&["alice", "zed"]);
    let act = redis.dir.path().join("activated");
    std::fs::create_dir(&act).unwrap();
    let (alice_path, alice) = inherited(&act, "alice");
    let (zed_path, zed) = inherited(&act, "zed");
    let proxy = TestProxy::start_with(&redis, &[Agent::new("alice")], "", vec![alice, zed]);
    assert_eq!(Client::connect(&alice_path).whoami(), bulk("agent_alice"));
    // Not bound again in lanes_dir: the inherited socket is alice's lane.
    assert!(!proxy.socket("alice").exists());

    // An inherited socket whose agent is not configured says so.
    let mut z = Client::connect(&zed_path);
    let r = z.read();
    assert!(
        r.error_starts("ERR lane unavailable: agent 'zed' is not configured"),
        "{r:?}"
    );
    z.assert_closed();

    let report = proxy.reconfigure(&[Agent::new("alice"), Agent::new("zed")]);
    assert_eq!(report.added, ["zed"]);
    assert_eq!(Client::connect(&zed_path).whoami(), bulk("agent_zed"));

    // Removing an activated agent keeps the socket (systemd's) but closes
    // the lane and its connections.
    let mut held = Client::connect(&alice_path);
    assert_eq!(held.whoami(), bulk("agent_alice"));
    let report = proxy.reconfigure(&[Agent::new("zed")]);
    assert_eq!(report.removed, ["alice"]);
    held.assert_closing();
    assert!(alice_path.exists());
    // (The lane's old accept loop is aborted asynchronously: a connection
    // it took in its last moment is closed without a word; try again.)
    let answer = wait_for("the unavailable answer", || {
        Client::connect(&alice_path).try_read()
    });
    assert!(answer.error_starts("ERR lane unavailable"));
}

/// Runs `redis-cli -s <socket> ACL WHOAMI` as `uid`.
fn whoami_as(uid: u32, socket: &Path) -> String {
    let out = Command::new("redis-cli")
        .args(["-s"])
        .arg(socket)
        .args(["ACL", "WHOAMI"])
        .uid(uid)
        .gid(uid)
        .env("HOME", "/")
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli must be installed (Debian: redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_socket_belongs_to_the_agent_and_other_uids_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to act as other uids");
        return;
    }
    let redis = Redis::start(&["alice"]);
    // 0666 only so that a stranger can reach the proxy's own check.
    let proxy = TestProxy::start(
        &redis,
        &[Agent::new("alice").with(r#""uid": 65534, "socket_mode": 438"#)],
    );
    let sock = proxy.socket("alice");
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!((m.uid(), m.permissions().mode() & 0o777), (65534, 0o666));
    let lanes = std::fs::metadata(&proxy.lanes).unwrap();
    assert_eq!(lanes.permissions().mode() & 0o777, 0o711);

    assert_eq!(whoami_as(65534, &sock).trim(), "agent_alice");
    let stranger = whoami_as(65533, &sock);
    assert!(
        stranger.contains("uid 65533 may not use the lane of agent 'alice'"),
        "{stranger}"
    );
    // The proxy's own uid (root here) is allowed.
    assert_eq!(proxy.client("alice").whoami(), bulk("agent_alice"));
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

#[test]
fn the_binary_is_socket_activated_reloads_on_sighup_and_stops_on_sigterm() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_oxidepm-lane-proxy"));
    let redis = Redis::start(&["alice", "bob", "carol"]);
    let base = redis.dir.path();
    let lanes = base.join("lanes");
    let act = base.join("systemd");
    std::fs::create_dir(&act).unwrap();
    let alice_sock = act.join("alice.sock");
    let config = base.join("proxy.json");
    let write_config = |agents: &[&str]| {
        let list: Vec<String> = agents
            .iter()
            .map(|a| {
                let pw = redis.password_file(&oxidepm_testkit::agent_user(a));
                format!(r#"{{"name": "{a}", "password_file": "{}"}}"#, pw.display())
            })
            .collect();
        std::fs::write(
            &config,
            format!(
                r#"{{"upstream": "{}", "lanes_dir": "{}", "agents": [{}]}}"#,
                redis.socket.display(),
                lanes.display(),
                list.join(", ")
            ),
        )
        .unwrap();
    };
    write_config(&["alice", "bob"]);
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(
        Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(&alice_sock)
            .arg("--fdname=alice")
            .arg(&bin)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-socket-activate must be installed (Debian: systemd)"),
    );
    let pid = child.0.id();
    // The first connection starts the proxy (systemd-socket-activate execs
    // it in place, keeping the pid).
    let alice = || Client::try_connect(&alice_sock);
    assert_eq!(
        wait_for("the activation socket", alice).whoami(),
        bulk("agent_alice")
    );
    let mut bob = wait_for("bob's socket", || {
        Client::try_connect(&lanes.join("bob.sock"))
    });
    assert_eq!(bob.whoami(), bulk("agent_bob"));

    write_config(&["alice", "bob", "carol"]);
    signal(pid, nix::sys::signal::Signal::SIGHUP);
    let carol = || Client::try_connect(&lanes.join("carol.sock"));
    assert_eq!(
        wait_for("carol's socket", carol).whoami(),
        bulk("agent_carol")
    );
    assert_eq!(bob.whoami(), bulk("agent_bob"));

    signal(pid, nix::sys::signal::Signal::SIGTERM);
    let status = wait_for("the proxy to exit", || child.0.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
    assert!(!lanes.join("bob.sock").exists());
    assert!(!lanes.join("carol.sock").exists());
}
