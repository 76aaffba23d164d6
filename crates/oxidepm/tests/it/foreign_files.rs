//! supervisord and systemd files started as they are, with a real daemon:
//! what the programs see and do is what the original tool would give them
//! (environment, arguments, restart after a crash, the stop signal, where
//! their output goes), and `oxidepm import` prints TOML that starts the
//! same apps.

use crate::harness::{kill, read, Env};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind)
}

/// Copies a fixture tree as it is (modes included) into `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The CLI with `HOME` set, as a user whose units say `%h` runs it.
fn with_home(env: &Env, home: &Path, args: &[&str]) -> std::process::Output {
    let mut c: Command = env.cmd();
    c.env("HOME", home).args(args);
    c.output().unwrap()
}

fn ok_with_home(env: &Env, home: &Path, args: &[&str]) -> String {
    let o = with_home(env, home, args);
    assert!(
        o.status.success(),
        "oxidepm {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `NAME=value` lines of an `env` dump.
fn env_of(path: &Path) -> BTreeMap<String, String> {
    read(path)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every app's spec, by name, as the daemon holds it.
fn specs(env: &Env) -> BTreeMap<String, Value> {
    let apps = env.request(json!({"id": 1, "op": "show", "target": "all"}));
    apps.as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_string(), a["spec"].clone()))
        .collect()
}

/// Waits until an app has a pid other than `old` and is online.
fn wait_restarted(env: &Env, name: &str, old: u64) {
    env.wait(30, &format!("{name} to run again"), || {
        let app = env.daemon_app(name);
        app["status"] == "online" && app["pid"].as_u64().is_some_and(|p| p != old)
    });
}

#[test]
fn a_supervisord_conf_runs_as_under_supervisord() {
    let env = Env::new();
    let dir = env.path("sv");
    copy_tree(&fixtures("supervisord"), &dir);
    let out = dir.join("out");
    let conf = dir.join("supervisord.conf");
    let started = env.run(&["start", conf.to_str().unwrap()]);
    assert!(started.status.success(), "{started:?}");
    let warnings = String::from_utf8_lossy(&started.stderr);
    assert!(
        warnings.contains("stdout_logfile"),
        "the unmapped keys are said: {warnings}"
    );
    for name in ["clock_00", "clock_01", "web", "celery"] {
        env.wait_status(name, "online");
    }

    // The environment: environment= only, %(ENV_PATH)s from the CLI's own.
    env.wait(20, "clock 1 to write its env", || {
        read(&out.join("clock-1.env")).contains("GREETING")
    });
    let seen = env_of(&out.join("clock-1.env"));
    assert_eq!(seen["GREETING"], "hello, world");
    let path = std::env::var("PATH").unwrap();
    assert_eq!(seen["PATH"], format!("/opt/shop/bin:{path}"));
    // It says it listens once its arguments and environment are written.
    env.wait(20, "web to write its arguments and environment", || {
        read(&env.home.join("logs/web-out.log")).contains("web listening")
    });
    assert_eq!(
        read(&out.join("web.args")).trim(),
        "--bind 127.0.0.1:8000 --workers 3 --access-logfile - shop.wsgi:application"
    );
    assert_eq!(
        env_of(&out.join("web.env"))["DJANGO_SETTINGS_MODULE"],
        "shop.settings.production"
    );

    // Output: in oxidepm's logs; the log path of the file is not written.
    env.wait(20, "clock 0's line in its log", || {
        env.ok(&["logs", "clock_00", "--lines", "20"])
            .contains("clock 0: hello, world")
    });
    assert!(!dir.join("logs/web.out.log").exists());

    // autorestart=true: a crash is followed by a new run.
    let old = env.daemon_app("clock_00")["pid"].as_u64().unwrap();
    kill(old as u32, libc::SIGKILL);
    wait_restarted(&env, "clock_00", old);

    // stopsignal: INT for the clock, supervisord's TERM for the web.
    env.ok(&["stop", "clock_01", "web"]);
    assert_eq!(read(&out.join("clock-1.signal")).trim(), "INT");
    assert_eq!(read(&out.join("web.signal")).trim(), "TERM");
}

#[test]
fn systemd_units_run_as_under_systemd() {
    let env = Env::new();
    let home = env.path("home");
    copy_tree(&fixtures("systemd/home"), &home);
    let shop = home.join("shop");
    let unit = fixtures("systemd/units").join("shop-api.service");
    let started = with_home(&env, &home, &["start", unit.to_str().unwrap()]);
    assert!(started.status.success(), "{started:?}");
    for name in ["shop-db", "shop-api"] {
        env.wait_status(name, "online");
    }
    let spec = &specs(&env)["shop-api"];
    assert_eq!(
        spec["depends_on"][0]["app"], "shop-db",
        "Requires= and After="
    );
    assert_eq!(spec["kill_timeout_ms"], 20_000);
    assert_eq!(spec["max_memory_bytes"], 512u64 << 20);

    // Environment= and both files (the missing optional one skipped), the
    // variables expanded in ExecStart, WorkingDirectory from %h.
    // It says on which port once its arguments and environment are written.
    env.wait(20, "the api to write its arguments and environment", || {
        read(&env.home.join("logs/shop-api-out.log")).contains("api on port")
    });
    assert_eq!(
        read(&shop.join("api.args")).trim(),
        "--port 8080 --workers 2 --verbose"
    );
    let seen = env_of(&shop.join("api.env"));
    assert_eq!(seen["GREETING"], "hello world");
    assert_eq!(seen["DATABASE_URL"], "postgres://shop@localhost/shop");
    assert_eq!(seen["LOG_LEVEL"], "info");
    assert!(shop.join("db.started").exists());

    // Output: in oxidepm's logs (StandardOutput=journal is noted).
    env.wait(20, "the api's line in its log", || {
        env.ok(&["logs", "shop-api", "--lines", "20"])
            .contains("api on port 8080")
    });

    // Restart=on-failure: a crash is followed by a new run.
    let old = env.daemon_app("shop-api")["pid"].as_u64().unwrap();
    kill(old as u32, libc::SIGKILL);
    wait_restarted(&env, "shop-api", old);
    let new = env.daemon_app("shop-api")["pid"].as_u64().unwrap();
    env.wait(20, "the new run to set its traps", || {
        read(&shop.join("api.ready")).trim() == new.to_string()
    });

    // KillSignal=SIGINT.
    env.ok(&["stop", "shop-api"]);
    assert_eq!(read(&shop.join("api.signal")).trim(), "INT");
}

/// `import` prints TOML that, started, gives the same specs as the file.
#[test]
fn import_prints_toml_that_starts_the_same_apps() {
    let cases = [
        ("supervisord", "supervisord.conf", None),
        ("supervisord", "conf.d/celery.conf", None),
        ("supervisord", "conf.d/gunicorn.conf", None),
        ("systemd", "units/shop-db.service", Some("home")),
        ("systemd", "units/shop-api.service", Some("home")),
    ];
    for (kind, file, home_dir) in cases {
        let tree = Env::new();
        let dir = tree.path("tree");
        copy_tree(&fixtures(kind), &dir);
        let home = home_dir.map_or_else(|| tree.path("none"), |h| dir.join(h));
        let source = dir.join(file);
        let toml = ok_with_home(&tree, &home, &["import", source.to_str().unwrap()]);
        assert!(toml.contains("[[apps]]") && toml.contains("\n# "), "{toml}");
        let imported = tree.path("imported.toml");
        std::fs::write(&imported, &toml).unwrap();

        let original = Env::new();
        ok_with_home(&original, &home, &["start", source.to_str().unwrap()]);
        let want = specs(&original);
        drop(original);
        let again = Env::new();
        let o = with_home(&again, &home, &["start", imported.to_str().unwrap()]);
        assert!(o.status.success(), "{file}: {o:?}\n{toml}");
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("warning"),
            "a TOML file has nothing to warn about: {o:?}"
        );
        assert_eq!(specs(&again), want, "{file}:\n{toml}");
    }
}

#[test]
fn import_refuses_a_bad_file_with_its_line_and_changes_nothing() {
    let env = Env::new();
    let conf = env.path("bad.conf");
    std::fs::write(
        &conf,
        "[program:a]\ncommand=/bin/true\nenvironment=A=%(ENV_SURELY_NOT_SET_X)s\n",
    )
    .unwrap();
    let said = env.fails(&["import", conf.to_str().unwrap()]);
    assert!(said.contains("bad.conf:3:"), "{said}");
    assert!(said.contains("SURELY_NOT_SET_X is not set"), "{said}");
    let said = env.fails(&["start", conf.to_str().unwrap()]);
    assert!(said.contains("bad.conf:3:"), "{said}");
    assert!(
        !env.home.join("daemon.sock").exists(),
        "no daemon was started"
    );
}
