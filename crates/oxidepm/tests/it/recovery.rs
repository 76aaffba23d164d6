//! Recovery: a daemon killed at any point, a lost state.db or a low fd
//! limit never leaves a process of this home duplicated, forgotten or
//! killed by mistake.

use crate::harness::{alive, bin, kill, read, Env};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Every live process that carries a run marker and this home's address:
/// the processes the daemon started for apps (log writers carry neither).
fn marked(env: &Env) -> BTreeSet<u32> {
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        let ours = vars.contains(&home.as_bytes());
        let run = vars.iter().any(|v| v.starts_with(b"OXIDEPM_RUN="));
        if ours && run && alive(pid) {
            out.insert(pid);
        }
    }
    out
}

/// The pids `status` reports, by app name.
fn pids(env: &Env) -> Vec<(String, Option<u32>, String)> {
    env.daemon_status()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                a["pid"].as_u64().map(|p| p as u32),
                a["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Kills every marked process of the home (orphans are in no `status`).
fn sweep(env: &Env) {
    for p in marked(env) {
        kill(p, libc::SIGKILL);
    }
}

/// Kills the home's marked processes when a test ends, failed or not
/// (orphans are no daemon's to stop).
struct Sweep<'a>(&'a Env);

impl Drop for Sweep<'_> {
    fn drop(&mut self) {
        sweep(self.0);
    }
}

/// Writes an app file of `n` sleeping apps.
fn app_file(env: &Env, n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[apps]]\nname = \"a{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n"
        ));
    }
    let p = env.path("apps.toml");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// Starts a daemon for the home under `prlimit --nofile=soft:hard`.
fn daemon_with_limit(env: &Env, soft: u64, hard: u64) {
    let o = Command::new("prlimit")
        .arg(format!("--nofile={soft}:{hard}"))
        .arg(bin("oxidepmd"))
        .arg("--home")
        .arg(&env.home)
        .env_remove("OXIDEPM_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = read(&env.home.join("daemon.log"));
    let tail: Vec<&str> = log.lines().rev().take(15).collect();
    assert!(
        o.status.success(),
        "{}\n{tail:#?}",
        String::from_utf8_lossy(&o.stderr)
    );
    env.wait(30, "the daemon to answer", || {
        std::os::unix::net::UnixStream::connect(env.home.join("daemon.sock")).is_ok()
            && env.raw("daemon.sock").call(json!({"id": 1, "op": "ping"}))["ok"]
                == Value::Bool(true)
    });
}

/// Asserts that every app is online under a marked process, and that no
/// marked process is outside them.
#[track_caller]
fn exactly_one_process_per_app(env: &Env, n: usize) {
    let st = pids(env);
    assert_eq!(st.len(), n);
    let running: BTreeSet<u32> = st.iter().filter_map(|(_, p, _)| *p).collect();
    assert!(
        st.iter().all(|(_, _, s)| s == "online"),
        "{:?}",
        st.iter()
            .filter(|(_, _, s)| s != "online")
            .collect::<Vec<_>>()
    );
    assert_eq!(running.len(), n, "one process per app");
    let m = marked(env);
    assert_eq!(
        m,
        running,
        "marked processes that no app holds: {:?}",
        m.difference(&running).collect::<Vec<_>>()
    );
}

#[test]
fn a_daemon_killed_in_the_middle_of_a_500_app_start_leaves_no_orphan() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    let file = app_file(&env, 500);
    let daemon = env.daemon_pid();
    let mut start = env
        .cmd()
        .args(["start", &file])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The daemon's children (apps and their log writers), read often: the
    // kill must land while it forks.
    let children = format!("/proc/{daemon}/task/{daemon}/children");
    env.wait(120, "a part of the apps to be started", || {
        read(std::path::Path::new(&children))
            .split_whitespace()
            .count()
            >= 100
    });
    kill(daemon, libc::SIGKILL);
    // Gone for good: its socket refuses and its lock is free.
    env.kill_daemon();
    let _ = start.wait();
    let before = marked(&env);
    assert!(
        before.len() < 500,
        "the start was interrupted ({} running)",
        before.len()
    );
    // Running the file again starts a new daemon, which finds the live
    // processes before it starts anything.
    env.ok(&["start", &file]);
    env.wait(180, "every app online", || {
        pids(&env).iter().filter(|(_, _, s)| s == "online").count() == 500
    });
    exactly_one_process_per_app(&env, 500);
    assert!(
        before.iter().all(|p| alive(*p)),
        "no process of the first start was killed"
    );
    sweep(&env);
}

