//! The home is checked before it is trusted, logs never follow links, and
//! what apps print reaches a person's terminal escaped. Each test is the
//! attack: another user's home, a writable home, links planted in logs/,
//! terminal control sequences in an app's output.

use crate::harness::{bin, read, test_user, Env};
use serde_json::Value;
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A user other than the daemon's (created once, as root): its uid.
fn intruder() -> Option<u32> {
    test_user("oxpm-intruder").map(|(uid, _)| uid)
}

/// Names in a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `oxidepmd --home` run directly (no CLI): its stderr, after asserting it failed.
fn daemon_refuses(env: &Env) -> String {
    let o = Command::new(bin("oxidepmd"))
        .arg("--home")
        .arg(&env.home)
        .env_remove("OXIDEPM_LOG")
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "oxidepmd accepted {}",
        env.home.display()
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_home_another_user_created_first_is_refused_and_left_untouched() {
    let Some(uid) = intruder() else {
        eprintln!("skipped: needs root to create a second user");
        return;
    };
    let env = Env::new();
    // The intruder makes the home first, with a link where the daemon
    // writes its lock: taking the home would truncate the victim.
    let victim = env.path("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink(&victim, env.home.join("daemon.lock")).unwrap();
    std::os::unix::fs::lchown(env.home.join("daemon.lock"), Some(uid), None).unwrap();
    std::os::unix::fs::chown(&env.home, Some(uid), None).unwrap();

    // The CLI starts the daemon on its own: it is refused the same way.
    let err = env.fails(&["ping"]);
    let home = env.home.display().to_string();
    assert!(
        err.contains(&home) && err.contains(&format!("uid {uid}")),
        "{err}"
    );
    let err = daemon_refuses(&env);
    assert!(
        err.contains("chown") && err.contains("OXIDEPM_HOME"),
        "{err}"
    );

    assert_eq!(read(&victim), "precious\n");
    assert_eq!(listing(&env.home), ["daemon.lock"]);
    let meta = std::fs::metadata(&env.home).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (uid, 0o755));
}

#[test]
fn a_home_others_can_write_is_refused_and_left_untouched() {
    let env = Env::new();
    for mode in [0o777, 0o775] {
        std::fs::create_dir_all(&env.home).unwrap();
        std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = env.fails(&["ping"]);
        assert!(
            err.contains(&env.home.display().to_string()) && err.contains("chmod go-w"),
            "{err}"
        );
        daemon_refuses(&env);
        // Not tightened, not filled: nothing was written.
        assert!(listing(&env.home).is_empty());
        let meta = std::fs::metadata(&env.home).unwrap();
        assert_eq!(meta.mode() & 0o7777, mode);
    }
}

#[test]
fn a_link_in_place_of_logs_is_refused() {
    let env = Env::new();
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    symlink(&elsewhere, env.home.join("logs")).unwrap();
    let err = env.fails(&["ping"]);
    assert!(
        err.contains("logs") && err.contains("symbolic link"),
        "{err}"
    );
    assert!(listing(&elsewhere).is_empty());
    assert_eq!(listing(&env.home), ["logs"]);
}

#[test]
fn links_planted_in_logs_are_never_written_read_truncated_or_rotated_through() {
    let env = Env::new();
    env.ok(&["ping"]);
    let logs = env.home.join("logs");
    let victim = env.path("victim");
    let rotated_victim = env.path("rotated-victim");
    for v in [&victim, &rotated_victim] {
        std::fs::write(v, "precious\n").unwrap();
    }
    symlink(&victim, logs.join("spy-out.log")).unwrap();
    symlink(&rotated_victim, logs.join("spy-err.log.1")).unwrap();
    // Enough on each stream for several rotations of 1 KiB files.
    let app = env.path("spy.json");
    let script = "i=0; while [ $i -lt 200 ]; do echo out-line-$i; echo err-line-$i >&2; \
                  i=$((i+1)); done";
    std::fs::write(
        &app,
        serde_json::json!([{
            "name": "spy", "script": "sh", "args": ["-c", script],
            "autorestart": false, "log_max_size": 1024, "log_files_kept": 2
        }])
        .to_string(),
    )
    .unwrap();
    env.ok(&["start", app.to_str().unwrap()]);
    env.wait(20, "spy to finish", || {
        env.daemon_app("spy")["status"] == "stopped"
    });
    // Its log shim has read everything and exited.
    env.wait(20, "the log shim to finish", || {
        env.log_writers().is_empty()
    });

    let logs_out = env.ok(&["logs", "spy", "--lines", "1000"]);
    assert!(!logs_out.contains("precious"), "{logs_out}");
    assert!(logs_out.contains("err-line-199"), "{logs_out}");
    let err = env.fails(&["flush", "spy"]);
    assert!(
        err.contains("spy-out.log") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(read(&victim), "precious\n");
    assert_eq!(read(&rotated_victim), "precious\n");
    // The link is still a link; the rotated one was replaced by a real log.
    assert!(std::fs::symlink_metadata(logs.join("spy-out.log"))
        .unwrap()
        .is_symlink());
    assert!(std::fs::symlink_metadata(logs.join("spy-err.log.1"))
        .unwrap()
        .is_file());
    assert!(read(&logs.join("spy-err.log")).contains("err-line-199"));
}

/// What the app prints: a clipboard write (OSC 52), a title change, and a
/// line that erases its own prefix to pose as another app's.
const EVIL: &str = "printf 'clip \\033]52;c;ZXZpbA==\\007 done\\n'; \
                    printf 'title \\033]0;pwned\\007\\n'; \
                    printf 'forged\\r\\033[2Kother|out| fake\\n'; \
                    printf 'END\\n'";

/// Starts the app printing [`EVIL`] and waits until it is all logged.
fn evil_app(env: &Env) {
    env.ok(&[
        "start",
        "--name",
        "evil",
        "--restart",
        "never",
        "--no-timestamps",
        "--",
        "sh",
        "-c",
        EVIL,
    ]);
    env.wait(20, "the app's output", || {
        read(&env.home.join("logs/evil-out.log")).contains("END")
    });
}

/// Runs the CLI with its stdout on a terminal (a pty in raw mode, so the
/// bytes read are the bytes written) until it exits, or, with `until`,
/// until that is printed (then it is stopped: for `--follow`).
fn on_terminal(env: &Env, args: &[&str], until: Option<&str>) -> Vec<u8> {
    use nix::sys::termios;
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut t = termios::tcgetattr(&pty.slave).unwrap();
    termios::cfmakeraw(&mut t);
    termios::tcsetattr(&pty.slave, termios::SetArg::TCSANOW, &t).unwrap();
    // The slave's only copy goes to the child (the Command is dropped at
    // the end of the statement), so the master reads EIO once it exits.
    let mut child = env
        .cmd()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(pty.slave))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    // Ends when the reader does (the CLI exited) or nothing comes for 20 s.
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(20)) {
        out.extend(chunk);
        if until.is_some_and(|u| String::from_utf8_lossy(&out).contains(u)) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap();
    out.extend(rx.try_iter().flatten());
    out
}

#[test]
fn control_characters_reach_a_terminal_escaped() {
    let env = Env::new();
    evil_app(&env);
    for args in [
        (&["logs", "evil", "--out"][..], None),
        (&["logs", "evil", "--out", "--follow"][..], Some("END")),
    ] {
        let (args, until) = args;
        let out = on_terminal(&env, args, until);
        let text = String::from_utf8_lossy(&out);
        assert!(
            !out.iter().any(|&b| b == 0x1b || b == 0x07),
            "{args:?}: {text:?}"
        );
        // The only CR is the end of a printed line (none in raw mode).
        assert!(!out.contains(&b'\r'), "{args:?}: {text:?}");
        assert!(
            text.contains("evil|out| clip \\x1b]52;c;ZXZpbA==\\x07 done"),
            "{args:?}: {text:?}"
        );
        assert!(
            text.contains("evil|out| title \\x1b]0;pwned\\x07"),
            "{text:?}"
        );
        assert!(
            text.contains("evil|out| forged\\r\\x1b[2Kother|out| fake"),
            "{text:?}"
        );
    }
}

#[test]
fn raw_pipes_and_json_keep_the_bytes() {
    let env = Env::new();
    evil_app(&env);
    let clip = "clip \x1b]52;c;ZXZpbA==\x07 done";
    let forged = "forged\r\x1b[2Kother|out| fake";
    // --no-escape on a terminal: the bytes, as asked.
    let out = on_terminal(&env, &["logs", "evil", "--out", "--no-escape"], None);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains(clip) && text.contains(forged), "{text:?}");
    // Into a pipe: the bytes, with or without --raw.
    for args in [
        &["logs", "evil", "--out"][..],
        &["logs", "evil", "--raw"][..],
    ] {
        let text = env.ok(args);
        assert!(text.contains(clip) && text.contains(forged), "{text:?}");
    }
    // --json: each line is JSON, its string the exact bytes.
    let text = String::from_utf8(on_terminal(
        &env,
        &["logs", "evil", "--out", "--json"],
        None,
    ))
    .unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v["line"].as_str().map(String::from))
        .collect();
    assert!(lines.iter().any(|l| l == clip), "{lines:?}");
    assert!(lines.iter().any(|l| l == forged), "{lines:?}");
}

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
