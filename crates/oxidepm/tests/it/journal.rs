//! systemd's journal, read on a private socket in the native protocol (the
//! daemon is pointed at it by OXIDEPM_JOURNAL_SOCKET): an app with
//! `log_target = "journald"` or `"both"`, a journal that is not there, and
//! the daemon's own log under systemd (a faked JOURNAL_STREAM).

use super::harness::*;
use oxidepm_logwriter::journal::{recv_entry, SOCKET_ENV};
use oxidepm_testkit::words;
use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

type Entry = BTreeMap<String, Vec<u8>>;

/// A private journal: a datagram socket in the test's dir.
fn journal(env: &Env) -> (UnixDatagram, PathBuf) {
    let path = env.path("journal.sock");
    let rx = UnixDatagram::bind(&path).unwrap();
    // A bound on a hung test, not an assertion on speed.
    rx.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    (rx, path)
}

/// The next entry on the private journal.
fn next(rx: &UnixDatagram) -> Entry {
    recv_entry(rx)
        .expect("an entry on the private journal")
        .into_iter()
        .collect()
}

fn text(e: &Entry, field: &str) -> String {
    String::from_utf8_lossy(e.get(field).map(Vec::as_slice).unwrap_or_default()).into_owned()
}

/// Starts the daemon with the journal socket at `sock`.
fn start_daemon(env: &Env, sock: &Path) {
    let o = env
        .cmd()
        .env(SOCKET_ENV, sock)
        .arg("ping")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

/// An app file with one app `name` running `script`, with `extra` lines.
fn app_file(env: &Env, name: &str, script: &str, extra: &str) -> String {
    let cfg = env.path(&format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!("[[apps]]\nname = \"{name}\"\nscript = \"{script}\"\n{extra}"),
    )
    .unwrap();
    cfg.to_string_lossy().into_owned()
}

/// An app that writes one line to stdout, one with binary bytes, one to
/// stderr, then waits.
fn talker(env: &Env) -> String {
    env.script(
        "talk.sh",
        "echo 'hello out'\nprintf 'bin \\001\\377 end\\n'\necho 'hello err' >&2\nexec sleep 100000",
    )
}

/// A log file's text ("" when absent); the binary line is not UTF-8.
fn lossy(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

fn log(env: &Env, app: &str, stream: &str) -> PathBuf {
    env.home.join("logs").join(format!("{app}-{stream}.log"))
}

/// Entries until the three lines of `talker` have arrived (the two streams
/// have no order between them).
fn talker_entries(rx: &UnixDatagram) -> BTreeMap<String, Entry> {
    let mut got = BTreeMap::new();
    while got.len() < 3 {
        let e = next(rx);
        got.insert(text(&e, "MESSAGE"), e);
    }
    got
}

#[test]
fn an_app_with_log_target_journald_goes_to_the_journal_with_its_identifier() {
    let env = Env::new();
    let (rx, sock) = journal(&env);
    start_daemon(&env, &sock);
    let cfg = app_file(&env, "web", &talker(&env), "log_target = \"journald\"\n");
    env.ok(&["start", &cfg]);

    let got = talker_entries(&rx);
    let out = &got["hello out"];
    assert_eq!(text(out, "SYSLOG_IDENTIFIER"), "web");
    assert_eq!(text(out, "OXIDEPM_APP"), "web");
    assert_eq!(text(out, "PRIORITY"), "6");
    let err = &got["hello err"];
    assert_eq!(text(err, "SYSLOG_IDENTIFIER"), "web");
    assert_eq!(text(err, "PRIORITY"), "3");
    // Binary bytes arrive as they were written.
    let bin = got
        .values()
        .find(|e| e["MESSAGE"].starts_with(b"bin "))
        .expect("the binary line");
    assert_eq!(bin["MESSAGE"], b"bin \x01\xff end");
    // Journal only: no log file holds the lines.
    for stream in ["out", "err"] {
        let text = lossy(&log(&env, "web", stream));
        assert!(!text.contains("hello"), "{stream}: {text}");
    }
}

#[test]
fn log_target_both_in_daemon_toml_sends_every_app_to_journal_and_files() {
    let env = Env::new();
    env.daemon_toml("log_target = \"both\"\n");
    let (rx, sock) = journal(&env);
    start_daemon(&env, &sock);
    env.ok(&["start", "--name", "api", "--", &talker(&env)]);

    let got = talker_entries(&rx);
    assert_eq!(text(&got["hello out"], "SYSLOG_IDENTIFIER"), "api");
    assert_eq!(text(&got["hello err"], "PRIORITY"), "3");
    let (out, err) = (log(&env, "api", "out"), log(&env, "api", "err"));
    env.wait(20, "the lines in the files too", || {
        lossy(&out).contains("hello out") && lossy(&err).contains("hello err")
    });
}

#[test]
fn an_app_saying_files_keeps_out_of_the_journal_of_a_both_daemon() {
    let env = Env::new();
    env.daemon_toml("log_target = \"both\"\n");
    let (rx, sock) = journal(&env);
    start_daemon(&env, &sock);
    let cfg = app_file(&env, "quiet", &talker(&env), "log_target = \"files\"\n");
    env.ok(&["start", &cfg]);
    let (out, err) = (log(&env, "quiet", "out"), log(&env, "quiet", "err"));
    env.wait(20, "the lines in the files", || {
        lossy(&out).contains("bin ") && lossy(&err).contains("hello err")
    });
    // Everything the app wrote is in its files and nothing was sent.
    rx.set_nonblocking(true).unwrap();
    let e = recv_entry(&rx).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
}

#[test]
fn without_a_journal_the_output_of_a_journald_app_still_reaches_its_files() {
    let env = Env::new();
    let absent = env.path("no-journal.sock");
    start_daemon(&env, &absent);
    let cfg = app_file(&env, "web", &talker(&env), "log_target = \"journald\"\n");
    env.ok(&["start", &cfg]);
    let (out, err) = (log(&env, "web", "out"), log(&env, "web", "err"));
    env.wait(20, "the lines in the files", || {
        lossy(&out).contains("hello out")
            && lossy(&out).contains("bin ")
            && lossy(&err).contains("hello err")
    });
    // The daemon's log says where the journal was looked for.
    let daemon_log = read(&env.home.join("daemon.log"));
    assert!(
        daemon_log.contains(&absent.display().to_string()),
        "{daemon_log}"
    );
    assert_eq!(env.app("web")["status"], "online");
}

#[test]
fn a_daemon_toml_journald_without_a_journal_keeps_every_line_in_the_files() {
    let env = Env::new();
    env.daemon_toml("log_target = \"journald\"\n");
    let absent = env.path("no-journal.sock");
    start_daemon(&env, &absent);
    // Said at start, before any app writes.
    assert!(read(&env.home.join("daemon.log")).contains(&absent.display().to_string()));
    env.ok(&["start", "--name", "api", "--", &talker(&env)]);
    let (out, err) = (log(&env, "api", "out"), log(&env, "api", "err"));
    env.wait(20, "the lines in the files", || {
        lossy(&out).contains("hello out")
            && lossy(&out).contains("bin ")
            && lossy(&err).contains("hello err")
    });
}

#[test]
fn a_bad_log_target_is_refused_with_the_values_to_use() {
    let env = Env::new();
    let cfg = app_file(&env, "web", "/bin/true", "log_target = \"syslog\"\n");
    let err = env.fails(&["start", &cfg]);
    assert!(err.contains("journald"), "{err}");
    // Refused before any request: not even the daemon was started.
    assert_eq!(env.run(&["status"]).status.code(), Some(3));
    env.ok(&["ping"]);
    assert!(env.status().is_empty(), "nothing may start");
}

/// Runs `oxidepmd --foreground` on the test's home with stderr to a file
/// and JOURNAL_STREAM naming that file (as systemd names the stream it
/// connects), or, unless `matching`, another one (as a child of a service
/// inherits it with its stderr pointed elsewhere); returns the daemon.
fn foreground_daemon(env: &Env, sock: &Path, matching: bool) -> std::process::Child {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(&env.home).unwrap();
    let stderr = std::fs::File::create(env.path("stderr")).unwrap();
    let named = if matching {
        stderr.metadata().unwrap()
    } else {
        std::fs::metadata(env.path("journal.sock")).unwrap()
    };
    let (dev, ino) = (named.dev(), named.ino());
    let child = std::process::Command::new(bin("oxidepmd"))
        .args(["--foreground", "--home"])
        .arg(&env.home)
        .env(SOCKET_ENV, sock)
        .env("JOURNAL_STREAM", format!("{dev}:{ino}"))
        .env_remove("OXIDEPM_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    env.wait(30, "the daemon to answer", || {
        std::os::unix::net::UnixStream::connect(env.home.join("daemon.sock")).is_ok()
    });
    child
}

fn stop(env: &Env, mut child: std::process::Child) {
    env.ok(&["kill"]);
    let _ = child.wait();
}

#[test]
fn under_systemd_the_daemon_logs_entries_with_priority_app_and_actor() {
    let env = Env::new();
    let (rx, sock) = journal(&env);
    let child = foreground_daemon(&env, &sock, true);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let started = loop {
        let e = next(&rx);
        if text(&e, "OXIDEPM_APP") == "web" && text(&e, "OXIDEPM_EVENT") == "started" {
            break e;
        }
    };
    assert_eq!(text(&started, "SYSLOG_IDENTIFIER"), "oxidepmd");
    assert_eq!(text(&started, "PRIORITY"), "6");
    assert_eq!(text(&started, "OXIDEPM_EVENT"), "started");
    assert!(
        text(&started, "OXIDEPM_ACTOR").starts_with("human:"),
        "{started:?}"
    );
    // The journal stamps entries itself: the message carries no timestamp.
    assert!(
        text(&started, "MESSAGE").starts_with("web: "),
        "{started:?}"
    );
    stop(&env, child);
}

#[test]
fn journal_stream_inherited_by_a_daemon_whose_stderr_is_elsewhere_is_ignored() {
    let env = Env::new();
    let (rx, sock) = journal(&env);
    let child = foreground_daemon(&env, &sock, false);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.ok(&["stop", "web"]);
    // The records went to stderr as text, and nothing to the journal.
    assert!(read(&env.path("stderr")).contains("web"));
    rx.set_nonblocking(true).unwrap();
    let e = recv_entry(&rx).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
    stop(&env, child);
}

#[test]
fn the_start_flag_sends_an_app_to_the_journal_and_a_bad_value_is_refused() {
    let env = Env::new();
    let (rx, sock) = journal(&env);
    start_daemon(&env, &sock);
    let err = env.fails(&strs(&words("start --log-target syslog --name x -- true")));
    assert!(err.contains("journald"), "{err}");
    assert!(env.status().is_empty(), "nothing may start");

    // A line as long as the writer's longest arrives whole, unmangled.
    let long = "z".repeat(60_000);
    let script = env.script("long.sh", &format!("echo {long}\nexec sleep 100000"));
    env.ok(&[
        "start",
        "--log-target",
        "journald",
        "--name",
        "long",
        "--",
        &script,
    ]);
    let e = next(&rx);
    assert_eq!(text(&e, "SYSLOG_IDENTIFIER"), "long");
    assert_eq!(text(&e, "MESSAGE"), long);
}
