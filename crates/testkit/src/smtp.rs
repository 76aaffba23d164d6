//! A real SMTP server to send mail to: Python's `aiosmtpd`, writing each
//! message it accepts as `<n>.json` (`from`, `to`, `data`) in a temp dir.
//!
//! Without `python3` and `aiosmtpd` (`python3 -m pip install aiosmtpd`)
//! [`SmtpSink::start`] says why and gives `None`, so the test can skip,
//! unless `OXIDEPM_REQUIRE_SMTP_SINK=1`, which makes that a failure (for
//! CI, where the test script installs it).

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The sink: prints its port, refuses recipients starting with `reject4`
/// (450) or `reject5` (550), and exits when its stdin closes.
const SCRIPT: &str = include_str!("smtp_sink.py");

/// A running SMTP sink on loopback; stopped on drop.
pub struct SmtpSink {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl SmtpSink {
    /// Starts the sink, or explains why it cannot (then the test skips).
    pub fn start() -> Option<SmtpSink> {
        let probe = Command::new("python3")
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(probe, Ok(s) if s.success()) {
            let why = match probe {
                Err(e) => format!("python3 not runnable: {e}"),
                Ok(_) => "python3 has no aiosmtpd module".to_owned(),
            };
            if std::env::var_os("OXIDEPM_REQUIRE_SMTP_SINK").is_some_and(|v| v == "1") {
                panic!("SMTP sink required but unavailable: {why}");
            }
            // Straight to stderr, past the test harness's output capture,
            // so the skip shows in a normal `cargo test` run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIP SMTP sink test: {why} \
                 (install it with `python3 -m pip install aiosmtpd`)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("python3")
            .args(["-c", SCRIPT])
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the SMTP sink did not report its port: {line:?}")
        });
        Some(SmtpSink { child, port, dir })
    }

    /// `127.0.0.1:<port>`, for a relay setting.
    pub fn relay(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where it writes `<n>.json` per message, numbered from 1.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The messages received, oldest first, once there are `n` of them or
    /// after 10 s, whichever comes first: the caller asserts the count.
    pub fn received(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            if files.len() >= n || Instant::now() > deadline {
                files.sort_by_key(|p| {
                    p.file_stem()
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .parse::<u32>()
                        .unwrap()
                });
                return files
                    .iter()
                    .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
                    .collect();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        // Waited for, so that its port is closed once the drop returns.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
