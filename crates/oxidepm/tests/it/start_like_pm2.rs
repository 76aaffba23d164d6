//! `start` as a pm2 user types it: scripts by extension, named after the
//! script; an existing app never redefined silently; a file started all
//! or nothing; a start that cannot happen named by its real cause.

use crate::harness::{alive, read, strs, test_user, Env};
use oxidepm_testkit::words;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs the CLI in `dir` (where a pm2 user types `start app.js`).
fn run_in(env: &Env, dir: &Path, args: &[&str]) -> Output {
    env.cmd().current_dir(dir).args(args).output().unwrap()
}

#[track_caller]
fn ok_in(env: &Env, dir: &Path, args: &[&str]) -> String {
    let o = run_in(env, dir, args);
    assert!(
        o.status.success(),
        "oxidepm {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn fails_in(env: &Env, dir: &Path, args: &[&str]) -> String {
    let o = run_in(env, dir, args);
    assert!(
        !o.status.success(),
        "oxidepm {args:?} should fail but printed {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A directory of the test's temp dir.
fn dir(env: &Env, name: &str) -> PathBuf {
    let d = env.path(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The command line of a live process.
fn cmdline(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// An app's spec as `show` gives it.
fn spec(env: &Env, name: &str) -> Value {
    env.json(&["show", name])[0]["spec"].clone()
}

fn on_path(program: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| Path::new(d).join(program).is_file())
}

/// A script that stays up: `app.js` when node is installed, else
/// `app.py` (python3 is always there), with its marker in the text so two
/// scripts of the same name differ.
fn long_script(d: &Path, marker: &str) -> &'static str {
    if on_path("node") {
        std::fs::write(
            d.join("app.js"),
            format!("// {marker}\nsetInterval(() => {{}}, 1000);\n"),
        )
        .unwrap();
        "app.js"
    } else {
        println!("node is not on PATH: the same-name tests use app.py");
        std::fs::write(
            d.join("app.py"),
            format!("# {marker}\nimport time\nwhile True: time.sleep(1)\n"),
        )
        .unwrap();
        "app.py"
    }
}

#[test]
fn start_app_js_runs_node_and_names_the_app_after_the_script() {
    if !on_path("node") {
        println!("skipped: node is not on PATH (test.sh installs it)");
        return;
    }
    let env = Env::new();
    let d = dir(&env, "web");
    std::fs::write(d.join("app.js"), "setInterval(() => {}, 1000);\n").unwrap();
    ok_in(&env, &d, &["start", "app.js", "--", "--port", "8080"]);
    env.wait_status("app", "online");
    let argv = cmdline(env.pid("app"));
    let script = d.join("app.js").display().to_string();
    assert!(argv[0].ends_with("node"), "{argv:?}");
    assert_eq!(argv[1..], [script.as_str(), "--port", "8080"]);
    // `./app.js` is the same script, the same app: nothing to change.
    let pid = env.pid("app");
    let out = ok_in(&env, &d, &["start", "./app.js", "--", "--port", "8080"]);
    assert!(out.contains("unchanged"), "{out}");
    assert_eq!(env.pid("app"), pid);
    // `start -- node other.js` is another app, named after its script.
    std::fs::write(d.join("other.js"), "setInterval(() => {}, 1000);\n").unwrap();
    ok_in(&env, &d, &["start", "--", "node", "other.js"]);
    env.wait_status("other", "online");
    assert_eq!(env.pid("app"), pid);
    assert!(alive(pid));
}

#[test]
fn python_and_shell_scripts_run_with_their_interpreter() {
    let env = Env::new();
    let d = dir(&env, "jobs");
    let argv_out = d.join("argv.txt");
    std::fs::write(
        d.join("worker.py"),
        format!(
            "import sys, time\nopen({:?}, 'w').write(' '.join(sys.argv[1:]))\nwhile True: time.sleep(1)\n",
            argv_out.display().to_string()
        ),
    )
    .unwrap();
    // Neither script is executable: the extension says what runs it.
    std::fs::write(
        d.join("run.sh"),
        "echo \"$@\" > shell-args.txt\nexec sleep 100000\n",
    )
    .unwrap();
    ok_in(&env, &d, &["start", "./worker.py", "--", "--queue", "mail"]);
    ok_in(&env, &d, &["start", "run.sh", "--", "a", "b c"]);
    env.wait_status("worker", "online");
    env.wait_status("run", "online");
    env.wait(20, "the python worker's arguments", || {
        read(&argv_out) == "--queue mail"
    });
    env.wait(20, "the shell script's arguments", || {
        read(&d.join("shell-args.txt")).trim() == "a b c"
    });
    let py = spec(&env, "worker");
    assert_eq!(py["command"], "python3");
    assert_eq!(py["cwd"], d.display().to_string());
    let sh = spec(&env, "run");
    assert_eq!(sh["command"], "sh");
    assert_eq!(sh["args"][0], d.join("run.sh").display().to_string());
}

#[test]
fn a_program_and_its_arguments_after_dashes_run_as_given() {
    let env = Env::new();
    let d = dir(&env, "p");
    // pm2's `start npm --name x -- start`, with a program every host has.
    ok_in(
        &env,
        &d,
        &[
            "start",
            "sh",
            "--name",
            "x",
            "--",
            "-c",
            "echo up > up.txt; exec sleep 100000",
        ],
    );
    env.wait_status("x", "online");
    env.wait(20, "the program to run", || {
        read(&d.join("up.txt")).trim() == "up"
    });
    let s = spec(&env, "x");
    assert_eq!(s["command"], "sh");
    assert_eq!(s["args"][0], "-c");
    // `start -- sh other.sh`: named after the script, not the interpreter.
    std::fs::write(d.join("other.sh"), "exec sleep 100000\n").unwrap();
    ok_in(&env, &d, &["start", "--", "sh", "other.sh"]);
    env.wait_status("other", "online");
    // A TypeScript file needs --interpreter, and says so; nothing defined.
    std::fs::write(d.join("api.ts"), "console.log(1)\n").unwrap();
    let err = fails_in(&env, &d, &["start", "api.ts"]);
    assert!(err.contains("--interpreter"), "{err}");
    // A file that says nothing of what runs it, likewise.
    std::fs::write(d.join("notes.txt"), "x\n").unwrap();
    let err = fails_in(&env, &d, &["start", "notes.txt"]);
    assert!(err.contains("--interpreter"), "{err}");
    // A script typed in the wrong directory: not an app, not a file here.
    let err = fails_in(&env, &d, &["start", "nothere.js"]);
    assert!(
        err.contains("E_NOT_FOUND") && err.contains("no file \"nothere.js\""),
        "{err}"
    );
    let names: Vec<Value> = env.status().iter().map(|a| a["name"].clone()).collect();
    assert_eq!(names, ["x", "other"]);
}

#[test]
fn a_second_script_of_the_same_name_never_replaces_the_first() {
    let env = Env::new();
    let first = dir(&env, "one");
    let second = dir(&env, "two");
    let file = long_script(&first, "one");
    long_script(&second, "two");
    let name = file.trim_end_matches(".js").trim_end_matches(".py");
    ok_in(&env, &first, &["start", file]);
    env.wait_status(name, "online");
    let pid = env.pid(name);
    let before = spec(&env, name);
    let events = env.daemon_events(name).len();

    let err = fails_in(&env, &second, &["start", file]);
    assert!(err.contains(&format!("{name:?}")), "{err}");
    assert!(err.contains("args") && err.contains("cwd"), "{err}");
    assert!(err.contains("--name") && err.contains("--update"), "{err}");
    assert_eq!(env.pid(name), pid);
    assert!(alive(pid));
    assert_eq!(spec(&env, name), before);
    assert_eq!(env.daemon_events(name).len(), events, "nothing recorded");

    // The same script again: no change, the same process.
    let out = ok_in(&env, &first, &["start", file]);
    assert!(out.contains("unchanged"), "{out}");
    assert_eq!(env.pid(name), pid);

    // --update applies it, and says what changed.
    let out = ok_in(&env, &second, &["start", file, "--update"]);
    assert!(out.contains("changed"), "{out}");
    assert!(out.contains("args:") && out.contains('→'), "{out}");
    env.wait(20, "the new script to run", || {
        env.daemon_app(name)["pid"]
            .as_u64()
            .is_some_and(|p| p as u32 != pid)
    });
    env.wait(20, "the old process to be gone", || !alive(pid));
    assert_eq!(spec(&env, name)["cwd"], second.display().to_string());
}

#[test]
fn an_agent_on_the_wire_gets_the_same_rule() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.wait_status("web", "online");
    let pid = env.pid("web");
    let r = env.raw("daemon.sock").call(serde_json::json!({
        "id": 1, "op": "define", "update": false,
        "apps": [{"name": "web", "command": "sleep", "args": ["5"]}]
    }));
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["code"], "E_CONFLICT");
    assert_eq!(env.pid("web"), pid);
    // Without the flag (a file's define, an older client) it changes.
    let r = env.raw("daemon.sock").call(serde_json::json!({
        "id": 2, "op": "define",
        "apps": [{"name": "web", "command": "sleep", "args": ["100001"]}]
    }));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"][0]["action"], "changed");
    assert_eq!(r["result"][0]["changes"][0]["field"], "args");
}

/// An app file of `apps` (TOML bodies of `[[apps]]` tables).
fn app_file(env: &Env, name: &str, apps: &[String]) -> String {
    let p = env.path(name);
    let text: Vec<String> = apps.iter().map(|a| format!("[[apps]]\n{a}\n")).collect();
    std::fs::write(&p, text.concat()).unwrap();
    p.display().to_string()
}

#[test]
fn a_file_with_a_missing_cwd_starts_nothing() {
    let env = Env::new();
    let gone = env.path("no-such-dir");
    let file = app_file(
        &env,
        "apps.toml",
        &[
            "name = \"good\"\nscript = \"sleep\"\nargs = [\"100000\"]".into(),
            format!(
                "name = \"lost\"\nscript = \"sleep\"\nargs = [\"1\"]\ncwd = {:?}",
                gone.display().to_string()
            ),
            "name = \"after\"\nscript = \"sleep\"\nargs = [\"100000\"]".into(),
        ],
    );
    let err = env.fails(&["start", &file]);
    assert!(err.contains("\"lost\""), "{err}");
    assert!(
        err.contains(&format!(
            "working directory {:?} does not exist",
            gone.display().to_string()
        )),
        "{err}"
    );
    assert!(!err.contains("not found"), "{err}");
    assert!(env.status().is_empty(), "nothing defined");
    assert!(env.json(&["events"]).as_array().unwrap().is_empty());
}

#[test]
fn a_file_with_two_bad_apps_names_both() {
    let env = Env::new();
    let file = app_file(
        &env,
        "apps.toml",
        &[
            "name = \"ok\"\nscript = \"sleep\"\nargs = [\"100000\"]".into(),
            "name = \"lost\"\nscript = \"sleep\"\ncwd = \"/nonexistent/oxpm\"".into(),
            "name = \"missing\"\nscript = \"oxpm-no-such-program\"".into(),
            "name = \"nobody\"\nscript = \"sleep\"\nuser = \"oxpm-no-such-user\"".into(),
        ],
    );
    let err = env.fails(&["start", &file]);
    assert!(
        err.contains("\"nobody\"") && err.contains("oxpm-no-such-user"),
        "{err}"
    );
    assert!(
        err.contains("\"lost\"") && err.contains("/nonexistent/oxpm"),
        "{err}"
    );
    assert!(
        err.contains("\"missing\"") && err.contains("oxpm-no-such-program") && err.contains("PATH"),
        "{err}"
    );
    assert!(!err.contains("\"ok\""), "{err}");
    assert!(env.status().is_empty());
}

#[test]
fn a_start_that_fails_after_the_checks_is_undone() {
    let env = Env::new();
    // Running before, with a spec the file changes.
    env.ok(&["start", "--name", "keep", "--", "sleep", "100000"]);
    env.wait_status("keep", "online");
    let old_spec = spec(&env, "keep");
    // Found and executable, but its interpreter is not there: only the
    // exec can tell.
    let broken = env.path("broken");
    std::fs::write(&broken, "#!/nonexistent/oxpm-interp\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = app_file(
        &env,
        "apps.toml",
        &[
            "name = \"fresh\"\nscript = \"sleep\"\nargs = [\"100000\"]".into(),
            format!(
                "name = \"broken\"\nscript = {:?}",
                broken.display().to_string()
            ),
            "name = \"keep\"\nscript = \"sleep\"\nargs = [\"100001\"]".into(),
        ],
    );
    let err = env.fails(&["start", &file]);
    assert!(
        err.contains("\"broken\"") && err.contains("/nonexistent/oxpm-interp"),
        "{err}"
    );
    assert!(err.contains("undone"), "{err}");
    let names: Vec<Value> = env.status().iter().map(|a| a["name"].clone()).collect();
    assert_eq!(names, ["keep"], "what the request created is gone");
    assert_eq!(spec(&env, "keep"), old_spec, "its old spec is back");
    env.wait_status("keep", "online");
    let pid = env.pid("keep");
    assert_eq!(cmdline(pid), ["sleep", "100000"]);
}

#[test]
fn an_app_of_another_user_gets_that_users_path_and_home() {
    let Some((uid, _)) = test_user("oxpm-pm2user") else {
        println!("skipped: needs root to create a user");
        return;
    };
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .unwrap()
        .unwrap();
    let env = Env::new();
    // A directory the user may write in, outside the test's 0700 temp dir.
    let shared = tempfile::Builder::new().prefix("oxpm-u").tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = shared.path().join("env.txt");
    let cwd = shared.path().display().to_string();
    env.ok(&[
        "start",
        "--user",
        "oxpm-pm2user",
        "--name",
        "svc",
        "--cwd",
        &cwd,
        "--",
        "sh",
        "-c",
        &format!(
            "echo \"$PATH|$HOME|$USER|$LOGNAME|$SHELL\" > {}; exec sleep 100000",
            out.display()
        ),
    ]);
    env.wait(20, "the app's environment", || !read(&out).is_empty());
    let seen = read(&out);
    let expected = format!(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|{}|oxpm-pm2user|oxpm-pm2user|{}",
        user.dir.display(),
        user.shell.display()
    );
    assert_eq!(seen.trim(), expected);

    // A program that is not on that user's PATH: which PATH, which user.
    let err = env.fails(&strs(&words(
        "start --user oxpm-pm2user --name np -- oxpm-no-such-program",
    )));
    assert!(
        err.contains("\"oxpm-pm2user\"") && err.contains("/usr/local/sbin:/usr/local/bin"),
        "{err}"
    );

    // Executable by root only: found, then refused by the exec as that
    // user; the app it would have created is not left behind.
    let private = shared.path().join("private.sh");
    std::fs::write(&private, "#!/bin/sh\nexec sleep 100000\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = env.fails(&[
        "start",
        "--user",
        "oxpm-pm2user",
        "--name",
        "priv",
        "--cwd",
        &cwd,
        "--",
        &private.display().to_string(),
    ]);
    assert!(
        err.contains("\"priv\"") && err.contains("permission denied"),
        "{err}"
    );
    assert!(err.contains("oxpm-pm2user"), "{err}");
    let names: Vec<Value> = env.status().iter().map(|a| a["name"].clone()).collect();
    assert_eq!(names, ["svc"]);
}

#[test]
fn a_script_never_replaces_an_app_of_a_file_and_a_file_says_what_it_changed() {
    let env = Env::new();
    let d = dir(&env, "svc");
    std::fs::write(
        d.join("worker.py"),
        "import time\nwhile True: time.sleep(1)\n",
    )
    .unwrap();
    let file = app_file(
        &env,
        "apps.toml",
        &["name = \"worker\"\nscript = \"sleep\"\nargs = [\"100000\"]".into()],
    );
    env.ok(&["start", &file]);
    env.wait_status("worker", "online");
    let pid = env.pid("worker");
    // pm2's habit, `start worker.py`, meets the file's app of that name.
    let err = fails_in(&env, &d, &["start", "worker.py"]);
    assert!(
        err.contains("\"worker\"") && err.contains("--name"),
        "{err}"
    );
    assert_eq!(env.pid("worker"), pid);
    assert_eq!(env.daemon_app("worker")["status"], "online");
    // The file again, changed: applied, and what changed is printed.
    let file = app_file(
        &env,
        "apps.toml",
        &["name = \"worker\"\nscript = \"sleep\"\nargs = [\"100001\"]".into()],
    );
    let out = env.ok(&["start", &file]);
    assert!(
        out.contains(r#"worker: args: ["100000"] → ["100001"]"#),
        "{out}"
    );
    let changed = env
        .daemon_events("worker")
        .into_iter()
        .find(|e| e["kind"] == "changed")
        .expect("a changed event");
    assert!(
        changed["detail"].as_str().unwrap().contains("args:"),
        "{changed}"
    );
}

#[test]
fn a_program_gone_at_a_restart_is_named_with_the_path_it_was_looked_up_on() {
    let env = Env::new();
    let bin = dir(&env, "bin");
    let prog = bin.join("oxpm-tool");
    std::fs::write(&prog, "#!/bin/sh\nexec /bin/sleep 100000\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("PATH={}", bin.display());
    env.ok(&["start", "--name", "tool", "--env", &path, "--", "oxpm-tool"]);
    env.wait_status("tool", "online");
    std::fs::remove_file(&prog).unwrap();
    let err = env.fails(&["restart", "tool"]);
    assert!(
        err.contains("\"oxpm-tool\" not found on the PATH of user"),
        "{err}"
    );
    assert!(err.contains(&bin.display().to_string()), "{err}");
}

/// `start run.sh -i 3`: three instances of one spec, each told its
/// number; `scale` then grows the group; cluster mode and `-i` with an app
/// file are refused before anything is defined.
#[test]
fn dash_i_starts_instances_that_scale_grows() {
    let env = Env::new();
    let d = dir(&env, "work");
    std::fs::write(
        d.join("run.sh"),
        "echo \"instance $OXIDEPM_INSTANCE\"\nexec sleep 300\n",
    )
    .unwrap();
    ok_in(&env, &d, &["start", "run.sh", "-i", "3"]);
    for i in 0..3 {
        let name = format!("run-{i}");
        env.wait_status(&name, "online");
        assert_eq!(spec(&env, &name)["env"]["OXIDEPM_INSTANCE"], i.to_string());
    }
    ok_in(&env, &d, &["scale", "run", "4"]);
    env.wait_status("run-3", "online");

    let e = fails_in(
        &env,
        &d,
        &["start", "run.sh", "--name", "other", "-i", "max"],
    );
    assert!(e.contains("cluster mode"), "{e}");
    std::fs::write(
        d.join("apps.toml"),
        "[[apps]]\nname = \"f\"\nscript = \"run.sh\"\n",
    )
    .unwrap();
    let e = fails_in(&env, &d, &["start", "apps.toml", "-i", "2"]);
    assert!(e.contains("instances = N"), "{e}");
    let names: Vec<String> = env
        .json(&["status"])
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["run-0", "run-1", "run-2", "run-3"]);
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
    env.ok(&strs(&words(
        "start --update --name x --protected -- sleep 200000",
    )));
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
