//! Slots are not taken without asking: the caps of daemon.sock and
//! agent.sock (per socket, per peer, slots kept for a person), idle
//! connections that blank lines do not keep alive, the CLI's deadlines, and
//! commands that start the daemon at the same time.

use crate::harness::{bin, read, Env, Raw};
use serde_json::json;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A value of /proc/<pid>/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Connections of `socket` that process `pid` holds open: its
/// descriptors of connected sockets that carry the socket's path (the
/// daemon's end of each accepted connection does; clients' ends do not).
fn held(pid: u32, socket: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let path = socket.to_string_lossy();
    // Num RefCount Protocol Flags Type St Inode Path; St 03: connected.
    let inodes: std::collections::HashSet<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 8 && f[5] == "03" && f[7] == path)
        .map(|f| f[6].to_string())
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|i| inodes.contains(i))
        })
        .count()
}

/// Starts an app that holds `n` connections to `socket` and does nothing.
fn holder_app(env: &Env, name: &str, socket: &str, n: usize) {
    let script = "import socket, sys, time\n\
                  held = []\n\
                  for _ in range(int(sys.argv[2])):\n\
                  \x20   s = socket.socket(socket.AF_UNIX)\n\
                  \x20   s.connect(sys.argv[1])\n\
                  \x20   held.append(s)\n\
                  open(sys.argv[3], 'w').write('connected')\n\
                  time.sleep(3600)\n";
    let path = env.path(&format!("{name}.py"));
    std::fs::write(&path, script).unwrap();
    let sock = env.home.join(socket);
    let done = env.path(&format!("{name}.done"));
    env.ok(&[
        "start",
        "--name",
        name,
        "--restart",
        "never",
        "--",
        "python3",
        &path.to_string_lossy(),
        &sock.to_string_lossy(),
        &n.to_string(),
        &done.to_string_lossy(),
    ]);
    env.wait(30, &format!("{name} to connect"), || {
        read(&done) == "connected"
    });
}

#[test]
fn a_flood_of_idle_connections_leaves_a_persons_status_answered_and_the_daemon_small() {
    let env = Env::new();
    let daemon = env.daemon_pid();
    let rss_before = status_kb(daemon, "VmRSS:");
    let sock = env.home.join("daemon.sock");

    // Apps that try to hold far more than their share, then this process
    // (outside the daemon's tree, as a person's shell is) with 3000.
    for i in 0..3 {
        holder_app(&env, &format!("hog{i}"), "daemon.sock", 150);
    }
    let flood: Vec<UnixStream> = (0..3000)
        .map(|_| UnixStream::connect(env.home.join("daemon.sock")).unwrap())
        .collect();

    // A person's command is answered, by the same daemon.
    let status = env.json(&["status"]);
    assert_eq!(status.as_array().unwrap().len(), 3);
    assert_eq!(env.daemon_pid(), daemon);

    // The daemon kept no more connections than its cap (256), and the
    // memory they cost stayed small.
    let open = held(daemon, &sock);
    assert!(open <= 256, "the daemon holds {open} connections");
    let grown = status_kb(daemon, "VmRSS:").saturating_sub(rss_before);
    assert!(grown < 16 * 1024, "the daemon grew by {grown} kB");
    drop(flood);
    assert_eq!(env.json(&["ping"])["pong"], true);
}

#[test]
fn a_person_is_served_from_the_kept_slots_while_apps_hold_the_rest() {
    let env = Env::new();
    env.daemon_toml(
        "daemon_max_connections = 12\ndaemon_max_connections_per_peer = 4\n\
         daemon_reserved_connections = 2\n",
    );
    let daemon = env.daemon_pid();
    let sock = env.home.join("daemon.sock");
    // One peer gets 4 connections, not 5.
    let mut mine: Vec<Raw> = (0..4).map(|_| env.raw("daemon.sock")).collect();
    for c in mine.iter_mut() {
        assert_eq!(c.call(json!({"id": 1, "op": "ping"}))["ok"], true);
    }
    let mut fifth = env.raw("daemon.sock");
    assert!(
        fifth.is_refused(),
        "a fifth connection of one peer is closed"
    );
    drop((mine, fifth));
    env.wait(20, "the connections to close", || held(daemon, &sock) == 0);

    // Four apps ask for 4 connections each: 16 wanted, 10 may be held by
    // apps; the last 2 slots are kept for a person.
    for i in 0..4 {
        holder_app(&env, &format!("hog{i}"), "daemon.sock", 4);
    }
    env.wait(20, "the apps to hold 10 connections", || {
        held(daemon, &sock) == 10
    });
    for _ in 0..3 {
        assert_eq!(env.json(&["status"]).as_array().unwrap().len(), 4);
    }
    // The person's connections took a kept slot, not an app's.
    env.wait(20, "the apps to hold 10 connections still", || {
        held(daemon, &sock) == 10
    });
}

/// Runs the CLI inside an app, on agent.sock, and returns what it printed.
fn whoami_inside_on_agent_sock(env: &Env, name: &str) -> String {
    let out = env.path(&format!("{name}.out"));
    let err = env.path(&format!("{name}.err"));
    let script = format!(
        "{} whoami --json > {} 2> {}; sleep 1000",
        bin("oxidepm").display(),
        out.display(),
        err.display()
    );
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    let socket = format!("OXIDEPM_SOCKET={}", env.home.join("agent.sock").display());
    env.ok(&[
        "start", "--name", name, "--env", &home, "--env", &socket, "--", "sh", "-c", &script,
    ]);
    env.wait(30, "the inner CLI", || {
        !read(&out).is_empty() || !read(&err).is_empty()
    });
    match read(&out) {
        o if o.is_empty() => read(&err),
        o => o,
    }
}

