//! Membership that no fork escapes: one cgroup v2 per app where one can be
//! written, recorded sessions where none can; attribution that survives a
//! daemon killed with SIGKILL; agents that would run as root; pinning a
//! peer by start time, as on kernels without SO_PEERPIDFD.

use crate::harness::{alive, bin, kill, read, Env};
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Starts this home's daemon with `vars` in its environment.
fn start_daemon(env: &Env, vars: &[(&str, &str)]) {
    let o = env
        .cmd()
        .envs(vars.iter().copied())
        .arg("ping")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{o:?}\n{}",
        read(&env.home.join("daemon.log"))
    );
}

/// What `whoami` says the daemon's containment is.
fn containment(env: &Env) -> String {
    env.json(&["whoami"])["containment"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Whether this daemon runs its apps in cgroups; if not, says why the
/// test that needs them is skipped.
fn has_cgroups(env: &Env) -> bool {
    // A read never starts the daemon: start it to ask.
    env.ok(&["ping"]);
    let c = containment(env);
    if !c.starts_with("cgroup2 (") {
        eprintln!("skipped: the daemon has no cgroup2 hierarchy here: {c}");
        return false;
    }
    true
}

fn is_root() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return false;
    }
    true
}

/// The pids written one per line to `file`, once there are `n`.
fn pids(env: &Env, file: &Path, n: usize) -> Vec<u32> {
    env.wait(20, &format!("{n} pids in {}", file.display()), || {
        let v: Vec<u32> = read(file).lines().filter_map(|l| l.parse().ok()).collect();
        (v.len() >= n).then_some(v)
    })
}

/// The cgroup directory `show` names for an app.
fn app_cgroup(env: &Env, name: &str) -> PathBuf {
    let show = env.json(&["show", name]);
    let c = show[0]["containment"].as_str().unwrap().to_string();
    PathBuf::from(c.strip_prefix("cgroup2 ").unwrap_or_else(|| panic!("{c}")))
}

/// A process that an app double-forks: it starts a session of its own and
/// its parent exits, so it is re-parented away from the app. It writes its
/// pid to `pids`, then, for each number written to `fifo`, asks `whoami`
/// on daemon.sock (no claim) and on agent.sock and writes the answers to
/// `d<n>` and `a<n>` beside the fifo.
fn orphan_script(env: &Env, fifo: &Path, pids: &Path) -> String {
    let dir = fifo.parent().unwrap().display().to_string();
    let cli = bin("oxidepm").display().to_string();
    let orphan = env.script(
        "orphan.sh",
        &format!(
            "echo $$ >> {pids}\n\
             while :; do\n\
               read n < {fifo} || exit 1\n\
               env -u OXIDEPM_SOCKET {cli} whoami --json > {dir}/d$n.tmp 2>&1; mv {dir}/d$n.tmp {dir}/d$n\n\
               OXIDEPM_SOCKET={home}/agent.sock {cli} whoami --json > {dir}/a$n.tmp 2>&1; mv {dir}/a$n.tmp {dir}/a$n\n\
             done",
            pids = pids.display(),
            fifo = fifo.display(),
            home = env.home.display(),
        ),
    );
    env.script(
        "forker.sh",
        &format!("(setsid {orphan} &)\nexec sleep 100000"),
    )
}

/// Asks the orphan for its answers number `n`: (daemon.sock, agent.sock).
fn ask_orphan(env: &Env, fifo: &Path, n: u32) -> (Value, Value) {
    let mut w = env.wait(20, "the orphan to listen", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .ok()
    });
    writeln!(w, "{n}").unwrap();
    drop(w);
    let dir = fifo.parent().unwrap();
    let (d, a) = (dir.join(format!("d{n}")), dir.join(format!("a{n}")));
    env.wait(30, "the orphan's answers", || d.exists() && a.exists());
    let parse = |p: &Path| -> Value {
        let t = read(p);
        serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}: {t}", p.display()))
    };
    (parse(&d), parse(&a))
}

