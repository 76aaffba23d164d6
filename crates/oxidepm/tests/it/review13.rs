//! Attacks on the daily verbs and the foreign config files: each test is
//! what a caller does to go around a rule, and checks nothing changed.

use crate::harness::{alive, Env};

/// An agent allowed `@bots` names `web`, its own app, in a `scale`: the
/// daemon must act on what it checked (the app `web`, which is no group),
/// never on a person's instances `web-0`, `web-1` that share the name.
#[test]
fn scale_acts_only_on_the_apps_the_grant_was_checked_against() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\ntier = \"manage\"\napps = [\"@bots\"]\n");
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"web\"\nscript = \"sleep\"\nargs = [\"100000\"]\ninstances = 2\n",
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.ok(&[
        "start", "--name", "web", "--tag", "bots", "--", "sleep", "100000",
    ]);
    crate::lanes::start_agents(&env, &["alice"]);
    let before: Vec<u32> = ["web", "web-0", "web-1"]
        .iter()
        .map(|n| env.pid(n))
        .collect();
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    for req in [
        r#"{"op":"scale","target":"web","instances":1}"#,
        r#"{"op":"scale","target":"web","instances":4}"#,
    ] {
        let r = crate::ops::ops_answer(&mut alice, "alice", req);
        assert!(r["error"]["code"].is_string(), "{req}: {r}");
    }
    let names: Vec<String> = env
        .status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    for n in ["web", "web-0", "web-1"] {
        assert!(names.iter().any(|x| x == n), "{n} gone: {names:?}");
    }
    assert!(
        !names.iter().any(|x| x == "web-2" || x == "web-3"),
        "{names:?}"
    );
    let after: Vec<u32> = ["web", "web-0", "web-1"]
        .iter()
        .map(|n| env.pid(n))
        .collect();
    assert_eq!(before, after);
    assert!(before.iter().all(|p| alive(*p)));
}

/// An ecosystem.config.js is a program: what it leaves running, in node's
/// group or in a session of its own (`detached`, or setsid twice over), must
/// not outlive the reading of the file.
#[test]
fn an_ecosystem_file_leaves_no_process_behind() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: node is not installed");
        return;
    }
    let env = Env::new();
    let d = env.dir.path().display().to_string();
    let file = env.path("ecosystem.config.js");
    std::fs::write(
        &file,
        format!(
            r#"const cp = require("child_process");
const fs = require("fs");
const grouped = cp.spawn("sleep", ["100000"], {{ stdio: "ignore" }});
grouped.unref();
fs.writeFileSync("{d}/grouped.pid", String(grouped.pid));
const detached = cp.spawn("sleep", ["100000"], {{ stdio: "ignore", detached: true }});
detached.unref();
fs.writeFileSync("{d}/detached.pid", String(detached.pid));
cp.execSync("setsid sh -c 'echo $$ > {d}/double.pid; exec sleep 100000' > /dev/null 2>&1 < /dev/null &");
module.exports = {{ apps: [{{ name: "web", script: "sleep", args: "100000" }}] }};
"#
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    let web = env.pid("web");
    let mut left = Vec::new();
    for name in ["grouped", "detached", "double"] {
        let p = env.path(&format!("{name}.pid"));
        let pid: u32 = env.wait(20, "the pid file", || {
            crate::harness::read(&p).trim().parse::<u32>().ok()
        });
        if alive(pid) {
            crate::harness::kill(pid, libc::SIGKILL);
            left.push(name);
        }
    }
    assert!(left.is_empty(), "still running: {left:?}");
    assert!(alive(web));
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

/// An adapter follows the events of the apps its grant holds; daemon.toml
/// then takes `web` out of its grant and is reloaded. Its open
/// subscription must not go on streaming `web`'s events under the grant it
/// was opened with: the stream ends, and a new one gets the new grant.
#[test]
fn a_grant_narrowed_by_a_config_reload_ends_open_subscriptions() {
    let env = Env::new();
    env.daemon_toml(
        "[lanes]\nbackend = \"off\"\n[adapters.chat]\ntier = \"read\"\napps = [\"web\", \"chat\"]\n",
    );
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let oxpm = crate::harness::bin("oxidepm").display().to_string();
    env.ok(&[
        "start",
        "--name",
        "chat",
        "--kind",
        "adapter",
        "--restart",
        "never",
        "--",
        &oxpm,
        "events",
        "--follow",
        "--json",
    ]);
    let chat = env.pid("chat");
    let out = env.home.join("logs/chat-out.log");
    let saw = |pid: u32| crate::harness::read(&out).contains(&format!("pid {pid}\""));
    // The stream is open and shows web, in the grant.
    env.ok(&["restart", "web"]);
    let first = env.pid("web");
    env.wait(60, "web's restart streamed", || saw(first));

    // A reload that changes no grant leaves the stream open.
    env.ok(&["reload-daemon-config"]);
    env.ok(&["restart", "web"]);
    let kept = env.pid("web");
    env.wait(60, "web's restart still streamed", || saw(kept));

    env.daemon_toml(
        "[lanes]\nbackend = \"off\"\n[adapters.chat]\ntier = \"read\"\napps = [\"chat\"]\n",
    );
    env.ok(&["reload-daemon-config"]);
    env.ok(&["restart", "web"]);
    let second = env.pid("web");
    env.wait(
        60,
        "web's second restart streamed, or the stream ended",
        || saw(second) || !alive(chat),
    );
    let streamed = saw(second);
    if alive(chat) {
        crate::harness::kill(chat, libc::SIGKILL);
    }
    assert!(!streamed, "web's events still streamed outside the grant");
}
