//! A private oxidepm home per test, and helpers to drive the real CLI.

#![allow(dead_code)]

use oxidepm_testkit::{eventually, Ready};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Path of one of the package's binaries.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "oxidepm-lane-proxy" | "oxidepm-bridge" | "oxidepm-logwriter" => {
            oxidepm_testkit::workspace_bin(name, name)
        }
        _ => assert_cmd::cargo::cargo_bin(name),
    }
}

/// Builds the lane proxy and the bridge, which the daemon finds beside
/// itself (`cargo test -p oxidepm` builds only this package's binaries).
pub fn lane_binaries() {
    bin("oxidepm-lane-proxy");
    bin("oxidepm-bridge");
    bin("oxidepm-logwriter");
}

/// One test's home, with its daemon; everything is stopped on drop.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    /// The shared server of the shared pass (see [`shared_lanes`]).
    pub shared: Option<oxidepm_testkit::shared::SharedRedis>,
}

/// Whether this run is the shared pass (`OXIDEPM_TEST_LANES=shared`): every
/// `Env` puts its lanes on a TLS redis-server of its own that the daemon
/// does not run, as `[lanes] redis_url` does on several hosts, with the
/// plain key form so that the tests' keys are the same in both passes. The
/// isolation tests run in both (test.sh).
pub fn shared_lanes() -> bool {
    std::env::var("OXIDEPM_TEST_LANES").as_deref() == Ok("shared")
}

/// Points `[lanes]` of daemon.toml `text` at `server`.
fn with_shared_lanes(text: &str, server: &oxidepm_testkit::shared::SharedRedis) -> String {
    let mut doc: toml::Table = text.parse().expect("a test's daemon.toml parses");
    let lanes = doc
        .entry("lanes")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(t) = lanes.as_table_mut() {
        t.insert("redis_url".into(), server.url().into());
        if let Some(ca) = &server.tls_files().ca_file {
            t.insert("tls_ca_file".into(), ca.display().to_string().into());
        }
        t.entry("key_form").or_insert_with(|| "plain".into());
    }
    doc.to_string()
}

impl Env {
    /// Kills the daemon as an OOM kill or `kill -9` would (its apps live
    /// on) and waits until it is gone: its socket refuses connections and
    /// its lock is free (its last thread may outlive the zombie of its main
    /// one, and with it the listening socket).
    pub fn kill_daemon(&self) {
        let lock = self.home.join("daemon.lock");
        let pid: u32 = read(&lock).trim().parse().expect("a daemon runs");
        kill(pid, libc::SIGKILL);
        self.wait(30, "the daemon to die", || {
            !alive(pid)
                && std::os::unix::net::UnixStream::connect(self.home.join("daemon.sock")).is_err()
                && std::fs::File::open(&lock).is_ok_and(|f| f.try_lock().is_ok())
        });
    }