fn actor(v: &Value) -> String {
    format!(
        "{}:{}",
        v["class"].as_str().unwrap(),
        v["label"].as_str().unwrap()
    )
}

#[test]
fn an_agents_double_forked_orphan_is_the_agent_before_and_after_a_daemon_kill() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    if !has_cgroups(&env) {
        return;
    }
    let fifo = env.path("ask");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let pids_file = env.path("orphan.pids");
    let forker = orphan_script(&env, &fifo, &pids_file);
    env.ok(&["start", "--kind", "agent", "--name", "alice", "--", &forker]);
    let orphan = pids(&env, &pids_file, 1)[0];
    let main = env.pid("alice");
    let st = oxidepm_sys::procfs::stat(orphan).unwrap();
    assert_ne!(st.session, main, "the orphan left the agent's session");
    assert_ne!(st.ppid, main, "the orphan is not the agent's child");

    let (d, a) = ask_orphan(&env, &fifo, 1);
    assert_eq!(
        (actor(&d), d["socket"].as_str()),
        ("ai:alice".into(), Some("daemon")),
        "{d}"
    );
    assert_eq!(
        (actor(&a), a["socket"].as_str()),
        ("ai:alice".into(), Some("agent")),
        "{a}"
    );

    // The daemon dies as an OOM kill or `kill -9` would take it; the next
    // one (started by the CLI) adopts the agent and is no ancestor of the
    // orphan.
    env.kill_daemon();
    assert!(alive(orphan));
    env.ok(&["ping"]);
    assert_eq!(
        env.pid("alice"),
        main,
        "the agent was adopted, not restarted"
    );
    let daemon = env.daemon_pid();
    let chain_has_daemon = {
        let mut p = orphan;
        let mut found = false;
        while let Some(s) = oxidepm_sys::procfs::stat(p) {
            if s.pid == daemon {
                found = true;
                break;
            }
            if s.ppid == 0 {
                break;
            }
            p = s.ppid;
        }
        found
    };
    assert!(
        !chain_has_daemon,
        "the new daemon is no ancestor of the orphan"
    );

    let (d, a) = ask_orphan(&env, &fifo, 2);
    assert_eq!(actor(&d), "ai:alice", "{d}");
    assert_eq!(d["tier"], "control", "{d}");
    assert_eq!(actor(&a), "ai:alice", "{a}");

    // And it goes with its app.
    env.ok(&["stop", "alice"]);
    assert!(!alive(orphan), "the orphan survived the stop");
}

#[test]
fn a_double_forked_grandchild_goes_with_stop_restart_and_delete() {
    let env = Env::new();
    if !has_cgroups(&env) {
        return;
    }
    let gc_file = env.path("gc.pids");
    // The grandchild ignores SIGTERM: only the cgroup's kill takes it.
    let gc = env.script(
        "gc.sh",
        &format!(
            "trap '' TERM\necho $$ >> {}\nwhile :; do sleep 1; done",
            gc_file.display()
        ),
    );
    let main = env.script("main.sh", &format!("(setsid {gc} &)\nexec sleep 100000"));
    env.ok(&[
        "start",
        "--name",
        "web",
        "--kill-timeout",
        "300",
        "--",
        &main,
    ]);
    let g1 = pids(&env, &gc_file, 1)[0];
    let cg = app_cgroup(&env, "web");
    let web = env.pid("web");
    let pid_cgroup = oxidepm_sys::cgroup::path_of(g1).unwrap();
    assert!(
        cg.to_string_lossy()
            .ends_with(pid_cgroup.rsplit_once('/').unwrap().0),
        "{pid_cgroup} is not under {}",
        cg.display()
    );
    assert_ne!(oxidepm_sys::procfs::stat(g1).unwrap().session, web);

    env.ok(&["stop", "web"]);
    assert!(!alive(g1), "the grandchild survived stop");
    assert_eq!(env.daemon_app("web")["status"], "stopped");

    env.ok(&["start", "web"]);
    let g2 = pids(&env, &gc_file, 2)[1];
    env.ok(&["restart", "web"]);
    assert!(!alive(g2), "the grandchild survived restart");
    let g3 = pids(&env, &gc_file, 3)[2];
    assert!(alive(g3));

    env.ok(&["delete", "web"]);
    assert!(!alive(g3), "the grandchild survived delete");
    env.wait(10, "the app's cgroup to be removed", || !cg.exists());
}

