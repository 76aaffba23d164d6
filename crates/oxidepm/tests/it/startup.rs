//! `startup` and `unstartup`: the unit's name and text, installing it
//! where systemd answers (a stand-in `systemctl` on PATH), refusing
//! cleanly where it does not, and the sudo line for a person who is not
//! root.

use crate::harness::{bin, test_user, Env};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// A directory with a `systemctl` and a `loginctl` that log their
/// arguments to `calls` and exit with `systemctl_exit` (or fail on a
/// `failing` subcommand).
fn stubs(env: &Env, systemctl: &str) -> PathBuf {
    let dir = env.path("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let calls = env.path("calls");
    for (name, body) in [
        ("systemctl", systemctl.to_string()),
        ("loginctl", "exit 0".to_string()),
    ] {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> {}\n{body}\n",
                calls.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn units(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_unit_of_a_home_that_is_not_the_default_runs_that_home() {
    let env = Env::new();
    let o = env.run(&["startup", "--user"]);
    assert!(o.status.success());
    let unit = String::from_utf8_lossy(&o.stdout);
    let home = env.home.display().to_string();
    let daemon = bin("oxidepmd").canonicalize().unwrap();
    assert!(
        unit.contains(&format!(
            "ExecStart={} --foreground --resurrect --home {home}\n",
            daemon.display()
        )),
        "{unit}"
    );
    assert!(
        unit.contains(&format!("Environment=OXIDEPM_HOME={home}\n")),
        "{unit}"
    );
    assert!(
        unit.contains("ExecReload=/bin/kill -HUP $MAINPID"),
        "{unit}"
    );
    let advice = String::from_utf8_lossy(&o.stderr);
    assert!(advice.contains("loginctl enable-linger"), "{advice}");
}

#[test]
fn write_where_systemd_does_not_answer_fails_and_writes_nothing() {
    let env = Env::new();
    let cfg = env.path("cfg");
    let stub = stubs(
        &env,
        "echo 'Failed to connect to bus: No medium found' >&2; exit 1",
    );
    let o = env
        .cmd()
        .env("XDG_CONFIG_HOME", &cfg)
        .env("PATH", &stub)
        .args(["startup", "--user", "--write"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("systemd does not answer"), "{e}");
    assert!(e.contains("Failed to connect to bus"), "{e}");
    assert!(e.contains("nothing was written"), "{e}");
    assert!(units(&cfg.join("systemd/user")).is_empty());
    // No systemctl at all: the same.
    let o = env
        .cmd()
        .env("XDG_CONFIG_HOME", &cfg)
        .env("PATH", env.path("nowhere"))
        .args(["startup", "--user", "--write"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(units(&cfg.join("systemd/user")).is_empty());
}

#[test]
fn a_failed_enable_takes_the_unit_back() {
    let env = Env::new();
    let cfg = env.path("cfg");
    let stub = stubs(
        &env,
        "case \"$*\" in *enable*) echo 'Access denied' >&2; exit 1;; esac; exit 0",
    );
    let o = env
        .cmd()
        .env("XDG_CONFIG_HOME", &cfg)
        .env("PATH", &stub)
        .args(["startup", "--user", "--write"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("Access denied") && e.contains("taken back"),
        "{e}"
    );
    assert!(units(&cfg.join("systemd/user")).is_empty());
}

#[test]
fn unstartup_removes_what_startup_wrote() {
    let env = Env::new();
    let cfg = env.path("cfg");
    let stub = stubs(&env, "exit 0");
    let run = |args: &[&str]| {
        env.cmd()
            .env("XDG_CONFIG_HOME", &cfg)
            .env("PATH", &stub)
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["startup", "--user", "--write"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = cfg.join("systemd/user");
    let written = units(&dir);
    assert_eq!(written.len(), 1, "{written:?}");
    let name = &written[0];
    // Named after the home, which is not ~/.oxidepm.
    assert!(
        name.starts_with("oxidepm-") && name.ends_with(".service"),
        "{name}"
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("linger"), "{said}");
    let calls = std::fs::read_to_string(env.path("calls")).unwrap();
    assert!(calls.contains("systemctl --user daemon-reload"), "{calls}");
    assert!(
        calls.contains(&format!("systemctl --user enable {name}")),
        "{calls}"
    );

    let o = run(&["unstartup", "--user"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(units(&dir).is_empty());
    let calls = std::fs::read_to_string(env.path("calls")).unwrap();
    assert!(
        calls.contains(&format!("systemctl --user disable {name}")),
        "{calls}"
    );

    let o = run(&["unstartup", "--user"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no unit") && e.contains("nothing to remove"),
        "{e}"
    );
}

#[test]
fn a_person_who_is_not_root_gets_the_sudo_line_and_nothing_is_written() {
    let Some((uid, gid)) = test_user("oxpm-startup") else {
        eprintln!("skipped: needs root to run the CLI as another user");
        return;
    };
    let env = Env::new();
    let run = |args: &[&str]| {
        env.cmd()
            .uid(uid)
            .gid(gid)
            .env("HOME", "/nonexistent")
            .args(args)
            .output()
            .unwrap()
    };
    let before = units(Path::new("/etc/systemd/system"));
    let o = run(&["startup", "--write"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    let home = env.home.display().to_string();
    let exe = bin("oxidepm").display().to_string();
    let line = format!(
        "sudo env PATH=$PATH OXIDEPM_HOME={home} {exe} startup --write --run-as oxpm-startup"
    );
    assert!(e.contains(&line), "{e}");
    assert!(e.contains("only root can install"), "{e}");
    assert_eq!(units(Path::new("/etc/systemd/system")), before);
    // Printing it says the same line, and succeeds.
    let o = run(&["startup"]);
    assert!(o.status.success());
    let unit = String::from_utf8_lossy(&o.stdout);
    assert!(unit.contains("User=oxpm-startup\n"), "{unit}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(&line));
}
