//! Attacks on `start` like pm2 and the read commands, second review: each
//! test is what a user or another account does, and checks what changed.

use crate::harness::{bin, test_user, Env};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the CLI as `uid`/`gid` with home `home`.
fn as_user(uid: u32, gid: u32, home: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
        ])
        .arg(bin("oxidepm"))
        .args(args)
        .env("OXIDEPM_HOME", home)
        .env_remove("OXIDEPM_SOCKET")
        .env_remove("OXIDEPM_ACTOR")
        .output()
        .unwrap()
}

/// Ends the daemon another user started in `home`, however the test ends.
struct TheirDaemon {
    uid: u32,
    gid: u32,
    home: PathBuf,
}

impl Drop for TheirDaemon {
    fn drop(&mut self) {
        let _ = as_user(self.uid, self.gid, &self.home, &["kill"]);
    }
}

/// Root points OXIDEPM_HOME at a home another account owns, where that
/// account runs a daemon: the daemon's owner would receive root's apps
/// (their environment included) and could answer root's reads with
/// anything. The CLI talks to a daemon of its own uid or root's only.
#[test]
fn root_does_not_talk_to_another_users_daemon() {
    let Some((uid, gid)) = test_user("oxpm-r2-other") else {
        eprintln!("skipped: needs root to create a second user");
        return;
    };
    let env = Env::new();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let home = env.path("theirs");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    let _guard = TheirDaemon {
        uid,
        gid,
        home: home.clone(),
    };
    let o = as_user(
        uid,
        gid,
        &home,
        &["start", "--name", "theirs", "--", "sleep", "100000"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let file = env.path("mine.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"mine\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\
         env = { SECRET = \"root-s3cret\" }\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    for args in [
        vec!["start", file.to_str().unwrap()],
        vec!["status"],
        vec!["logs", "theirs", "--lines", "5"],
    ] {
        let o = env
            .cmd()
            .env("OXIDEPM_HOME", &home)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "root's {args:?} was answered by uid {uid}"
        );
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("theirs"),
            "root's {args:?} printed the other daemon's answer"
        );
    }
    // Their daemon never received root's app.
    let o = as_user(uid, gid, &home, &["status", "--json"]);
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        listed.contains("theirs") && !listed.contains("mine"),
        "{listed}"
    );
}

