//! Prometheus metrics: a real daemon serving `/metrics` on a free port,
//! scraped over real TCP; `promtool` checks what it serves and the example
//! alert rules (fails, not skips, without promtool under
//! `OXIDEPM_REQUIRE_PROMTOOL=1`).

use crate::harness::Env;
use crate::lanes::start_agents;
use oxidepm_testkit::free_port;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A daemon with metrics on a free port; returns the address.
pub(crate) fn with_metrics(env: &Env, extra: &str) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    env.daemon_toml(&format!("metrics = \"{addr}\"\n{extra}"));
    addr
}

/// `GET path` on a connection of its own: `(status line, body)`.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    // Only so a broken server fails the test instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// `/metrics` of the daemon at `addr`.
pub(crate) fn scrape(addr: &str) -> String {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    body
}

/// The value of the sample written exactly as `series` (name and labels).
pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// The sum of every sample of `name` whose labels contain `label`.
fn sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// promtool, or `None` (the test skips) unless it is required.
fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("promtool"))
            .find(|f| f.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("OXIDEPM_REQUIRE_PROMTOOL").is_none_or(|v| v != "1"),
            "OXIDEPM_REQUIRE_PROMTOOL=1 but promtool is not on PATH (Debian: apt-get install prometheus)"
        );
        eprintln!("skipped: promtool is not on PATH (Debian: apt-get install prometheus)");
    }
    found
}

fn promtool_check_metrics(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_app_restarted_twice_counts_two_and_a_stopped_app_is_down() {
    let env = Env::new();
    let addr = with_metrics(&env, "");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    env.ok(&["restart", "web"]);
    env.ok(&["restart", "web"]);
    env.ok(&["stop", "idle"]);
    let m = scrape(&addr);
    assert_eq!(
        sum(&m, "oxidepm_app_restarts_total", "app=\"web\""),
        2.0,
        "{m}"
    );
    assert_eq!(
        sum(&m, "oxidepm_app_restarts_total", "app=\"idle\""),
        0.0,
        "{m}"
    );
    assert_eq!(value(&m, "oxidepm_app_up{app=\"web\"}"), Some(1.0), "{m}");
    assert_eq!(value(&m, "oxidepm_app_up{app=\"idle\"}"), Some(0.0), "{m}");
    assert_eq!(
        value(&m, "oxidepm_app_status{app=\"idle\",status=\"stopped\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "oxidepm_app_uptime_seconds{app=\"idle\"}"),
        Some(0.0)
    );
    // Every request above was counted, with its class, op and result.
    assert!(
        sum(&m, "oxidepm_requests_total", "op=\"restart\",result=\"ok\"") >= 2.0,
        "{m}"
    );
    assert!(value(&m, "oxidepm_request_duration_seconds_count").unwrap() >= 5.0);
    // A crash counts as one.
    env.ok(&[
        "start",
        "--name",
        "crashy",
        "--restart-delay",
        "0",
        "--max-restarts",
        "1",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    env.wait_status("crashy", "errored");
    // Scrapes within 100 ms of each other share one text.
    let m = env.wait(30, "the errored app in a scrape", || {
        let m = scrape(&addr);
        m.contains("oxidepm_app_status{app=\"crashy\",status=\"errored\"} 1")
            .then_some(m)
    });
    assert!(
        value(
            &m,
            "oxidepm_app_restarts_total{app=\"crashy\",reason=\"crash\"}"
        )
        .unwrap()
            >= 1.0,
        "{m}"
    );
    assert_eq!(
        value(&m, "oxidepm_app_status{app=\"crashy\",status=\"errored\"}"),
        Some(1.0)
    );
}

#[test]
fn only_get_metrics_is_answered() {
    let env = Env::new();
    let addr = with_metrics(&env, "");
    env.ok(&["ping"]);
    assert_eq!(get(&addr, "/").0, "HTTP/1.1 404 Not Found");
    assert_eq!(get(&addr, "/../../etc/passwd").0, "HTTP/1.1 404 Not Found");
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");
}

#[test]
fn metrics_off_nothing_listens() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let pid = env.daemon_pid();
    let listening = listening_inodes();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.display().to_string();
        if let Some(inode) = target.strip_prefix("socket:[") {
            let inode = inode.trim_end_matches(']');
            assert!(
                !listening.iter().any(|l| l == inode),
                "the daemon listens on TCP with metrics off ({target})"
            );
        }
    }
}

/// Inodes of the TCP sockets in LISTEN state (`0A`) on this host.
fn listening_inodes() -> Vec<String> {
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" {
                out.push(f[9].to_string());
            }
        }
    }
    out
}

