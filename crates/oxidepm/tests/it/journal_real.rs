//! The real systemd-journald, when it is installed and we are root: run in
//! a private journal namespace (its own sockets and files, removed after),
//! it takes an app's lines under the app's identifier, as `journalctl -t`
//! finds them, and an entry larger than a datagram sent as a memory file.

use super::harness::*;
use oxidepm_logwriter::journal::{push_field, Journal, SOCKET_ENV};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

const JOURNALD: &str = "/lib/systemd/systemd-journald";

/// A systemd-journald serving namespace `ns`; killed and its files removed on drop.
struct Journald {
    child: Child,
    ns: String,
}

impl Journald {
    /// Starts one (`tag` tells the namespaces of tests running at once
    /// apart), or says why not and returns None.
    fn start(tag: &str) -> Option<Journald> {
        if !nix::unistd::geteuid().is_root() {
            println!("skipped: systemd-journald needs root");
            return None;
        }
        if !std::path::Path::new(JOURNALD).exists() || which("journalctl").is_none() {
            println!("skipped: systemd-journald or journalctl is not installed");
            return None;
        }
        let ns = format!("oxpm{tag}{}", std::process::id());
        let child = Command::new(JOURNALD)
            .arg(&ns)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let j = Journald { child, ns };
        let sock = j.socket();
        oxidepm_testkit::eventually(Duration::from_secs(30), "journald's socket", || {
            sock.exists()
        });
        Some(j)
    }

    fn socket(&self) -> PathBuf {
        PathBuf::from(format!("/run/systemd/journal.{}/socket", self.ns))
    }

    /// Entries of `identifier` as `journalctl -t` shows them (all fields, however large).
    fn entries(&self, identifier: &str) -> Vec<Value> {
        let o = Command::new("journalctl")
            .arg(format!("--namespace={}", self.ns))
            .args(["-t", identifier, "-o", "json", "--all", "--no-pager"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Journald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
        let id = id.trim();
        let _ = std::fs::remove_dir_all(format!("/run/systemd/journal.{}", self.ns));
        if !id.is_empty() {
            for base in ["/run/log/journal", "/var/log/journal"] {
                let _ = std::fs::remove_dir_all(format!("{base}/{id}.{}", self.ns));
            }
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.exists())
    })
}

fn message(e: &Value) -> Vec<u8> {
    match &e["MESSAGE"] {
        Value::String(s) => s.clone().into_bytes(),
        // journalctl gives a non-UTF-8 or binary value as its bytes.
        Value::Array(a) => a
            .iter()
            .filter_map(|b| b.as_u64().map(|b| b as u8))
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn the_real_journald_files_app_lines_under_the_app_name() {
    let Some(journald) = Journald::start("app") else {
        return;
    };
    let env = Env::new();
    let o = env
        .cmd()
        .env(SOCKET_ENV, journald.socket())
        .args(["start", "--log-target", "journald", "--name", "webj", "--"])
        .args([
            "sh",
            "-c",
            "echo out-line; echo err-line >&2; printf 'b\\001x\\n'; exec sleep 100000",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let entries = env.wait(30, "three entries in the journal", || {
        let e = journald.entries("webj");
        (e.len() >= 3).then_some(e)
    });
    let by_message = |m: &[u8]| {
        entries
            .iter()
            .find(|e| message(e) == m)
            .unwrap_or_else(|| panic!("{:?} in {entries:?}", String::from_utf8_lossy(m)))
    };
    let out = by_message(b"out-line");
    assert_eq!(out["PRIORITY"], "6");
    assert_eq!(out["OXIDEPM_APP"], "webj");
    assert_eq!(by_message(b"err-line")["PRIORITY"], "3");
    by_message(b"b\x01x");
}

#[test]
fn the_real_journald_takes_an_entry_larger_than_a_datagram() {
    let Some(journald) = Journald::start("big") else {
        return;
    };
    let big = "m".repeat(600_000);
    let mut entry = Vec::new();
    push_field(&mut entry, "MESSAGE", big.as_bytes());
    push_field(&mut entry, "SYSLOG_IDENTIFIER", b"oxpm-big");
    Journal::new(&journald.socket())
        .unwrap()
        .send(&entry)
        .unwrap();
    let got =
        oxidepm_testkit::eventually(Duration::from_secs(30), "the entry in the journal", || {
            journald.entries("oxpm-big").pop()
        });
    assert_eq!(message(&got).len(), big.len());
}

#[test]
fn under_a_real_journal_stream_the_daemon_logs_entries_with_fields() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let Some(journald) = Journald::start("daemon") else {
        return;
    };
    let env = Env::new();
    std::fs::create_dir_all(&env.home).unwrap();
    // What systemd does for a service's stderr: a stream connection to
    // journald, its header, and JOURNAL_STREAM naming it.
    let stdout_sock = journald.socket().with_file_name("stdout");
    let mut stream = std::os::unix::net::UnixStream::connect(&stdout_sock).unwrap();
    stream
        .write_all(b"oxidepmd-stream\n\n6\n1\n0\n0\n0\n")
        .unwrap();
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        stream.as_raw_fd()
    }))
    .unwrap();
    let mut child = Command::new(bin("oxidepmd"))
        .args(["--foreground", "--home"])
        .arg(&env.home)
        .env(SOCKET_ENV, journald.socket())
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env_remove("OXIDEPM_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::os::fd::OwnedFd::from(stream))
        .spawn()
        .unwrap();
    env.wait(30, "the daemon to answer", || {
        std::os::unix::net::UnixStream::connect(env.home.join("daemon.sock")).is_ok()
    });
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let started = env.wait(30, "the start in the journal", || {
        journald
            .entries("oxidepmd")
            .into_iter()
            .find(|e| e["OXIDEPM_APP"] == "web" && e["OXIDEPM_EVENT"] == "started")
    });
    assert_eq!(started["PRIORITY"], "6");
    assert!(
        started["OXIDEPM_ACTOR"]
            .as_str()
            .is_some_and(|a| a.starts_with("human:")),
        "{started}"
    );
    env.ok(&["kill"]);
    let _ = child.wait();
}