/// Writes a blank line on each stream every 100 ms until `stop`.
fn blank_lines(streams: Vec<UnixStream>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for mut s in &streams {
                let _ = s.write_all(b"\n");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

#[test]
fn one_client_holding_every_agent_slot_does_not_lock_out_another() {
    let env = Env::new();
    env.daemon_toml("agent_max_connections = 8\n");
    env.daemon_pid();
    let mut held: Vec<Raw> = (0..8).map(|_| env.raw("agent.sock")).collect();
    for c in held.iter_mut() {
        assert_eq!(c.call(json!({"id": 1, "op": "ping"}))["ok"], true);
    }
    let mut ninth = env.raw("agent.sock");
    assert!(
        ninth.is_refused(),
        "the holder's ninth connection is closed"
    );
    // The holder keeps its connections "busy" with blank lines.
    let stop = Arc::new(AtomicBool::new(false));
    let streams = held.iter().map(|c| c.stream.try_clone().unwrap()).collect();
    let writer = blank_lines(streams, stop.clone());

    // Another AI client, an app's own code, is served all the same.
    let said = whoami_inside_on_agent_sock(&env, "other");
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!((&v["class"], &v["socket"]), (&json!("ai"), &json!("agent")));
}

#[test]
fn blank_lines_and_parts_of_a_line_do_not_keep_a_connection_open() {
    let env = Env::new();
    env.daemon_toml("agent_idle_timeout_secs = 1\n");
    env.daemon_pid();
    let blank = UnixStream::connect(env.home.join("agent.sock")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = blank_lines(vec![blank.try_clone().unwrap()], stop.clone());
    // A slow request line: one byte at a time, never finished.
    let mut slow = UnixStream::connect(env.home.join("agent.sock")).unwrap();
    let slow_writer = {
        let mut s = slow.try_clone().unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = s.write_all(b" ");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    for mut s in [&blank, &slow] {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 64];
        // A close with our unread bytes still queued at the daemon reaches
        // us as a reset rather than an end of file; both mean closed.
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the daemon kept an idle connection open: {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    slow_writer.join().unwrap();
    let _ = slow.flush();
    // A connection that asks real questions is served.
    let mut busy = env.raw("agent.sock");
    assert_eq!(busy.call(json!({"id": 1, "op": "ping"}))["ok"], true);
}

/// A socket at the home's daemon.sock that accepts and never answers.
struct Mute {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: std::path::PathBuf,
}

impl Mute {
    fn new(env: &Env) -> Mute {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&env.home)
            .unwrap();
        let path = env.home.join("daemon.sock");
        let l = UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                if let Ok((c, _)) = l.accept() {
                    held.push(c);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Mute {
            stop,
            thread: Some(thread),
            path,
        }
    }
}

impl Drop for Mute {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // No socket left behind for the harness to start a daemon behind.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn a_daemon_that_accepts_but_never_answers_gets_a_clear_error() {
    let env = Env::new();
    let mute = Mute::new(&env);
    let o = env
        .cmd()
        .env("OXIDEPM_TIMEOUT", "1")
        .args(["status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("did not answer within 1 s"), "{err}");
    assert!(err.contains(&*mute.path.to_string_lossy()), "{err}");
    assert!(err.contains("daemon.log"), "{err}");
    // It did not start a daemon of its own behind the silent one.
    assert!(!env.home.join("daemon.lock").exists());

    let o = env
        .cmd()
        .env("OXIDEPM_TIMEOUT", "soon")
        .args(["status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("OXIDEPM_TIMEOUT=\"soon\""), "{err}");
    drop(mute);
}

#[test]
fn a_slow_answer_from_a_working_daemon_and_a_quiet_follow_are_waited_for() {
    let env = Env::new();
    // It ignores SIGTERM: stopping it takes the 3 s kill timeout.
    env.ok(&[
        "start",
        "--name",
        "stubborn",
        "--kill-timeout",
        "3000",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while true; do sleep 1; done",
    ]);
    env.ok(&["start", "--name", "quiet", "--", "sleep", "3600"]);
    let mut follow = env
        .cmd()
        .env("OXIDEPM_TIMEOUT", "1")
        .args(["logs", "quiet", "--follow"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = env
        .cmd()
        .env("OXIDEPM_TIMEOUT", "1")
        .args(["stop", "stubborn"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(env.app("stubborn")["status"], "stopped");
    // The follow, silent for longer than the timeout, is still waiting.
    assert!(follow.try_wait().unwrap().is_none(), "logs --follow ended");
    let _ = follow.kill();
    let _ = follow.wait();
}

#[test]
fn commands_started_at_once_without_a_daemon_all_succeed_with_one_daemon() {
    let env = Env::new();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let env = Arc::new(env);
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let env = env.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                env.run(&["ping", "--json"])
            })
        })
        .collect();
    let mut pids = Vec::new();
    for r in runs {
        let o = r.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        pids.push(v["pid"].as_u64().unwrap());
    }
    pids.dedup();
    assert_eq!(pids.len(), 1, "more than one daemon: {pids:?}");
}
