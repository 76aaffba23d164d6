//! One scenario's world: the release binaries, a fresh `OXIDEPM_HOME` in a
//! temp dir, and the teardown that leaves no process behind.

use crate::procfs;
use oxidepm_sys::signal::{self, Signal};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A benchmark error: a message for a person.
pub type Error = String;
/// A benchmark result.
pub type Result<T> = std::result::Result<T, Error>;

/// The programs under test, and the benchmark itself (it doubles as a test app).
#[derive(Debug, Clone)]
pub struct Bins {
    /// `target/release/oxidepm`.
    pub cli: PathBuf,
    /// `target/release/oxidepmd`.
    pub daemon: PathBuf,
    /// This executable.
    pub me: PathBuf,
}

impl Bins {
    /// The binaries next to this executable.
    pub fn find() -> Result<Bins> {
        let me = std::env::current_exe().map_err(|e| format!("cannot find my own path: {e}"))?;
        let dir = me
            .parent()
            .ok_or("my own path has no directory")?
            .to_path_buf();
        let cli = dir.join("oxidepm");
        let daemon = dir.join("oxidepmd");
        let missing: Vec<String> = [&cli, &daemon]
            .iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} not found next to the benchmark; build the release binaries first:\n\
                 \n    cargo build --release --workspace\n\
                 \nand run the benchmark from the same target directory \
                 (cargo run --release -p oxidepm-bench -- ...)",
                missing.join(" and ")
            ));
        }
        Ok(Bins { cli, daemon, me })
    }

    /// `oxidepm-bridge`, next to this executable.
    pub fn bridge(&self) -> Result<PathBuf> {
        self.me
            .parent()
            .map(|d| d.join("oxidepm-bridge"))
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                "oxidepm-bridge is not next to the benchmark; build it: cargo build --release --workspace"
                    .into()
            })
    }

    /// A warning when a binary is older than the sources it is built from
    /// (`cargo run -p oxidepm-bench` does not rebuild oxidepm).
    pub fn staleness(&self) -> Option<String> {
        let built = [&self.cli, &self.daemon]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok()?.modified().ok())
            .min()?;
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let root = root.canonicalize().unwrap_or(root);
        let mut newest = None;
        for dir in ["crates/oxidepm", "crates/proto"] {
            newest_mtime(&root.join(dir), &mut newest);
        }
        let (when, path) = newest?;
        (when > built).then(|| {
            format!(
                "{} is newer than the release binaries; rebuild them with \
                 `cargo build --release --workspace`",
                path.display()
            )
        })
    }
}

/// The most recently modified source file under `dir` (skipping `target`).
fn newest_mtime(dir: &Path, newest: &mut Option<(std::time::SystemTime, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            if e.file_name() != "target" {
                newest_mtime(&path, newest);
            }
        } else if let Ok(m) = meta.modified() {
            if newest.as_ref().is_none_or(|(t, _)| m > *t) {
                *newest = Some((m, path));
            }
        }
    }
}

/// A fresh oxidepm home with its daemon; `teardown` ends everything started in it.
pub struct Sandbox {
    /// The binaries.
    pub bins: Bins,
    dir: tempfile::TempDir,
    daemon_pid: Option<u32>,
}

