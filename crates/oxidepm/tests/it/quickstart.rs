//! The README's Quick start, run as a newcomer runs it: `examples/quickstart.sh`
//! against this build, in a private home and on free ports. Its output must
//! show what the README promises: the web server's first log line (Python
//! apps get `PYTHONUNBUFFERED=1`), the agent's answer to a webhook, and the
//! agent refused when it asks to stop an app that is not its own. As root,
//! the agent runs under a user of its own, as the README recommends.

use crate::harness::{bin, test_user, Env};
use oxidepm_testkit::http::free_port;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const AGENT_USER: &str = "oxpm-qs-alice";

/// What the Quick start needs that this machine lacks (test.sh installs
/// it all).
fn missing() -> Option<String> {
    const USER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let checks: [(&str, &[&str]); 3] = [
        ("redis-cli", &["redis-cli", "--version"]),
        ("curl", &["curl", "--version"]),
        ("python3's redis module", &["python3", "-c", "import redis"]),
    ];
    let lacking = checks.iter().find_map(|(what, argv)| {
        let ok = Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .is_ok_and(|o| o.status.success());
        (!ok).then(|| what.to_string())
    });
    if lacking.is_some() || !nix::unistd::geteuid().is_root() {
        return lacking;
    }
    // As root the agent runs under its own user with systemd's PATH for
    // `User=`: its python3 is the system's, not one under root's home.
    if test_user(AGENT_USER).is_none() {
        return Some(format!(
            "a user of its own for the agent ({AGENT_USER}, useradd)"
        ));
    }
    let ok = Command::new("runuser")
        .args(["-u", AGENT_USER, "--", "env"])
        .arg(format!("PATH={USER_PATH}"))
        .args(["python3", "-c", "import redis"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| {
        format!("redis-py for the system's python3, which {AGENT_USER} runs (apt-get install python3-redis)")
    })
}

#[test]
fn the_quick_start_shows_its_first_log_line_an_answer_and_a_refusal() {
    if let Some(what) = missing() {
        if std::env::var("OXIDEPM_REQUIRE_COMPAT").as_deref() == Ok("1") {
            panic!("the Quick start needs {what} (OXIDEPM_REQUIRE_COMPAT=1)");
        }
        eprintln!("skipped: the Quick start needs {what}");
        return;
    }
    let env = Env::new();
    if nix::unistd::geteuid().is_root() {
        // The agent's user must reach its lane socket inside the home.
        std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (web, sink, webhook) = (free_port(), free_port(), free_port());
    let out = Command::new(root.join("examples/quickstart.sh"))
        .env("OXIDEPM_HOME", &env.home)
        .env("OXIDEPM_BIN_DIR", bin("oxidepm").parent().unwrap())
        .env("QS_WEB_PORT", web.to_string())
        .env("QS_SINK_PORT", sink.to_string())
        .env("QS_WEBHOOK_PORT", webhook.to_string())
        .env("QS_AGENT_USER", AGENT_USER)
        .env_remove("OXIDEPM_SOCKET")
        .env_remove("OXIDEPM_ACTOR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!(
        "{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");

    let line = |needle: &str| {
        stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}: {all}"))
            .to_string()
    };
    let first = line("Serving HTTP");
    assert!(first.starts_with("web|out| "), "{first}");
    assert!(
        first.contains(&format!("Serving HTTP on 127.0.0.1 port {web}")),
        "{first}"
    );
    let answer = line("alice says");
    assert!(answer.starts_with("sink|out| "), "{answer}");
    assert!(
        answer.contains(r#"alice says "Alice: you said 'my login fails'""#),
        "{answer}"
    );
    let refusal = line("E_POLICY_DENIED");
    assert!(refusal.contains("stop"), "{refusal}");
    // The refusal changed nothing: web was still online after it.
    let after = &stdout[stdout.find("E_POLICY_DENIED").unwrap()..];
    assert!(
        after
            .lines()
            .any(|l| l.contains("web") && l.contains("online")),
        "{all}"
    );
}