    /// Live log writers of this home (a zombie not yet reaped is not one).
    pub fn log_writers(&self) -> Vec<u32> {
        let logs = self.home.join("logs").display().to_string();
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("\0__logshim\0") && cmdline.contains(&logs) && alive(pid) {
                pids.push(pid);
            }
        }
        pids
    }

    pub fn new() -> Env {
        lane_binaries();
        let dir = tempfile::Builder::new().prefix("oxpm").tempdir().unwrap();
        let home = dir.path().join("h");
        let shared = shared_lanes().then(|| oxidepm_testkit::shared::SharedRedis::start(true));
        let env = Env { dir, home, shared };
        if let Some(server) = &env.shared {
            let secrets = env.home.join("secrets");
            oxidepm_lanes::secret::ensure_dir(&secrets).unwrap();
            let file = secrets.join("lanes_admin");
            std::fs::write(
                &file,
                format!(
                    "{}\n{}\n",
                    oxidepm_testkit::shared::OXIDEPM_USER,
                    oxidepm_testkit::shared::OXIDEPM_PASSWORD
                ),
            )
            .unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::write(env.home.join("daemon.toml"), with_shared_lanes("", server)).unwrap();
        }
        env
    }

    /// Writes the daemon's configuration (before the daemon starts).
    /// Starts agent `name` as a program that writes its environment down
    /// and waits; returns that environment (`NAME=value` lines).
    pub fn agent_environment(&self, name: &str) -> String {
        let out = self.path(&format!("{name}.env"));
        self.ok(&[
            "start",
            "--kind",
            "agent",
            "--name",
            name,
            "--",
            "sh",
            "-c",
            &format!("env > {}; sleep 100000", out.display()),
        ]);
        self.wait(10, "the agent's env", || {
            read(&out).contains("OXIDEPM_LANE")
        });
        read(&out)
    }

    pub fn daemon_toml(&self, text: &str) {
        std::fs::create_dir_all(&self.home).unwrap();
        let text = match &self.shared {
            Some(server) => with_shared_lanes(text, server),
            None => text.to_string(),
        };
        std::fs::write(self.home.join("daemon.toml"), text).unwrap();
    }

    /// A file path inside the test's temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CLI, pointed at this home, with no claim.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin("oxidepm"));
        c.env("OXIDEPM_HOME", &self.home)
            .env_remove("OXIDEPM_SOCKET")
            .env_remove("OXIDEPM_ACTOR")
            .env_remove("OXIDEPM_LOG");
        c
    }

    /// Runs the CLI with `args`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs the CLI and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "oxidepm {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs the CLI with --json and parses its output.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.ok(&a);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }

    /// Runs the CLI expecting failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            !o.status.success(),
            "oxidepm {args:?} should fail but printed {}",
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// Every app as `status --json` reports it.
    pub fn status(&self) -> Vec<Value> {
        self.json(&["status"]).as_array().unwrap().clone()
    }

    /// One app from `status --json`.
    pub fn app(&self, name: &str) -> Value {
        self.status()
            .into_iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("no app {name}"))
    }

    /// The pid of an app (panics when it has none).
    pub fn pid(&self, name: &str) -> u32 {
        self.app(name)["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} has no pid")) as u32
    }

    /// Events of an app.
    pub fn events(&self, name: &str) -> Vec<Value> {
        self.json(&["events", name, "--limit", "1000"])
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits until `f` holds (`true` or `Some`), or panics with `what`
    /// after `secs`.
    #[track_caller]
    pub fn wait<R: Ready>(&self, secs: u64, what: &str, f: impl FnMut() -> R) -> R::Output {
        eventually(Duration::from_secs(secs), what, f)
    }

    /// Waits until app `name` has `status`.
    #[track_caller]
    pub fn wait_status(&self, name: &str, status: &str) {
        self.wait(20, &format!("{name} to be {status}"), || {
            self.daemon_app(name)["status"] == status
        });
    }

    /// The result of one request on daemon.sock, sent without the CLI: a
    /// wait polls often, and a CLI process per poll costs more than what
    /// it waits for. Panics on an error answer.
    pub fn request(&self, req: Value) -> Value {
        let r = self.raw("daemon.sock").call(req.clone());
        assert_eq!(r["ok"], true, "{req} gave {r}");
        r["result"].clone()
    }

    /// Every app, as `status` answers on the socket (what `status --json`
    /// prints).
    pub fn daemon_status(&self) -> Vec<Value> {
        let v = self.request(json!({"id": 1, "op": "status"}));
        v.as_array().expect("status is a list").clone()
    }

    /// One app, from [`Env::daemon_status`].
    pub fn daemon_app(&self, name: &str) -> Value {
        self.daemon_status()
            .into_iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("no app {name}"))
    }

    /// Events of an app, as `events` answers on the socket.
    pub fn daemon_events(&self, name: &str) -> Vec<Value> {
        let v = self.request(json!({"id": 1, "op": "events", "target": name, "limit": 1000}));
        v.as_array().expect("events is a list").clone()
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> u32 {
        self.json(&["ping"])["pid"].as_u64().unwrap() as u32
    }

    /// A raw protocol connection to a socket of this home.
    pub fn raw(&self, socket: &str) -> Raw {
        Raw::connect(&self.home.join(socket))
    }

    /// Writes an executable shell script into the temp dir.
    pub fn script(&self, name: &str, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let pids: Vec<u32> = if self.home.join("daemon.sock").exists() {
            self.cmd()
                .args(["status", "--json"])
                .output()
                .ok()
                .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|a| a["pid"].as_u64().map(|p| p as u32))
                .collect()
        } else {
            Vec::new()
        };
        let _ = self.cmd().arg("kill").output();
        // Whatever survived a failed test goes too.
        for p in pids {
            kill(p, libc::SIGKILL);
        }
        if let Ok(s) = std::fs::read_to_string(self.home.join("daemon.lock")) {
            if let Ok(p) = s.trim().parse::<u32>() {
                if is_oxidepmd(p) {
                    kill(p, libc::SIGKILL);
                }
            }
        }
        // A daemon that died before the test ended (a failed test after a
        // SIGKILL) leaves its children: every process of the home goes.
        kill_home_processes(&self.home);
        // Killed processes take a moment to leave their cgroups.
        for _ in 0..20 {
            if remove_home_cgroups(&self.home) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// SIGKILLs every process in the home's cgroups (`cgroup.kill`) and every
/// process whose command line names a path in the home (Redis, the lane
/// proxy, log writers), whichever daemon started them.
fn kill_home_processes(home: &Path) {
    let name = oxidepm::home_cgroup_name(home);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        for mount in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
            let dir = Path::new(mount)
                .join(rel.trim_start_matches('/'))
                .join(&name);
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        }
    }
    let needle = format!("{}/", home.display()).into_bytes();
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if cmdline
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
        {
            kill(pid, libc::SIGKILL);
        }
    }
}