#[test]
fn slow_and_garbage_clients_do_not_keep_a_scrape_out() {
    let env = Env::new();
    let addr = with_metrics(&env, "");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let pid = env.pid("web");
    // Slowloris: more connections than the server keeps, each a request
    // head begun and never finished.
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
        held.push(s);
    }
    // Garbage: a header far over the limit, and bytes that are not HTTP.
    let mut big = TcpStream::connect(&addr).unwrap();
    let _ = big.write_all(&vec![b'A'; 64 * 1024]);
    let mut junk = TcpStream::connect(&addr).unwrap();
    let _ = junk.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n");
    let m = scrape(&addr);
    assert_eq!(value(&m, "oxidepm_app_up{app=\"web\"}"), Some(1.0), "{m}");
    // The daemon answers its own socket as before, the app untouched.
    assert_eq!(env.pid("web"), pid);
    drop(held);
}

#[test]
fn promtool_accepts_a_scrape_of_100_apps_with_lanes_on() {
    let Some(promtool) = promtool() else { return };
    let env = Env::new();
    let addr = with_metrics(&env, "");
    let mut file = String::new();
    for i in 0..100 {
        write!(
            file,
            "[[apps]]\nname = \"app-{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n"
        )
        .unwrap();
    }
    let cfg = env.path("apps.toml");
    std::fs::write(&cfg, file).unwrap();
    env.ok(&["start", cfg.to_str().unwrap()]);
    start_agents(&env, &["alice"]);
    env.ok(&["restart", "app-7"]);
    let m = env.wait(60, "the lanes in the scrape", || {
        let m = scrape(&addr);
        m.contains("oxidepm_bridge_routed_total").then_some(m)
    });
    assert_eq!(value(&m, "oxidepm_lanes_up"), Some(1.0), "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("oxidepm_lane_inbox_length{agent=\"alice\",source=")),
        "{m}"
    );
    // The 100, the agent, and the lanes' own apps.
    assert!(
        m.lines()
            .filter(|l| l.starts_with("oxidepm_app_up{app=\"app-"))
            .count()
            == 100,
        "{m}"
    );
    promtool_check_metrics(&promtool, &m);
}

#[test]
fn promtool_accepts_the_example_alert_rules() {
    let Some(promtool) = promtool() else { return };
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/alerts/oxidepm-rules.yml");
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn metrics_on_a_unix_socket_only_its_owner_can_reach() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let env = Env::new();
    let sock = env.path("metrics.sock");
    env.daemon_toml(&format!("metrics = \"{}\"\n", sock.display()));
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    assert_eq!(
        value(&out, "oxidepm_app_up{app=\"web\"}"),
        Some(1.0),
        "{out}"
    );
}

#[test]
fn a_bad_metrics_address_stops_the_daemon_with_what_to_write() {
    let env = Env::new();
    env.daemon_toml("metrics = \"localhost\"\n");
    let out = env.fails(&["ping"]);
    assert!(out.contains("metrics must be an address and port"), "{out}");
}

#[test]
fn a_metrics_path_naming_a_file_does_not_remove_it() {
    let env = Env::new();
    let file = env.path("precious.txt");
    std::fs::write(&file, "keep me").unwrap();
    env.daemon_toml(&format!("metrics = \"{}\"\n", file.display()));
    let out = env.fails(&["ping"]);
    assert!(out.contains("is not a socket"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[test]
fn refusals_are_counted_by_class_and_change_nothing() {
    let env = Env::new();
    let addr = with_metrics(&env, "");
    env.ok(&["start", "--name", "db", "--", "sleep", "100000"]);
    let pid = env.pid("db");
    let mut ai = env.raw("agent.sock");
    for i in 0..3 {
        let r = ai.call(serde_json::json!({"id": i, "op": "delete", "target": "db"}));
        assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
    }
    let r = ai.call(serde_json::json!({"id": 9, "op": "kill"}));
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
    let m = scrape(&addr);
    assert_eq!(
        value(&m, "oxidepm_refusals_total{class=\"ai\"}"),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "oxidepm_requests_total{class=\"ai\",op=\"delete\",result=\"E_POLICY_DENIED\"}"
        ),
        Some(3.0),
        "{m}"
    );
    assert_eq!(env.pid("db"), pid);
}