#[test]
fn whoami_and_show_name_the_mechanism() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let pid = env.pid("web");
    let c = containment(&env);
    let show = env.json(&["show", "web"])[0]["containment"]
        .as_str()
        .unwrap()
        .to_string();
    let text = env.ok(&["whoami"]);
    assert!(text.contains(&format!("containment: {c}")), "{text}");
    if c.starts_with("cgroup2 (") {
        // The app's process is in the app's cgroup, inside the home's.
        let home_dir = c.trim_start_matches("cgroup2 (").trim_end_matches(')');
        assert!(
            show.starts_with(&format!("cgroup2 {home_dir}/app-")),
            "{show}"
        );
        let rel = oxidepm_sys::cgroup::path_of(pid).unwrap();
        let (app_rel, run) = rel.rsplit_once('/').unwrap();
        assert!(run.starts_with("run-"), "{rel}");
        assert!(show.ends_with(app_rel), "{rel} is not in {show}");
        let text = env.ok(&["show", "web"]);
        assert!(text.contains("containment"), "{text}");
    } else {
        assert!(c.starts_with("sessions ("), "{c}");
        assert_eq!(show, format!("sessions [{pid}]"));
    }
}

#[test]
fn without_cgroups_stop_and_a_restarted_daemon_still_kill_the_recorded_session() {
    let env = Env::new();
    start_daemon(&env, &[("OXIDEPM_CGROUP_ROOT", "none")]);
    let c = containment(&env);
    assert!(c.starts_with("sessions ("), "{c}");
    let kids = env.path("kids.pids");
    // A child that leaves the main process's group (not its session) and
    // ignores SIGTERM.
    let script = env.script(
        "keeper.sh",
        &format!(
            "perl -e 'setpgrp(0,0); $SIG{{TERM}}=\"IGNORE\"; open(F, \">>\", $ARGV[0]); print F \"$$\\n\"; close F; sleep 100000' {} &\nexec sleep 100000",
            kids.display()
        ),
    );
    let start = [
        "start",
        "--name",
        "keeper",
        "--restart",
        "never",
        "--kill-timeout",
        "300",
        "--",
        &script,
    ];
    env.ok(&start);
    let k1 = pids(&env, &kids, 1)[0];
    let main = env.pid("keeper");
    let st = oxidepm_sys::procfs::stat(k1).unwrap();
    assert_eq!(st.session, main);
    assert_ne!(st.pgrp, main);
    let show = env.json(&["show", "keeper"])[0]["containment"].clone();
    assert_eq!(show, format!("sessions [{main}]"));

    // After a kill -9 of the daemon, the adopted app's stop takes the child
    // too: it is not the new daemon's descendant, only in the recorded
    // session.
    env.kill_daemon();
    start_daemon(&env, &[("OXIDEPM_CGROUP_ROOT", "none")]);
    assert_eq!(env.pid("keeper"), main);
    env.ok(&["stop", "keeper"]);
    assert!(
        !alive(k1),
        "the session's child survived stop after adoption"
    );
    assert!(!alive(main));

    // The main process dies while no daemon runs: the next daemon finds
    // what it left in its recorded session and takes it.
    env.ok(&["start", "keeper"]);
    let k2 = pids(&env, &kids, 2)[1];
    let main = env.pid("keeper");
    env.kill_daemon();
    kill(main, libc::SIGKILL);
    env.wait(10, "the main process to die", || !alive(main));
    assert!(alive(k2));
    start_daemon(&env, &[("OXIDEPM_CGROUP_ROOT", "none")]);
    env.wait(20, "the orphaned child to be killed", || !alive(k2));
    // Killed while no daemon ran, with restart never: not running.
    assert!(env.daemon_app("keeper")["pid"].is_null());
}