#[test]
fn a_lost_state_db_does_not_duplicate_the_apps_it_ran() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    let file = app_file(&env, 20);
    env.ok(&["start", &file]);
    env.wait(60, "every app online", || {
        pids(&env).iter().filter(|(_, _, s)| s == "online").count() == 20
    });
    let before = marked(&env);
    assert_eq!(before.len(), 20);
    env.kill_daemon();
    for f in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(env.home.join(f));
    }
    // A new daemon with an empty state keeps them, and says so.
    env.ok(&["ping"]);
    let who = env.json(&["whoami"]);
    assert!(who.to_string().contains("a7 (pid"), "{who}");
    assert_eq!(marked(&env), before, "nothing was stopped");
    // Defining them again adopts them instead of starting copies.
    env.ok(&["start", &file]);
    env.wait(60, "every app online", || {
        pids(&env).iter().filter(|(_, _, s)| s == "online").count() == 20
    });
    exactly_one_process_per_app(&env, 20);
    assert_eq!(marked(&env), before, "the same processes");
    // And they are the apps' own now: stop reaches them.
    env.ok(&["stop", "a3"]);
    let a3 = before.iter().find(|p| !marked(&env).contains(p)).copied();
    assert!(a3.is_some(), "stop took a3's process");
    assert_eq!(marked(&env).len(), 19);
    sweep(&env);
}

#[test]
fn a_second_copy_of_a_running_app_is_stopped_at_start() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    env.ok(&["stop", "idle"]);
    let web = env.pid("web");
    let marker = read_marker(web);
    env.kill_daemon();
    // A copy of web (a second run) and a process of the stopped app, as a
    // daemon killed at the wrong moment would leave them.
    let home = format!("{}", env.home.display());
    let (h, id, run, _) = split(&marker);
    // Where cgroups hold the apps, a daemon's processes are born in their
    // run's cgroup: so are these.
    let web_leaf = cgroup_of(web);
    let leaf = |app: u64, n: u64| {
        web_leaf.as_ref().map(|l| {
            let app_dir = l
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join(format!("app-{app}"));
            let dir = app_dir.join(format!("run-{n}"));
            std::fs::create_dir_all(&dir).unwrap();
            dir
        })
    };
    let copy = spawn_marked_in(&home, &format!("{h}:{id}:{}:web", run + 1), leaf(id, 1));
    let idle_id = id + 1;
    let stray = spawn_marked_in(
        &home,
        &format!("{h}:{idle_id}:{}:idle", run + 7),
        leaf(idle_id, 2),
    );
    env.ok(&["ping"]);
    assert_eq!(env.pid("web"), web, "the recorded process is adopted");
    env.wait(20, "the copy and the stray to be stopped", || {
        !alive(copy.id()) && !alive(stray.id())
    });
    assert!(alive(web));
    assert_eq!(marked(&env), BTreeSet::from([web]));
    let _ = (copy, stray);
    sweep(&env);
}

fn read_marker(pid: u32) -> String {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    env.split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"OXIDEPM_RUN="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .expect("the app's process is marked")
}

fn split(marker: &str) -> (String, u64, i64, String) {
    let p: Vec<&str> = marker.splitn(4, ':').collect();
    (
        p[0].to_string(),
        p[1].parse().unwrap(),
        p[2].parse().unwrap(),
        p[3].to_string(),
    )
}

/// A detached `sleep` with a marker, re-parented away from the test (as an
/// app outliving its daemon is).
fn spawn_marked(home: &str, marker: &str) -> Reparented {
    spawn_marked_in(home, marker, None)
}

/// As `spawn_marked`, born in the cgroup directory `cgroup` when given.
fn spawn_marked_in(home: &str, marker: &str, cgroup: Option<PathBuf>) -> Reparented {
    let join = cgroup
        .map(|d| format!("echo $$ > '{}/cgroup.procs' || exit 1; ", d.display()))
        .unwrap_or_default();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{join}setsid sleep 100000 >/dev/null 2>&1 & echo $!"
        ))
        .env("OXIDEPM_HOME", home)
        .env("OXIDEPM_RUN", marker)
        .output()
        .unwrap();
    Reparented(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
}

/// The directory of the cgroup v2 leaf holding `pid`, when it is one of
/// an oxidepm home's run leaves.
fn cgroup_of(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    if !rel.contains("/oxidepm-") {
        return None;
    }
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(|m| PathBuf::from(format!("{m}{rel}")))
        .find(|d| d.join("cgroup.procs").exists())
}

