//! The CLI's manners: reads never start a daemon, a closed pipe is not a
//! crash, colour only on a terminal that wants it, completions and a man
//! page, local mistakes reported as usage errors.

use crate::harness::{alive, bin, Env};
use serde_json::Value;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Every read command, as a user types it.
const READS: &[&[&str]] = &[
    &["status"],
    &["status", "web"],
    &["show", "web"],
    &["logs"],
    &["logs", "web", "--since", "10m"],
    &["lanes"],
    &["events"],
    &["events", "--follow"],
    &["audit", "--since", "1h"],
    &["whoami"],
    &["route", "list"],
];

/// Live oxidepmd processes of this home.
fn daemons(env: &Env) -> Vec<u32> {
    let home = env.home.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("oxidepmd") && cmdline.contains(&home) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn read_commands_with_no_daemon_exit_3_and_start_none() {
    let env = Env::new();
    for args in READS {
        let o = env.run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("no daemon is running"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        // JSON mode: the same refusal, machine-readable.
        let mut a = args.to_vec();
        a.push("--json");
        let o = env.run(&a);
        assert_eq!(o.status.code(), Some(3), "{a:?}");
        let v: Value = serde_json::from_slice(&o.stderr).unwrap();
        assert_eq!(v["code"], "E_NO_DAEMON", "{a:?}: {v}");
    }
    // Nothing was started, nothing written: no home, no socket, no process.
    assert!(!env.home.exists(), "a read made the home");
    assert!(daemons(&env).is_empty());
}

#[test]
fn a_read_after_the_daemon_is_gone_starts_none_and_changes_start_one() {
    let env = Env::new();
    env.ok(&["ping"]);
    env.ok(&["kill"]);
    for args in READS {
        assert_eq!(env.run(args).status.code(), Some(3), "{args:?}");
    }
    assert!(!env.home.join("daemon.sock").exists());
    assert!(daemons(&env).is_empty());
    // Commands that change something still start it.
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    assert_eq!(daemons(&env).len(), 1);
    env.wait_status("web", "online");
}

/// Runs the CLI with its stdout a pipe whose reader has already gone, as
/// `| head -0` leaves it.
fn to_closed_pipe(env: &Env, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    env.cmd()
        .args(args)
        .stdout(Stdio::from(OwnedFd::from(writer)))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let env = Env::new();
    let app = env.script(
        "chatty",
        "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; sleep 100000",
    );
    env.ok(&["start", "--name", "web", "--", &app]);
    env.wait(20, "the app's lines", || {
        env.ok(&["logs", "web", "-n", "1"]).contains("line 1999")
    });
    let cases: &[&[&str]] = &[
        &["show", "web"],
        &["whoami"],
        &["status"],
        &["status", "web"],
        &["logs", "web", "-n", "2000"],
        &["logs"],
        &["events"],
        &["audit"],
        &["lanes"],
        &["route", "list"],
        &["status", "--json"],
        &["completions", "bash"],
        &["man"],
        &["--help"],
    ];
    for args in cases {
        let o = to_closed_pipe(&env, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
    // And through a shell's pipe, as people type it: the first line is
    // there, the command's own status is 0.
    let me = crate::harness::bin("oxidepm");
    for (cmd, first) in [
        ("show web | head -1", "web [1]"),
        ("whoami | true", ""),
        ("status | head -0", ""),
        ("logs web -n 2000 | head -1", "web|out|"),
    ] {
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!("set -o pipefail; \"$X\" {cmd}"))
            .env("X", &me)
            .env("OXIDEPM_HOME", &env.home)
            .env_remove("OXIDEPM_SOCKET")
            .env_remove("OXIDEPM_ACTOR")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{cmd}: {err}");
        assert!(!err.contains("panicked"), "{cmd}: {err}");
        assert!(out.starts_with(first), "{cmd}: {out}");
    }
}

#[test]
fn a_closed_stderr_loses_notices_not_the_command() {
    let env = Env::new();
    // Starting the daemon prints a notice on stderr; a reader that left
    // must not turn it into a failure.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = env
        .cmd()
        .args(["start", "--name", "web", "--", "sleep", "100000"])
        .stderr(Stdio::from(OwnedFd::from(writer)))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    env.wait_status("web", "online");
}

/// Runs `oxidepm <args>` on a terminal (a pty from `script`), returns what
/// the terminal got.
fn on_terminal(env: &Env, args: &str, extra_env: &[(&str, &str)]) -> Option<String> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: `script` (util-linux) is not installed");
        return None;
    }
    let me = crate::harness::bin("oxidepm");
    let mut c = Command::new("script");
    c.args(["-qec", &format!("\"{}\" {args}", me.display()), "/dev/null"])
        .env("OXIDEPM_HOME", &env.home)
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR")
        .env_remove("OXIDEPM_SOCKET")
        .env_remove("OXIDEPM_ACTOR")
        .stdin(Stdio::null());
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn colour_only_on_a_terminal_that_wants_it_and_never_in_json() {
    let env = Env::new();
    let web = env.script("web", "echo web is up; sleep 100000");
    env.ok(&["start", "--name", "web", "--", &web]);
    env.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    env.ok(&["stop", "idle"]);
    env.wait_status("web", "online");
    env.wait(20, "web's line", || {
        env.ok(&["logs", "web"]).contains("web is up")
    });
    let Some(tty) = on_terminal(&env, "status", &[]) else {
        return;
    };
    // online in green, stopped in yellow.
    assert!(tty.contains("\x1b[32monline"), "{tty:?}");
    assert!(tty.contains("\x1b[33mstopped"), "{tty:?}");
    let show = on_terminal(&env, "show web", &[]).unwrap();
    assert!(show.contains("\x1b[32monline"), "{show:?}");
    for (args, extra) in [
        ("status", &[("NO_COLOR", "1")][..]),
        ("show web", &[("NO_COLOR", "1")][..]),
        ("status --no-color", &[][..]),
        ("show web --no-color", &[][..]),
        ("status --json", &[][..]),
        ("show web --json", &[][..]),
        ("logs web --json", &[][..]),
    ] {
        let out = on_terminal(&env, args, extra).unwrap();
        assert!(!out.contains('\x1b'), "{args} {extra:?}: {out:?}");
        assert!(out.contains("web"), "{args}: {out:?}");
    }
    // An empty NO_COLOR is unset (no-color.org).
    let out = on_terminal(&env, "status", &[("NO_COLOR", "")]).unwrap();
    assert!(out.contains("\x1b[32m"), "{out:?}");
    // Not a terminal: no colour.
    let piped = env.ok(&["status"]);
    assert!(
        !piped.contains('\x1b') && piped.contains("online"),
        "{piped:?}"
    );
}

#[test]
fn completions_load_in_their_shell_and_the_man_page_renders() {
    let env = Env::new();
    let bash = env.ok(&["completions", "bash"]);
    assert!(bash.contains("oxidepm"), "{bash}");
    let file = env.path("oxidepm.bash");
    std::fs::write(&file, &bash).unwrap();
    let o = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Sourced, it completes a subcommand: the script asks the binary.
    let complete = |line: &str| complete_in_bash(&env, &file, line);
    let words = complete("oxidepm sta");
    assert!(
        words.iter().any(|w| w == "start") && words.iter().any(|w| w == "status"),
        "{words:?}"
    );
    // With no daemon, an app argument completes to nothing (and starts none).
    assert!(complete("oxidepm stop w").is_empty());
    assert!(!env.home.exists());
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(
            env.ok(&["completions", shell]).contains("oxidepm"),
            "{shell}"
        );
    }
    let err = env.fails(&["completions", "tcsh"]);
    assert!(err.contains("tcsh"), "{err}");

    let man = env.ok(&["man"]);
    assert!(
        man.starts_with(".ie") || man.contains(".TH oxidepm"),
        "{man}"
    );
    assert!(man.contains(".TH oxidepm 1"), "{man}");
    assert!(
        man.contains("completions") && man.contains("status"),
        "{man}"
    );
    let page = env.path("oxidepm.1");
    std::fs::write(&page, &man).unwrap();
    if let Ok(o) = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
    {
        if o.status.success() {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("oxidepm"), "{text}");
        } else {
            eprintln!("man -l could not render here: {o:?}");
        }
    }
    // Nothing of this needs a daemon.
    assert!(!env.home.exists());
}

