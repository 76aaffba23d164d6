//! pm2 ecosystem files started as they are (`tests/fixtures/pm2/`): the
//! `.js` ones evaluated with node, `--env production`, `--only`, log paths,
//! and files that would hang or flood the CLI. The apps are `app.js`, which
//! prints how it was started (argv, NODE_ENV, PORT) and stays up.
//!
//! node is needed; without it each test is skipped with the reason printed,
//! unless `OXIDEPM_REQUIRE_COMPAT=1` (test.sh sets it), which makes it fail.

use crate::harness::{alive, test_user, Env};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pm2")
}

fn fixture(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

/// Whether node is on PATH; a missing node skips (or fails when required).
fn node_or_skip() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| d.join("node").is_file()) {
        return true;
    }
    if std::env::var("OXIDEPM_REQUIRE_COMPAT").as_deref() == Ok("1") {
        panic!("node is not installed (Debian: nodejs) (OXIDEPM_REQUIRE_COMPAT=1)");
    }
    eprintln!("skipped: node is not installed (Debian: nodejs)");
    false
}

/// What `app` printed when it started (its line in `oxidepm logs`).
fn started(env: &Env, app: &str) -> Value {
    env.wait(30, &format!("{app}'s start line"), || {
        env.ok(&["logs", app, "--out", "-n", "20"])
            .lines()
            .find_map(|l| {
                let (_, json) = l.split_once(" started ")?;
                serde_json::from_str::<Value>(json).ok()
            })
    })
}

/// Starts pm2's `init simple` file; returns its app's pid, which a refused
/// start must leave as it is.
fn running_app(env: &Env) -> u32 {
    env.ok(&["start", &fixture("init-simple/ecosystem.config.js")]);
    env.wait_status("app1", "online");
    env.pid("app1")
}

/// Nothing but `app1`, as it was.
fn unchanged(env: &Env, pid: u32) {
    assert_eq!(names(env), ["app1"], "nothing defined");
    assert_eq!(env.pid("app1"), pid, "nothing restarted");
}

fn names(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = env
        .daemon_status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn each_fixture_starts_as_it_is() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    for file in [
        "ecosystem.config.js",
        "ecosystem.config.mjs",
        "ecosystem.config.json",
        "init-simple/ecosystem.config.js",
    ] {
        env.ok(&["start", &fixture(file)]);
    }
    assert_eq!(
        names(&env),
        ["api", "app1", "esm-web", "json-api", "worker"]
    );
    for app in ["api", "app1", "esm-web", "json-api", "worker"] {
        env.wait_status(app, "online");
    }

    let api = started(&env, "api");
    assert_eq!(
        api["argv"],
        serde_json::json!(["--port", "3000", "--label", "api server"])
    );
    assert_eq!(
        api["execArgv"],
        serde_json::json!(["--max-old-space-size=256"])
    );
    assert_eq!(
        (api["NODE_ENV"].as_str(), api["PORT"].as_str()),
        (Some("development"), Some("3000"))
    );
    assert_eq!(api["cwd"], fixtures().display().to_string());
    let worker = started(&env, "worker");
    assert_eq!(worker["argv"], serde_json::json!(["--queue", "default"]));
    assert_eq!(worker["execArgv"], serde_json::json!(["--no-warnings"]));
    assert_eq!(
        started(&env, "esm-web")["argv"],
        serde_json::json!(["--web"])
    );
    assert_eq!(started(&env, "json-api")["PORT"], "4000");
    assert_eq!(
        started(&env, "app1")["cwd"],
        fixtures().join("init-simple").display().to_string()
    );

    // Numbers given as strings and pm2-logrotate's keys are the settings.
    let spec = &env.json(&["show", "api"])[0]["spec"];
    assert_eq!(spec["kill_timeout_ms"], 3000);
    assert_eq!(spec["max_restarts"], 10);
    assert_eq!(spec["max_memory_bytes"], 300u64 << 20);
    assert_eq!(spec["log_max_bytes"], 20u64 << 20);
    let spec = &env.json(&["show", "json-api"])[0]["spec"];
    assert_eq!(
        (spec["log_max_bytes"].as_u64(), spec["log_keep"].as_u64()),
        (Some(5 << 20), Some(7))
    );
}

