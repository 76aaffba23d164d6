//! `reload`: a new process healthy before the old one stops, with a
//! client polling the port all along; a new version that never gets
//! healthy; an app without a check.

use crate::harness::{alive, Env};
use crate::verbs::has_event;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A server that listens with SO_REUSEPORT (so two of it can serve one
/// port) and answers each connection with its pid. It reads `mode` in its
/// directory at start: `good` listens and then writes `ready.<pid>`, which
/// is what its health check asks; anything else never listens. On SIGTERM
/// it serves what is queued before it closes.
const SERVER: &str = r#"
import os, select, signal, socket, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
if open(os.path.join(d, "mode")).read().strip() != "good":
    while True:
        time.sleep(1)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", port))
s.listen(128)
open(os.path.join(d, "ready.%d" % os.getpid()), "w").close()
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while True:
    r, _, _ = select.select([s], [], [], 0.05)
    if r:
        c, _ = s.accept()
        c.settimeout(2)
        try:
            c.recv(1024)
            c.sendall(b"HTTP/1.0 200 OK\r\n\r\n%d" % os.getpid())
        except OSError:
            pass
        c.close()
    elif stop:
        break
s.close()
"#;

/// The server as app `web` on `port`, with a command check that asks the
/// very process checked (`OXIDEPM_PID`) whether it is ready.
fn start_server(env: &Env, port: u16) {
    let dir = env.dir.path().display().to_string();
    std::fs::write(env.path("server.py"), SERVER).unwrap();
    std::fs::write(env.path("mode"), "good").unwrap();
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        format!(
            r#"[[apps]]
name = "web"
script = "python3"
args = ["{dir}/server.py", "{port}", "{dir}"]
kill_timeout = "5s"
[apps.health]
command = ["sh", "-c", "test -f {dir}/ready.$OXIDEPM_PID"]
interval = "100ms"
timeout = "1s"
retries = 3
start_period = "10s"
"#
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.wait(60, "web healthy", || {
        env.daemon_app("web")["health"] == "healthy"
    });
}

/// What a client polling the port saw: the pid of each answer, and how
/// many connections were refused (nothing listening).
#[derive(Default)]
struct Seen {
    pids: Vec<u32>,
    refused: usize,
    other_errors: Vec<String>,
}

/// Polls the port, one connection after the other, until told to stop.
fn poll(port: u16, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    while !stop.load(Ordering::Relaxed) {
        let answer = TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            c.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut s = String::new();
            c.read_to_string(&mut s)?;
            Ok(s)
        });
        let mut seen = seen.lock().unwrap();
        match answer {
            Ok(s) => match s.rsplit("\r\n\r\n").next().and_then(|p| p.parse().ok()) {
                Some(pid) => seen.pids.push(pid),
                None => seen.other_errors.push(format!("answer {s:?}")),
            },
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => seen.refused += 1,
            Err(e) => seen.other_errors.push(e.to_string()),
        }
    }
}

fn count(seen: &Mutex<Seen>, pid: u32) -> usize {
    seen.lock()
        .unwrap()
        .pids
        .iter()
        .filter(|p| **p == pid)
        .count()
}

#[test]
fn reload_with_a_health_check_keeps_serving_and_ends_with_a_new_pid() {
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    start_server(&env, port);
    let old = env.pid("web");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let poller = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || poll(port, stop, seen))
    };
    env.wait(60, "answers from the old process", || {
        count(&seen, old) >= 20
    });

    let r = env.json(&["reload", "web"]);
    let new = r[0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(r[0]["how"], "reloaded", "{r}");
    assert_eq!(r[0]["old_pid"], old, "{r}");
    assert_ne!(new, old);
    // The answer comes once the old process is stopped; the new one serves.
    env.wait(60, "answers from the new process", || {
        count(&seen, new) >= 20
    });
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.refused, 0, "a client was refused during the reload");
    assert!(
        !seen.pids.iter().any(|p| *p != old && *p != new),
        "answers from a third process"
    );
    // Resets of a connection queued on the old listener as it closed are
    // possible with SO_REUSEPORT; refusals are not.
    assert!(seen.other_errors.len() <= 2, "{:?}", seen.other_errors);
    env.wait(60, "the old process gone", || !alive(old));
    let app = env.daemon_app("web");
    assert_eq!(app["pid"], new);
    assert_eq!(app["status"], "online");
    let ev = env.events("web");
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {old} keeps serving")
    ));
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {new} is healthy")
    ));
    assert!(has_event(
        &ev,
        "exited",
        "system:reload",
        &format!("pid {old}")
    ));
}