#[test]
fn a_root_daemon_refuses_an_agent_that_would_run_as_root() {
    if !is_root() {
        return;
    }
    let env = Env::new();
    let err = env.fails(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    assert!(
        err.contains("E_BAD_REQUEST") && err.contains("agents_share_uid = true"),
        "{err}"
    );
    // Nothing changed: no app, no lane, no secret.
    assert!(env.daemon_status().is_empty());
    assert!(!env.home.join("lanes/alice.sock").exists());
    assert!(!env.home.join("secrets/agent_alice").exists());

    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    let o = env.run(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning:") && err.contains("not isolated"),
        "{err}"
    );
    assert_eq!(env.daemon_app("alice")["status"], "online");
    let o = env.run(&["lanes"]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("agent alice runs as uid 0"), "{err}");
    let report = env.json(&["lanes"]);
    assert!(
        !report["warnings"].as_array().unwrap().is_empty(),
        "{report}"
    );
}

#[test]
fn pinning_by_start_time_still_identifies_the_cli_and_an_agent() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    start_daemon(&env, &[("OXIDEPM_PEER_PIN", "starttime")]);
    let v = env.json(&["whoami"]);
    assert_eq!(actor(&v), "human:cli", "{v}");
    assert_eq!(v["tier"], "admin");

    let out = env.path("inner.json");
    let script = format!(
        "env -u OXIDEPM_SOCKET {} whoami --json > {}.tmp; mv {}.tmp {}; exec sleep 100000",
        bin("oxidepm").display(),
        out.display(),
        out.display(),
        out.display()
    );
    env.ok(&[
        "start", "--kind", "agent", "--name", "bob", "--", "sh", "-c", &script,
    ]);
    env.wait(20, "the agent's answer", || out.exists());
    let v: Value = serde_json::from_str(&read(&out)).unwrap();
    assert_eq!(actor(&v), "ai:bob", "{v}");
}