#[test]
fn env_production_reaches_the_apps() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let js = fixture("ecosystem.config.js");
    let err = env.fails(&["start", &js, "--env", "production", "--env", "staging"]);
    assert!(err.contains("give one name"), "{err}");
    assert!(
        !env.home.join("daemon.sock").exists(),
        "refused before anything was sent"
    );
    // A KEY=VALUE next to the name is a variable for every app of the file.
    env.ok(&[
        "start",
        &js,
        "--env",
        "production",
        "--env",
        "LOG_LEVEL=debug",
    ]);
    env.ok(&[
        "start",
        &fixture("ecosystem.config.mjs"),
        "--env",
        "production",
    ]);
    for app in ["api", "worker"] {
        let spec = &env.json(&["show", app])[0]["spec"];
        assert_eq!(spec["env"]["LOG_LEVEL"], "debug", "{app}");
        assert_eq!(spec["env"]["NODE_ENV"], "production", "{app}");
    }
    let api = started(&env, "api");
    assert_eq!(
        (api["NODE_ENV"].as_str(), api["PORT"].as_str()),
        (Some("production"), Some("8080"))
    );
    let worker = started(&env, "worker");
    assert_eq!(worker["NODE_ENV"], "production");
    assert_eq!(worker["QUEUE_CONCURRENCY"], "4");
    assert_eq!(started(&env, "esm-web")["NODE_ENV"], "production");
}

#[test]
fn an_env_no_app_has_starts_nothing() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    let err = env.fails(&["start", &fixture("ecosystem.config.js"), "--env", "prod"]);
    assert!(
        err.contains("env_production"),
        "names the sections there are: {err}"
    );
    unchanged(&env, pid);
}

#[test]
fn log_paths_are_not_written_and_logs_are_in_the_home() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let out = env.run(&["start", &fixture("ecosystem.config.js"), "--only", "api"]);
    assert!(out.status.success());
    let warnings = String::from_utf8_lossy(&out.stderr);
    // Each path is named with where the output is instead.
    let home_logs = env.home.join("logs").display().to_string();
    assert!(
        warnings.contains(&format!("{home_logs}/api-out.log")),
        "{warnings}"
    );
    assert!(
        warnings.contains(&format!("{home_logs}/api-err.log")),
        "{warnings}"
    );
    started(&env, "api");
    let err = env.wait(30, "api's stderr line", || {
        let e = env.ok(&["logs", "api", "--err"]);
        e.contains("stderr line from 3000").then_some(e)
    });
    assert!(!err.is_empty());
    assert!(
        !fixtures().join("logs").exists(),
        "the file's log directory is not created"
    );
}

#[test]
fn only_starts_the_named_apps() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    env.ok(&["start", &fixture("ecosystem.config.js"), "--only", "worker"]);
    assert_eq!(names(&env), ["worker"]);
    let err = env.fails(&[
        "start",
        &fixture("ecosystem.config.js"),
        "--only",
        "worker,nope",
    ]);
    assert!(err.contains("\"nope\""), "{err}");
    assert_eq!(names(&env), ["worker"]);
}

#[test]
fn without_node_nothing_starts() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    let out = env
        .cmd()
        .env("PATH", env.path("no-bin"))
        .args(["start", &fixture("ecosystem.config.js")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node is needed to read ecosystem.config.js; install Node.js or write the file as ecosystem.config.json"),
        "{err}"
    );
    unchanged(&env, pid);
}