/// The words bash's completion offers for `line` (the cursor at its end),
/// with the script at `file` sourced and this build's `oxidepm` on PATH.
fn complete_in_bash(env: &Env, file: &Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let bin_dir = bin("oxidepm").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = env
        .cmd()
        .get_envs()
        .fold(Command::new("bash"), |mut c, (k, v)| {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
            c
        })
        .env("PATH", path)
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_TYPE=9; \
             _clap_complete_oxidepm oxidepm '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            quoted.join(" "),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len().saturating_sub(2)],
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn app_names_complete_from_the_daemon() {
    let env = Env::new();
    let file = env.path("oxidepm.bash");
    std::fs::write(&file, env.ok(&["completions", "bash"])).unwrap();
    let app = env.script("idle", "sleep 100000");
    env.ok(&["start", "--name", "web", "--tag", "front", "--", &app]);
    env.ok(&["start", "--name", "worker", "--", &app]);
    env.ok(&["start", "--name", "api", "--", &app]);
    let complete = |line: &str| complete_in_bash(&env, &file, line);
    assert_eq!(complete("oxidepm stop w"), ["web", "worker"]);
    assert_eq!(complete("oxidepm restart @"), ["@front"]);
    assert_eq!(complete("oxidepm logs a"), ["api", "all"]);
    // A word that reads as a path completes as a path (an app file).
    std::fs::write(env.path("apps.toml"), "").unwrap();
    let dir = env.path("");
    let typed = format!("{}ap", dir.display());
    let words = complete(&format!("oxidepm stop {typed}"));
    assert!(words.iter().any(|w| w.ends_with("apps.toml")), "{words:?}");
}

#[test]
fn help_shows_examples() {
    let env = Env::new();
    for (args, example) in [
        (
            &["--help"][..],
            "oxidepm start --name web -- node server.js",
        ),
        (&["start", "--help"][..], "oxidepm start --name web"),
        (&["logs", "--help"][..], "--since 10m"),
        (
            &["status", "--help"][..],
            "0 running, 3 not running, 4 unknown",
        ),
        (&["audit", "--help"][..], "--actor ai --since 1h"),
    ] {
        let out = env.ok(args);
        assert!(out.contains(example), "{args:?}: {out}");
    }
}

#[test]
fn local_mistakes_are_usage_errors_not_daemon_answers() {
    let env = Env::new();
    for (args, what) in [
        (
            &["start", "--restart", "sometimes", "--", "sleep", "1"][..],
            "--restart",
        ),
        (
            &["start", "--env", "NOEQUALS", "--", "sleep", "1"][..],
            "KEY=VALUE",
        ),
        (
            &["start", "--kill-timeout", "soon", "--", "sleep", "1"][..],
            "--kill-timeout",
        ),
        (
            &["start", "--name", "x", "no-such-file"][..],
            "no-such-file",
        ),
        (&["logs", "--since", "tomorrow"][..], "--since"),
        (&["audit", "--until", "later"][..], "--until"),
    ] {
        let o = env.run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("oxidepm: ") && err.contains(what),
            "{args:?}: {err}"
        );
        assert!(err.contains(" — "), "says what to do: {err}");
        assert!(!err.contains("E_BAD_REQUEST"), "{args:?}: {err}");
        let a: Vec<&str> = std::iter::once("--json")
            .chain(args.iter().copied())
            .collect();
        let o = env.run(&a);
        let v: Value = serde_json::from_slice(&o.stderr).unwrap();
        assert_eq!(v["code"], "E_USAGE", "{v}");
    }
    // Nothing reached a daemon, so none was started for these.
    assert!(daemons(&env).is_empty());
    // clap's own usage errors exit 2 as well.
    assert_eq!(env.run(&["stop"]).status.code(), Some(2));
}