#[test]
fn reload_of_a_new_version_that_never_gets_healthy_keeps_the_old_pid() {
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    start_server(&env, port);
    let old = env.pid("web");
    // The new version on disk is broken: it runs, and never serves.
    std::fs::write(env.path("mode"), "bad").unwrap();

    let err = env.fails(&["reload", "web"]);
    assert!(err.contains("E_CONFLICT"), "{err}");
    assert!(
        err.contains(&format!("the old process (pid {old}) keeps running")),
        "{err}"
    );
    assert!(err.contains("was not healthy within"), "{err}");
    let app = env.daemon_app("web");
    assert_eq!(app["pid"], old);
    assert_eq!(app["status"], "online");
    assert!(alive(old));
    // The broken process was stopped; the old one still answers.
    let ev = env.events("web");
    let new: u32 = ev
        .iter()
        .rev()
        .find(|e| e["kind"] == "restarted")
        .and_then(|e| e["detail"].as_str()?.strip_prefix("pid ")?.parse().ok())
        .expect("the new process was started");
    assert_ne!(new, old);
    env.wait(60, "the broken process gone", || !alive(new));
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    assert!(s.ends_with(&old.to_string()), "{s}");
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {old} kept")
    ));
    env.wait(60, "healthy again", || {
        env.daemon_app("web")["health"] == "healthy"
    });
}

#[test]
fn reload_without_a_health_check_is_a_restart_and_says_so() {
    let env = Env::new();
    env.ok(&["start", "--name", "plain", "--", "sleep", "1000"]);
    let old = env.pid("plain");
    let out = env.ok(&["reload", "plain"]);
    assert!(
        out.contains("restarted (no health check: not zero-downtime)"),
        "{out}"
    );
    let new = env.pid("plain");
    assert_ne!(new, old);
    assert!(out.contains(&format!("pid {old} → {new}")), "{out}");
    assert!(!alive(old));
}

/// A daemon killed with SIGKILL while a reload waits for the new process
/// to get healthy: the next daemon finds both runs of the app and keeps
/// one, the app's, never two.
#[test]
fn a_reload_cut_by_a_daemon_kill_leaves_one_process() {
    let env = Env::new();
    let d = env.dir.path().display().to_string();
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        format!(
            r#"[[apps]]
name = "web"
script = "sh"
args = ["-c", "touch {d}/run.$$; exec sleep 100000"]
[apps.health]
command = ["sh", "-c", "test -f {d}/ok.$OXIDEPM_PID"]
interval = "100ms"
timeout = "1s"
retries = 3
start_period = "600s"
"#
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    let old = env.pid("web");
    std::fs::write(env.path(&format!("ok.{old}")), "").unwrap();
    env.wait(60, "web healthy", || {
        env.daemon_app("web")["health"] == "healthy"
    });
    let runs = || -> Vec<u32> {
        let mut v: Vec<u32> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("run.")?
                    .parse()
                    .ok()
            })
            .collect();
        v.sort_unstable();
        v
    };
    let mut reload = env.cmd().args(["reload", "web"]).spawn().unwrap();
    let new = env.wait(60, "the new process", || {
        runs().into_iter().find(|p| *p != old)
    });
    env.kill_daemon();
    let _ = reload.kill();
    let _ = reload.wait();
    env.ok(&["ping"]);
    let left = |pids: &[u32]| pids.iter().copied().filter(|p| alive(*p)).count();
    env.wait(60, "one process of web left", || left(&[old, new]) == 1);
    let app = env.daemon_app("web");
    let pid = app["pid"].as_u64().unwrap() as u32;
    assert!(pid == old || pid == new, "{app}");
    assert!(alive(pid));
    env.ok(&["delete", "web"]);
    for p in [old, new] {
        if alive(p) {
            crate::harness::kill(p, libc::SIGKILL);
        }
    }
}