/// Writes an ecosystem file into its own directory of the test's temp dir.
fn js_file(env: &Env, dir: &str, text: &str) -> String {
    let dir = env.path(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ecosystem.config.js");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_file_that_never_finishes_is_stopped_with_what_it_started() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    // It starts a process that holds node's output open, then loops.
    let file = js_file(
        &env,
        "forever",
        "const c = require('child_process').spawn('sleep', ['1000'], { stdio: 'inherit' });\n\
         require('fs').writeFileSync(__dirname + '/child.pid', String(c.pid));\n\
         for (;;) {}\n",
    );
    let err = env.fails(&["start", &file]);
    assert!(err.contains("did not finish"), "{err}");
    let child: u32 = std::fs::read_to_string(env.path("forever/child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    env.wait(10, "the file's child to be gone", || !alive(child));
    unchanged(&env, pid);
}

#[test]
fn a_file_that_prints_100_mib_is_stopped() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    let printing = js_file(
        &env,
        "prints",
        "const mib = 'x'.repeat(1 << 20);\n\
         for (let i = 0; i < 100; i++) process.stdout.write(mib);\n\
         module.exports = { apps: [{ name: 'a', script: 'a.js' }] };\n",
    );
    let exporting = js_file(
        &env,
        "exports",
        // Past the 16 MiB bound, small enough that node serializes it well
        // within its 10 s on a loaded machine (100 MiB took longer).
        "module.exports = { apps: [{ name: 'a', script: 'a.js', args: 'y'.repeat(24 << 20) }] };\n",
    );
    let complaining = js_file(
        &env,
        "complains",
        "const mib = 'x'.repeat(1 << 20);\n\
         for (let i = 0; i < 100; i++) process.stderr.write(mib);\n\
         module.exports = { apps: [{ name: 'a', script: 'a.js' }] };\n",
    );
    for file in [printing, exporting, complaining] {
        let err = env.fails(&["start", &file]);
        assert!(err.contains("more than 16 MiB"), "{err}");
    }
    unchanged(&env, pid);
}

#[test]
fn a_js_error_is_nodes_message() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    let file = js_file(
        &env,
        "broken",
        "module.exports = { apps: [{ name: 'a', script: scriptPath }] };\n",
    );
    let err = env.fails(&["start", &file]);
    assert!(err.contains("scriptPath is not defined"), "{err}");
    let file = js_file(&env, "function", "module.exports = () => ({ apps: [] });\n");
    let err = env.fails(&["start", &file]);
    assert!(err.contains("exports a function"), "{err}");
    // A field error names the app and the field, not node's output lines.
    let file = js_file(
        &env,
        "field",
        "module.exports = { apps: [{ name: 'a', script: 'a.js', kill_timeout: 'soon' }] };\n",
    );
    let err = env.fails(&["start", &file]);
    assert!(
        err.contains(&format!(
            "{file}: app \"a\": field \"kill_timeout\": invalid duration"
        )),
        "{err}"
    );
    unchanged(&env, pid);
}

#[test]
fn ctrl_c_while_node_reads_the_file_stops_node_and_what_it_started() {
    if !node_or_skip() {
        return;
    }
    let env = Env::new();
    let pid = running_app(&env);
    let file = js_file(
        &env,
        "interrupted",
        "const c = require('child_process').spawn('sleep', ['1000'], { stdio: 'inherit' });\n\
         require('fs').writeFileSync(__dirname + '/pids', process.pid + ' ' + c.pid);\n\
         for (;;) {}\n",
    );
    let mut cli = env
        .cmd()
        .args(["start", &file])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pids_file = env.path("interrupted/pids");
    let pids: Vec<u32> = env.wait(10, "node to be running the file", || {
        let text = std::fs::read_to_string(&pids_file).ok()?;
        let pids: Vec<u32> = text.split(' ').filter_map(|p| p.parse().ok()).collect();
        (pids.len() == 2).then_some(pids)
    });
    crate::harness::kill(cli.id(), libc::SIGINT);
    let status = cli.wait().unwrap();
    assert!(!status.success());
    for p in pids {
        env.wait(10, "node and its child to be gone", || !alive(p));
    }
    unchanged(&env, pid);
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
cp.execSync("setsid sh -c 'echo $$ > {d}/double.tmp; mv {d}/double.tmp {d}/double.pid; exec sleep 100000' > /dev/null 2>&1 < /dev/null & while [ ! -s {d}/double.pid ]; do sleep 0.01; done");
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
        let pid: u32 = env.wait(20, &format!("{name}.pid"), || {
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