impl Sandbox {
    /// A new empty home; no daemon runs yet.
    pub fn new(bins: &Bins) -> Result<Sandbox> {
        let dir = tempfile::Builder::new()
            .prefix("oxidepm-bench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir: {e}"))?;
        Ok(Sandbox {
            bins: bins.clone(),
            dir,
            daemon_pid: None,
        })
    }

    /// The home directory (`OXIDEPM_HOME`).
    pub fn home(&self) -> &Path {
        self.dir.path()
    }

    /// `$OXIDEPM_HOME/logs`.
    pub fn logs_dir(&self) -> PathBuf {
        self.home().join("logs")
    }

    /// A command running the CLI against this home (working directory: the home).
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bins.cli);
        c.args(args)
            .env("OXIDEPM_HOME", self.home())
            .env_remove("OXIDEPM_SOCKET")
            .env_remove("OXIDEPM_ACTOR")
            .current_dir(self.home())
            .stdin(Stdio::null());
        c
    }

    /// Runs the CLI; its stdout, or an error with its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .cli(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.bins.cli.display()))?;
        checked(args, out)
    }

    /// Runs the CLI with `--json` and parses its answer.
    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let mut a = args.to_vec();
        a.push("--json");
        let text = self.run(&a)?;
        serde_json::from_str(&text)
            .map_err(|e| format!("`oxidepm {}` printed no JSON ({e}): {text:?}", a.join(" ")))
    }

    /// `oxidepm ping` (starting the daemon if needed); the daemon's pid.
    pub fn ping(&mut self) -> Result<u32> {
        let v = self.json(&["ping"])?;
        let pid = v
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("`oxidepm ping --json` has no pid: {v}"))?
            as u32;
        self.daemon_pid = Some(pid);
        Ok(pid)
    }

    /// `oxidepm status --json`: the apps.
    pub fn status(&self) -> Result<Vec<Value>> {
        match self.json(&["status"])? {
            Value::Array(a) => Ok(a),
            other => Err(format!("`oxidepm status --json` is not a list: {other}")),
        }
    }

    /// Writes a TOML config of `n` apps `s0`..`s<n-1>` running `sleep 100000`.
    pub fn sleep_config(&self, n: usize) -> Result<PathBuf> {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[apps]]\nname = \"s{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n"
            ));
        }
        let path = self.home().join("apps.toml");
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Starts `n` sleeping apps from one file and waits until all are
    /// online; the time that took.
    pub fn start_sleepers(&self, n: usize, timeout: Duration) -> Result<Duration> {
        let cfg = self.sleep_config(n)?;
        self.run(&["start", &cfg.to_string_lossy()])?;
        self.wait_online(n, timeout)
    }

    /// Polls `status --json` until `n` apps are online; the time it took.
    pub fn wait_online(&self, n: usize, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            let apps = self.status()?;
            let online = apps
                .iter()
                .filter(|a| a.get("status").and_then(Value::as_str) == Some("online"))
                .count();
            if online >= n {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > timeout {
                let other: Vec<String> = apps
                    .iter()
                    .filter(|a| a.get("status").and_then(Value::as_str) != Some("online"))
                    .take(5)
                    .map(|a| format!("{} {}", s(a, "name"), s(a, "status")))
                    .collect();
                return Err(format!(
                    "only {online} of {n} apps online after {:?} (of {} listed; not online: {})",
                    timeout,
                    apps.len(),
                    other.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// `oxidepm kill`, then SIGKILL for any process of the daemon's tree that
    /// is still there. Returns remarks about anything that needed force.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let mut tree = Vec::new();
        if let Some(pid) = self.daemon_pid {
            if let Some(d) = procfs::stat(pid) {
                tree.push(d);
            }
            tree.extend(procfs::descendants(pid));
        }
        let t0 = Instant::now();
        match self.cli(&["kill"]).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => notes.push(format!(
                "`oxidepm kill` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => notes.push(format!("cannot run `oxidepm kill`: {e}")),
        }
        let took = t0.elapsed();
        if took > Duration::from_secs(3) {
            notes.push(format!("`oxidepm kill` took {:.1} s", took.as_secs_f64()));
        }
        // Let exits finish (the shims drain, then leave).
        let deadline = Instant::now() + Duration::from_secs(2);
        while tree.iter().any(procfs::alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left: Vec<&procfs::Stat> = tree.iter().filter(|p| procfs::alive(p)).collect();
        if !left.is_empty() {
            let names: Vec<String> = left
                .iter()
                .take(5)
                .map(|p| format!("{} ({})", p.pid, procfs::cmdline(p.pid).join(" ")))
                .collect();
            notes.push(format!(
                "{} process(es) still ran 2 s after `oxidepm kill` and were SIGKILLed: {}{}",
                left.len(),
                names.join(", "),
                if left.len() > 5 { ", ..." } else { "" }
            ));
            for p in left {
                let _ = signal::kill(p.pid, Signal::SIGKILL);
            }
        }
        self.daemon_pid = None;
        notes
    }
}

fn checked(args: &[&str], out: Output) -> Result<String> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(format!(
        "`oxidepm {}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// A JSON field as text.
pub fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

/// Monotonic clock in nanoseconds (`CLOCK_MONOTONIC`, comparable across processes).
pub fn mono_ns() -> u64 {
    oxidepm_sys::clock::monotonic_ns()
}