#[test]
fn a_process_that_forges_a_marker_is_never_taken_for_an_app() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let web = env.pid("web");
    let (h, id, run, _) = split(&read_marker(web));
    if cgroup_of(web).is_none() {
        // Without cgroups a marker of the daemon's own user is all there
        // is to go by (the README says so): nothing to try here.
        eprintln!("skipped: the daemon runs without cgroups on this host");
        return;
    }
    env.kill_daemon();
    // The app dies while no daemon runs; a process of someone else's
    // making claims to be its newer run.
    kill(web, libc::SIGKILL);
    let home = format!("{}", env.home.display());
    let forged = spawn_marked(&home, &format!("{h}:{id}:{}:web", run + 1));
    env.ok(&["ping"]);
    env.wait(30, "web restarted in a process of its own", || {
        env.json(&["status"])
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == "web").cloned())
            .is_some_and(|w| w["status"] == "online" && w["pid"].as_u64().is_some())
    });
    let now = env.pid("web");
    assert_ne!(now, forged.id(), "the forged process was adopted as web");
    assert!(
        alive(forged.id()),
        "a process that is not the daemon's is left alone"
    );
    sweep(&env);
}

/// A process that is not the test's child.
struct Reparented(u32);

impl Reparented {
    fn id(&self) -> u32 {
        self.0
    }
}

impl Drop for Reparented {
    fn drop(&mut self) {
        if alive(self.0) {
            kill(self.0, libc::SIGKILL);
        }
    }
}

#[test]
fn at_a_low_fd_limit_a_daemon_restart_adopts_every_app_and_kills_none() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    let n = 1100;
    let file = app_file(&env, n);
    // The usual host: soft 1024, a higher hard limit.
    daemon_with_limit(&env, 1024, 8192);
    env.ok(&["start", &file]);
    env.wait(300, "every app online", || {
        pids(&env).iter().filter(|(_, _, s)| s == "online").count() == n
    });
    let before = pids(&env);
    env.kill_daemon();
    daemon_with_limit(&env, 1024, 8192);
    assert_eq!(pids(&env), before, "all adopted, same processes");
    exactly_one_process_per_app(&env, n);
    // A hard limit of 1024: pidfds run short, watching degrades to
    // polling, and nothing is killed.
    env.kill_daemon();
    daemon_with_limit(&env, 1024, 1024);
    assert_eq!(pids(&env), before, "all adopted at hard 1024");
    let st = env.ok(&["status"]);
    assert!(st.contains("a1099"), "status answers");
    exactly_one_process_per_app(&env, n);
    // Watched by polling, an exit is still seen and restarted.
    let a5 = before.iter().find(|a| a.0 == "a5").unwrap().1.unwrap();
    kill(a5, libc::SIGKILL);
    env.wait(30, "a5 restarted", || {
        let a = env.daemon_app("a5");
        a["status"] == "online" && a["pid"].as_u64() != Some(a5 as u64)
    });
    sweep(&env);
}

#[test]
fn an_emfile_during_a_restart_is_retried() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let pid = env.pid("web");
    let daemon = env.daemon_pid();
    let log = env.home.join("daemon.log");
    // No descriptor can be made: the pipes of the restart fail (EMFILE).
    set_soft_limit(daemon, 3);
    kill(pid, libc::SIGKILL);
    env.wait(20, "the restart to fail", || {
        read(&log).contains("a passing failure")
    });
    set_soft_limit(daemon, 4096);
    env.wait(30, "web back online", || {
        let a = env.daemon_app("web");
        a["status"] == "online" && a["pid"].as_u64().is_some_and(|p| p != pid as u64)
    });
    let kinds: Vec<String> = env
        .daemon_events("web")
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(kinds.iter().any(|k| k == "failed"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "errored"), "{kinds:?}");
    assert_eq!(env.daemon_app("web")["status"], "online");
}

fn set_soft_limit(pid: u32, soft: u64) {
    let hard = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_string))
        .unwrap();
    let o = Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={soft}:{hard}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn at_a_low_fd_limit_show_says_whose_log_pipes_are_not_kept() {
    let env = Env::new();
    let _sweep = Sweep(&env);
    // 44 descriptors past the reserve: a dozen writers are watched, the
    // rest of 40 apps are not.
    let n = 40;
    let file = app_file(&env, n);
    daemon_with_limit(&env, 300, 300);
    env.ok(&["start", &file]);
    env.wait(60, "every app online", || {
        pids(&env).iter().filter(|(_, _, s)| s == "online").count() == n
    });
    let kept: Vec<Option<bool>> = (0..n)
        .map(|i| {
            let shown = env.json(&["show", &format!("a{i}")]);
            shown[0]["log_pipes_kept"].as_bool()
        })
        .collect();
    assert_eq!(kept[0], Some(true), "{kept:?}");
    assert_eq!(kept[n - 1], Some(false), "{kept:?}");
    let text = env.ok(&["show", &format!("a{}", n - 1)]);
    assert!(text.contains("log pipes"), "{text}");
    assert!(text.contains("not kept"), "{text}");
    assert!(!env.ok(&["show", "a0"]).contains("log pipes"));
    sweep(&env);
}
