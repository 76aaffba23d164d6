//! An app's log writer killed (`kill -9`), also after a daemon restart:
//! the app is unharmed (same pid, no restart) and its next lines reach
//! the log. A disk-full gap in a log is marked in it and counted by `show`.

use super::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// An app that writes `ready`, then one line to stdout and one to stderr
/// each time a file `go-<n>` appears in the test's dir, and is silent
/// otherwise (a quiet app: its next write comes long after the writer died).
fn quiet_app(env: &Env, name: &str) -> u32 {
    let dir = env.path("");
    let script = env.script(
        "quiet.sh",
        &format!(
            "i=1\necho ready\nwhile :; do\n  if [ -e {d}/go-$i ]; then echo \"line $i\"; echo \"err $i\" >&2; i=$((i+1)); fi\n  sleep 0.05\ndone",
            d = dir.display()
        ),
    );
    env.ok(&["start", "--name", name, "--", &script]);
    let out = log(env, name, "out");
    env.wait(20, "the app's first line", || read(&out).contains("ready"));
    env.pid(name)
}

fn log(env: &Env, app: &str, stream: &str) -> PathBuf {
    env.home.join("logs").join(format!("{app}-{stream}.log"))
}

/// Lets the quiet app write line `n`, and waits for it in both logs.
fn speak(env: &Env, app: &str, n: u32) {
    std::fs::write(env.path(&format!("go-{n}")), "").unwrap();
    let (out, err) = (log(env, app, "out"), log(env, app, "err"));
    env.wait(20, "the app's lines in its logs", || {
        read(&out).contains(&format!("line {n}\n")) && read(&err).contains(&format!("err {n}\n"))
    });
}

/// Kills the one writer of the home and waits until another runs.
fn kill_the_writer(env: &Env) {
    let before = env.log_writers();
    assert_eq!(before.len(), 1, "{before:?}");
    kill(before[0], libc::SIGKILL);
    env.wait(20, "a new log writer", || {
        let now = env.log_writers();
        now.len() == 1 && now[0] != before[0]
    });
}

fn assert_unharmed(env: &Env, app: &str, pid: u32) {
    let a = env.app(app);
    assert_eq!(a["status"], "online", "{a}");
    assert_eq!(a["pid"].as_u64(), Some(pid as u64), "{a}");
    assert_eq!(a["restarts"].as_u64(), Some(0), "{a}");
    assert!(alive(pid));
}

#[test]
fn a_killed_log_writer_is_replaced_and_a_quiet_app_keeps_logging() {
    let env = Env::new();
    let pid = quiet_app(&env, "q");
    kill_the_writer(&env);
    // The app's first write since its writer died.
    speak(&env, "q", 1);
    assert_unharmed(&env, "q", pid);
    // And again: the replacement is watched as the first one was.
    kill_the_writer(&env);
    speak(&env, "q", 2);
    assert_unharmed(&env, "q", pid);
}

#[test]
fn a_log_writer_killed_after_a_daemon_restart_is_replaced_too() {
    let env = Env::new();
    let pid = quiet_app(&env, "q");
    env.kill_daemon();
    env.ok(&["ping"]);
    assert_unharmed(&env, "q", pid);
    // The new daemon took copies of the pipes from the old writer.
    kill_the_writer(&env);
    speak(&env, "q", 1);
    assert_unharmed(&env, "q", pid);
    // Twice over: a daemon restart with a writer the daemon started.
    env.kill_daemon();
    env.ok(&["ping"]);
    kill_the_writer(&env);
    speak(&env, "q", 2);
    assert_unharmed(&env, "q", pid);
}

#[test]
fn a_stopped_app_leaves_no_writer_behind() {
    let env = Env::new();
    quiet_app(&env, "q");
    kill_the_writer(&env);
    env.ok(&["stop", "q"]);
    // The pipes have no writer left: the replacement ends at EOF and
    // nobody starts another.
    env.wait(20, "the writers to end", || env.log_writers().is_empty());
    env.ok(&["start", "q"]);
    env.wait(20, "one writer", || env.log_writers().len() == 1);
}

/// A directory holding links to the CLI and the daemon only (no
/// `oxidepm-logwriter` beside them), removed on drop.
struct BareInstall(PathBuf);