/// Removes the cgroups a daemon of `home` killed with SIGKILL left behind
/// (a clean stop removes them itself); one still holding a process stays.
/// True when none is left.
fn remove_home_cgroups(home: &Path) -> bool {
    let name = oxidepm::home_cgroup_name(home);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
        return true;
    };
    let mut gone = true;
    for mount in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        let dir = Path::new(mount)
            .join(rel.trim_start_matches('/'))
            .join(&name);
        if dir.is_dir() {
            remove_empty_tree(&dir);
            gone &= !dir.exists();
        }
    }
    gone
}

/// Removes `dir` and the directories below it, deepest first; rmdir of a
/// cgroup that still holds a process fails and changes nothing.
fn remove_empty_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn is_oxidepmd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("oxidepmd"))
        .unwrap_or(false)
}

/// Sends a signal.
pub fn kill(pid: u32, sig: i32) {
    use nix::sys::signal::{self, Signal};
    if let Ok(sig) = Signal::try_from(sig) {
        let _ = signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
    }
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let after = &s[s.rfind(')').unwrap() + 2..];
            !after.starts_with('Z') && !after.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Reads a file, or "" when it does not exist.
pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A raw JSON-lines connection.
pub struct Raw {
    pub stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Raw {
    pub fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Raw { stream, reader }
    }

    /// Whether the daemon closed this connection without serving it: a
    /// ping gets no answer. The daemon may close it before the ping is
    /// written, so a failed write means closed too.
    pub fn is_refused(&mut self) -> bool {
        let sent = self
            .stream
            .write_all(b"{\"id\":1,\"op\":\"ping\"}\n")
            .is_ok();
        !sent || self.recv().is_none()
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) {
        self.stream.write_all(line.as_bytes()).unwrap();
        self.stream.write_all(b"\n").unwrap();
    }

    /// Reads one response line (None at EOF).
    pub fn recv(&mut self) -> Option<Value> {
        let mut l = String::new();
        match self.reader.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&l).unwrap()),
        }
    }

    /// Sends a request and reads its final response.
    pub fn call(&mut self, req: Value) -> Value {
        self.send(&req.to_string());
        loop {
            let r = self.recv().expect("connection closed");
            if r.get("ok").is_some() {
                return r;
            }
        }
    }
}

/// A system user for tests (created once, as root, with `useradd`): its
/// `(uid, gid)`; `None` when not root or when it cannot be made.
pub fn test_user(name: &str) -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let lookup = || {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
    };
    if let Some(ids) = lookup() {
        return Some(ids);
    }
    // Tests run side by side, each in its own process: one makes a user at
    // a time (useradd fails while another holds /etc/passwd's lock).
    let lock =
        std::fs::File::create(std::env::temp_dir().join("oxidepm-test-useradd.lock")).ok()?;
    lock.lock().ok()?;
    if lookup().is_none() {
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .stdout(std::process::Stdio::null())
            .status();
    }
    lookup()
}

/// A command line's words (`oxidepm_testkit::words`) as the `&str`s that
/// `Env::ok`, `Env::fails` and `lanes::run` take.
pub fn strs(words: &[String]) -> Vec<&str> {
    words.iter().map(String::as_str).collect()
}