/// A cgroup made for one test, removed (with whatever a daemon left in it)
/// when dropped.
struct ScratchCgroup(PathBuf);

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        let mut dirs = vec![self.0.clone()];
        let mut all = Vec::new();
        while let Some(d) = dirs.pop() {
            dirs.extend(oxidepm_sys::cgroup::children(&d));
            all.push(d);
        }
        let _ = oxidepm_sys::cgroup::kill(&self.0);
        for d in all.iter().rev() {
            for _ in 0..500 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

#[test]
fn a_delegated_cgroup_named_by_oxidepm_cgroup_root_holds_the_apps() {
    let Some(mount) = oxidepm_sys::cgroup::mount_point() else {
        eprintln!("skipped: no cgroup2 hierarchy");
        return;
    };
    let own = oxidepm_sys::cgroup::own_path().unwrap_or_else(|| "/".into());
    let dir = PathBuf::from(format!(
        "{}{}/oxidepm-it-delegated-{}",
        mount.display(),
        own.trim_end_matches('/'),
        std::process::id()
    ));
    if let Err(e) = std::fs::create_dir(&dir) {
        eprintln!("skipped: cannot make {}: {e}", dir.display());
        return;
    }
    let _scratch = ScratchCgroup(dir.clone());
    let env = Env::new();
    start_daemon(&env, &[("OXIDEPM_CGROUP_ROOT", dir.to_str().unwrap())]);
    let c = containment(&env);
    assert!(
        c.starts_with(&format!("cgroup2 ({}/oxidepm-", dir.display())),
        "{c}"
    );
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let cg = app_cgroup(&env, "web");
    assert!(cg.starts_with(&dir), "{}", cg.display());
    let rel = oxidepm_sys::cgroup::path_of(env.pid("web")).unwrap();
    let dir_rel = dir.strip_prefix(&mount).unwrap();
    assert!(
        rel.starts_with(&format!("/{}/", dir_rel.display())),
        "{rel} is not under {}",
        dir.display()
    );
}

#[test]
fn a_process_in_the_homes_cgroup_but_in_no_apps_is_unattributed() {
    let env = Env::new();
    if !has_cgroups(&env) {
        return;
    }
    let c = containment(&env);
    let home_cg = PathBuf::from(c.trim_start_matches("cgroup2 (").trim_end_matches(')'));
    // A cgroup named like an app's that no app of this home owns (left by
    // a lost state, or made by someone who can write the hierarchy), with a
    // process in it that is no descendant of the daemon.
    let stray = home_cg.join("app-999999");
    std::fs::create_dir(&stray).unwrap();
    let fifo = env.path("ask");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let out = env.path("stray.json");
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read x < {}; {} whoami --json > {}.tmp; mv {}.tmp {}",
            fifo.display(),
            bin("oxidepm").display(),
            out.display(),
            out.display(),
            out.display()
        ))
        .env("OXIDEPM_HOME", &env.home)
        .env_remove("OXIDEPM_SOCKET")
        .env_remove("OXIDEPM_ACTOR")
        .spawn()
        .unwrap();
    let guard = ScratchCgroup(stray.clone());
    std::fs::write(stray.join("cgroup.procs"), child.id().to_string()).unwrap();

    // A daemon that starts finds it, leaves it running and says so.
    env.kill_daemon();
    start_daemon(&env, &[]);
    let c = containment(&env);
    assert!(
        c.contains("processes of no app") && c.contains("app-999999"),
        "{c}"
    );
    assert!(alive(child.id()));

    let mut w = env.wait(20, "the stray to listen", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .ok()
    });
    writeln!(w, "go").unwrap();
    drop(w);
    env.wait(20, "the stray's answer", || out.exists());
    child.wait().unwrap();
    let v: Value = serde_json::from_str(&read(&out)).unwrap();
    assert_eq!(actor(&v), "ai:unattributed", "{v}");
    drop(guard);
}

/// Under systemd's user manager, a `--user` unit with `Delegate=yes` (what
/// `startup --user` writes) hands the daemon a cgroup subtree of its user:
/// a daemon that is not root then holds each app in a cgroup of its own,
/// as a root one does, and `whoami` and `show` say so.
#[test]
fn a_user_unit_with_delegate_gives_the_daemon_its_cgroups() {
    use std::process::Command;
    let manager = Command::new("systemctl")
        .args(["--user", "show-environment"])
        .output();
    if !matches!(&manager, Ok(o) if o.status.success()) {
        eprintln!("skipped: no systemd user manager answers here (systemctl --user)");
        return;
    }
    let env = Env::new();
    let unit = format!("oxpm-test-{}", std::process::id());
    let home = env.home.display().to_string();
    let ran = Command::new("systemd-run")
        .args([
            "--user",
            "--unit",
            &unit,
            "-p",
            "Delegate=yes",
            "-p",
            "Type=notify",
        ])
        .arg("-p")
        .arg("KillMode=control-group")
        .arg(format!("--setenv=OXIDEPM_HOME={home}"))
        .arg(bin("oxidepmd"))
        .args(["--foreground", "--home", &home])
        .status()
        .unwrap();
    assert!(ran.success());
    /// Stops the unit, and with it the daemon and its apps.
    struct Stop(String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("systemctl")
                .args(["--user", "stop", &self.0])
                .status();
        }
    }
    let _stop = Stop(unit.clone());
    let c = containment(&env);
    assert!(c.starts_with("cgroup2 (") && c.contains(&unit), "{c}");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let dir = app_cgroup(&env, "web");
    assert!(
        dir.display().to_string().contains(&unit),
        "{}",
        dir.display()
    );
}