impl BareInstall {
    fn new() -> BareInstall {
        let cli = bin("oxidepm");
        // Beside the real binaries: hard links need the same file system.
        let dir = cli
            .parent()
            .unwrap()
            .join(format!("bare-install-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["oxidepm", "oxidepmd"] {
            let _ = std::fs::remove_file(dir.join(name));
            std::fs::hard_link(bin(name), dir.join(name)).unwrap();
        }
        BareInstall(dir)
    }
}

impl Drop for BareInstall {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn without_the_writer_program_the_daemon_runs_the_same_writer_itself() {
    let bare = BareInstall::new();
    let env = Env::new();
    // The daemon started by this CLI is the one beside it.
    let out = std::process::Command::new(bare.0.join("oxidepm"))
        .env("OXIDEPM_HOME", &env.home)
        .arg("ping")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pid = quiet_app(&env, "q");
    let w = env.log_writers();
    assert_eq!(w.len(), 1, "{w:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", w[0])).unwrap();
    let argv0 = String::from_utf8_lossy(cmdline.split(|&b| b == 0).next().unwrap()).into_owned();
    assert!(argv0.ends_with("/oxidepmd"), "{argv0}");
    kill_the_writer(&env);
    speak(&env, "q", 1);
    assert_unharmed(&env, "q", pid);
}

/// A small tmpfs mounted over a directory for the life of the value.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_disk_full_gap_is_marked_in_the_log_and_counted_by_show() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: mounting a small tmpfs for the logs needs root");
        return;
    }
    let env = Env::new();
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let logs = env.home.join("logs");
    let Some(_mount) = Tmpfs::mount(&logs, "1m") else {
        println!("skipped: cannot mount a tmpfs (no mount permission in this container)");
        return;
    };
    // Each go-<n> writes 3,000 lines of 100 bytes (more than a pipe holds,
    // so the writer has read and tried to write most of them by the time
    // the app is done), then done-<n>.
    let (lines, line_len) = (3000u64, 100u64);
    let d = env.path("").display().to_string();
    let script = env.script(
        "burst.sh",
        &format!(
            "x=$(printf '%0{w}d' 0 | tr 0 x)\necho ready\ni=1\nwhile :; do\n  if [ -e {d}/go-$i ]; then n=0; while [ $n -lt {lines} ]; do echo \"$x\"; n=$((n+1)); done; touch {d}/done-$i; i=$((i+1)); fi\n  sleep 0.05\ndone",
            w = line_len - 1
        ),
    );
    // Without timestamps, every byte in the log is the app's.
    env.ok(&["start", "--name", "b", "--no-timestamps", "--", &script]);
    let out = logs.join("b-out.log");
    env.wait(20, "the app's first line", || read(&out).contains("ready"));
    let pid = env.pid("b");

    // Fill the disk.
    let filler = logs.join("filler");
    let e = std::fs::write(&filler, vec![b'f'; 4 << 20]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    std::fs::write(env.path("go-1"), "").unwrap();
    env.wait(60, "the burst to be written", || {
        env.path("done-1").exists()
    });
    // Space again; the next line closes the gap.
    std::fs::remove_file(&filler).unwrap();
    std::fs::write(env.path("go-2"), "").unwrap();
    env.wait(60, "the second burst", || env.path("done-2").exists());
    env.wait(20, "the second burst in the log", || {
        read(&out).lines().filter(|l| l.starts_with('x')).count() as u64 >= lines
    });
    let text = read(&out);
    let markers: Vec<&str> = text.lines().filter(|l| l.starts_with("… ")).collect();
    assert_eq!(markers.len(), 1, "{markers:?}");
    let words: Vec<&str> = markers[0].split(' ').collect();
    assert_eq!(words[2..4], ["bytes", "dropped"], "{}", markers[0]);
    assert!(
        markers[0].ends_with(": No space left on device"),
        "{}",
        markers[0]
    );
    let dropped: u64 = words[1].parse().unwrap();
    assert!(dropped > 0);
    // Every byte of the first burst is in the log or counted as dropped
    // (a line torn by the full disk is ended by the writer's own newline).
    let x_lines: Vec<&str> = text.lines().filter(|l| l.starts_with('x')).collect();
    let torn = x_lines
        .iter()
        .filter(|l| (l.len() as u64) < line_len - 1)
        .count() as u64;
    assert!(torn <= 1, "{torn}");
    let in_log = x_lines.iter().map(|l| l.len() as u64 + 1).sum::<u64>() - torn;
    assert_eq!(in_log + dropped, 2 * lines * line_len, "dropped {dropped}");

    let shown: Value = env.json(&["show", "b"]);
    let shown = if shown.is_array() {
        shown[0].clone()
    } else {
        shown
    };
    assert_eq!(
        shown["log_dropped_bytes"].as_u64(),
        Some(dropped),
        "{shown}"
    );
    let human = env.ok(&["show", "b"]);
    assert!(human.contains(&dropped.to_string()), "{human}");
    assert_unharmed(&env, "b", pid);
}