/// A request that fails undoes what it did, and only that: an app it
/// created that a person has redefined since (here made protected and
/// started while the request waited for another app to stop) is the
/// person's now; the undo must not stop it, delete it or give it back the
/// request's spec.
#[test]
fn an_undo_leaves_an_app_someone_redefined_meanwhile() {
    let env = Env::new();
    let gate = env.path("gate");
    // `a` takes its time to stop: until the test opens the gate.
    let a = |arg: &str| {
        format!(
            "[[apps]]\nname = \"a\"\nscript = \"sh\"\nkill_timeout = \"120s\"\n\
             args = [\"-c\", \"trap 'while [ ! -e {gate} ]; do sleep 0.1; done; exit 0' TERM; \
             while :; do sleep 0.1; done\", \"{arg}\"]\n",
            gate = gate.display()
        )
    };
    let first = env.path("a.toml");
    std::fs::write(&first, a("v1")).unwrap();
    env.ok(&["start", first.to_str().unwrap()]);
    env.wait_status("a", "online");
    // Passes the checks (a file with an execute bit) but cannot start: the
    // interpreter its first line names is missing.
    let z = env.path("zprog");
    std::fs::write(&z, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&z, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = env.path("request.toml");
    std::fs::write(
        &file,
        format!(
            "{}\n[[apps]]\nname = \"x\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n\
             [[apps]]\nname = \"z\"\nscript = \"{}\"\n",
            a("v2"),
            z.display()
        ),
    )
    .unwrap();
    // The request changes `a` (restarting it) and creates `x` and `z`.
    let mut request = env
        .cmd()
        .args(["start", "--update", file.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    env.wait(30, "the request to be stopping a, x defined", || {
        let apps = env.status();
        let is = |n: &str, st: &str| apps.iter().any(|a| a["name"] == n && a["status"] == st);
        is("a", "stopping") && apps.iter().any(|a| a["name"] == "x")
    });
    // A person makes `x` their own: another program, protected, started.
    env.ok(&[
        "start",
        "--update",
        "--name",
        "x",
        "--protected",
        "--",
        "sleep",
        "200000",
    ]);
    let pid = env.pid("x");
    std::fs::write(&gate, "").unwrap();
    let failed = request.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(request.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!failed.success(), "z cannot start: {err}");
    let shown = env.json(&["show", "x"]);
    let x = &shown[0];
    assert_eq!(x["spec"]["args"], serde_json::json!(["200000"]), "{x}");
    assert_eq!(x["spec"]["protected"], true, "{x}");
    assert_eq!(x["pid"], pid, "the person's x was stopped: {x}");
    // What the request did itself is undone: z is gone, a has v1 back.
    let names: Vec<Value> = env.status().iter().map(|a| a["name"].clone()).collect();
    assert!(!names.contains(&Value::from("z")), "{names:?}");
    let a = &env.json(&["show", "a"])[0];
    assert!(a["spec"]["args"].to_string().contains("v1"), "{a}");
}

/// `--until` with `-n`: the last lines of the window, as journalctl's
/// `-n 1 --until T` gives the last entry before T; the newest lines of
/// the log are after the window and must not hide it. The same through
/// an agent's ops lane, whose `lines` has a default.
#[test]
fn a_window_that_ended_gives_its_own_last_lines() {
    use crate::cli_reads::{json_lines, step, stepper};
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"w\"]\n");
    let w = stepper(&env, "w", 3, false);
    env.ok(&["start", "--name", "w", "--", &w]);
    let t1 = step(&env, "w", "w1");
    let t2 = step(&env, "w", "w2");
    step(&env, "w", "w3");
    let text = |args: &[&str]| -> Vec<String> {
        json_lines(&env, args)
            .iter()
            .map(|l| l["line"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(text(&["logs", "w", "--until", &t1, "-n", "1"]), ["w1"]);
    assert_eq!(text(&["logs", "w", "--until", &t2, "-n", "1"]), ["w2"]);
    assert_eq!(
        text(&["logs", "w", "--since", &t1, "--until", &t2, "-n", "5"]),
        ["w1", "w2"]
    );
    crate::lanes::start_agents(&env, &["alice"]);
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    let req = serde_json::json!({"op": "logs", "target": "w", "until": t1, "lines": 1});
    let r = crate::ops::ops_answer(&mut alice, "alice", &req.to_string());
    let got: Vec<&str> = r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{r}");
    assert!(got[0].ends_with(" w1"), "{r}");
}

/// Code another user can write is never run as the caller: root names a
/// `*.config.js` that another account owns (or that every user can
/// change) in `start`, `stop` or `import`; node must not run it. A FIFO
/// named like one is refused at once rather than waited on.
#[test]
fn a_config_js_another_user_can_write_is_not_run() {
    let Some((uid, _)) = test_user("oxpm-r2-other") else {
        eprintln!("skipped: needs root to create a second user");
        return;
    };
    if std::process::Command::new("node")
        .arg("-e")
        .arg("0")
        .status()
        .is_err()
    {
        eprintln!("skipped: node is not installed (Debian: nodejs)");
        return;
    }
    let env = Env::new();
    env.ok(&["ping"]);
    let ran = env.path("ran");
    let body = format!(
        "require('fs').writeFileSync({:?}, 'ran');\n\
         module.exports = {{ apps: [{{ name: 'planted', script: 'sleep', args: '100000' }}] }};\n",
        ran.display().to_string()
    );
    let theirs = env.path("theirs.config.js");
    std::fs::write(&theirs, &body).unwrap();
    std::os::unix::fs::chown(&theirs, Some(uid), None).unwrap();
    let open = env.path("open.config.js");
    std::fs::write(&open, &body).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    for file in [&theirs, &open] {
        let f = file.to_str().unwrap();
        for args in [vec!["start", f], vec!["stop", f], vec!["import", f]] {
            let o = env.run(&args);
            assert!(!o.status.success(), "{args:?} succeeded");
            assert!(!ran.exists(), "{args:?} ran the file");
        }
    }
    assert!(env.status().is_empty(), "{:?}", env.status());
    // The same file of the caller's own is read as usual.
    let mine = env.path("mine.config.js");
    std::fs::write(&mine, &body).unwrap();
    env.ok(&["import", mine.to_str().unwrap()]);
    assert!(ran.exists());

    let fifo = env.path("fifo.config.js");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for args in [
        vec!["import", fifo.to_str().unwrap()],
        vec!["start", fifo.to_str().unwrap()],
    ] {
        assert!(!env.run(&args).status.success(), "{args:?}");
    }
}

/// A raw client (or an agent through its lane) defines an app that keeps
/// four billion rotated logs: every `logs` that reaches it, a person's
/// included, would try four billion file names, and `flush` would remove
/// as many. The daemon holds the bound the app files have.
#[test]
fn a_define_beyond_the_rotated_log_bound_is_refused() {
    let env = Env::new();
    env.ok(&["ping"]);
    let mut raw = env.raw("daemon.sock");
    let r = raw.call(serde_json::json!({
        "id": 1,
        "op": "define",
        "apps": [{"name": "many", "command": "sleep", "args": ["100000"], "log_keep": u32::MAX}],
    }));
    assert_eq!(r["ok"], false, "{r}");
    // A log rotated at every byte: each line would rename them all.
    let r = raw.call(serde_json::json!({
        "id": 3,
        "op": "define",
        "apps": [{"name": "tiny", "command": "sleep", "args": ["100000"], "log_max_bytes": 1}],
    }));
    assert_eq!(r["ok"], false, "{r}");
    assert!(env.status().is_empty(), "{:?}", env.status());
    // The largest count an app file may give is taken.
    let r = raw.call(serde_json::json!({
        "id": 2,
        "op": "define",
        "apps": [{"name": "kept", "command": "sleep", "args": ["100000"], "log_keep": 1000}],
    }));
    assert_eq!(r["ok"], true, "{r}");
}
