//! The discord source through the daemon, against the local stand-in of
//! Discord: `[lanes.discord]`, the bot token in `secrets/discord_token`
//! and nowhere else. (The source's own behaviour — reconnects, splitting,
//! rate limits, dead letters — is tested in the oxidepm-bridge crate.)

use crate::harness::{read, Env};
use oxidepm_discord_standin::{wait, Msg, StandIn};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const TOKEN: &str = "MTEwMDAw.discord-it-token.c2VjcmV0";
const CHANNEL: u64 = 1_300_000_000_000_000_222;

/// Writes the bot token as a person would, with `mode`.
fn write_token(env: &Env, mode: u32) {
    write_token_text(env, TOKEN, mode);
}

/// Writes `token` as the bot token, with `mode`.
fn write_token_text(env: &Env, token: &str, mode: u32) {
    let dir = env.home.join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = dir.join("discord_token");
    std::fs::write(&f, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn daemon_toml(env: &Env, standin: &StandIn) {
    daemon_toml_with(env, standin, "");
}

/// daemon.toml routing `CHANNEL` to alice, with `top` (top-level keys)
/// first.
fn daemon_toml_with(env: &Env, standin: &StandIn, top: &str) {
    env.daemon_toml(&format!(
        r#"{top}
agents_share_uid = true
[lanes]
sources = ["discord"]

[[lanes.routes]]
source = "discord"
channel = "{CHANNEL}"
agent = "alice"

[lanes.discord]
enabled = true
gateway_url = "{}"
api_url = "{}"
"#,
        standin.gateway_url(),
        standin.api_url()
    ));
}

fn lane(env: &Env, agent: &str) -> redis::Connection {
    let url = format!(
        "unix://{}",
        env.home.join(format!("lanes/{agent}.sock")).display()
    );
    redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn a_discord_channel_reaches_its_agent_and_the_token_stays_out_of_sight() {
    let env = Env::new();
    let standin = StandIn::start(TOKEN).unwrap();
    standin.allow_channel(CHANNEL);
    write_token(&env, 0o600);
    daemon_toml(&env, &standin);
    let environ = env.agent_environment("alice");
    assert!(
        standin.wait_connected(Duration::from_secs(30)),
        "the bridge never identified: {}",
        read(&env.home.join("daemon.log"))
    );

    // In: a person writes in the routed channel; alice reads it.
    standin.send_message(&Msg::new(CHANNEL, "hello from discord"));
    let mut c = lane(&env, "alice");
    let mut got: Vec<(String, String)> = Vec::new();
    let ok = wait(Duration::from_secs(30), || {
        got = redis::cmd("XRANGE")
            .arg("alice:discord:inbox")
            .arg("-")
            .arg("+")
            .query::<Vec<(String, Vec<(String, String)>)>>(&mut c)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|(_, f)| f)
            .collect();
        !got.is_empty()
    });
    assert!(ok, "nothing in alice's inbox");
    assert!(
        got.contains(&("text".into(), "hello from discord".into())),
        "{got:?}"
    );

    // Out: alice answers; the bot posts it in the channel.
    let _: String = redis::cmd("XADD")
        .arg("alice:discord:outbox")
        .arg("*")
        .arg("channel")
        .arg(CHANNEL.to_string())
        .arg("text")
        .arg("hello from alice")
        .query(&mut c)
        .unwrap();
    assert!(wait(Duration::from_secs(30), || !standin
        .posts()
        .is_empty()));
    let posts = standin.posts();
    assert_eq!(posts[0].content, "hello from alice");
    assert_eq!(posts[0].channel, CHANNEL);

    // The token is in none of what a person, a log or an agent sees.
    let lanes = env.ok(&["--json", "lanes"]);
    let show = env.ok(&["--json", "show", "oxidepm-bridge"]);
    let bridge_json = read(&env.home.join("bridge/bridge.json"));
    assert!(bridge_json.contains("discord_token"), "{bridge_json}");
    let mut logs = read(&env.home.join("daemon.log"));
    for e in std::fs::read_dir(env.home.join("logs")).unwrap().flatten() {
        logs.push_str(&read(&e.path()));
    }
    for (what, text) in [
        ("oxidepm lanes", &lanes),
        ("oxidepm show", &show),
        ("bridge.json", &bridge_json),
        ("the logs", &logs),
        ("alice's environment", &environ),
    ] {
        assert!(!text.contains(TOKEN), "the token is in {what}");
    }
    let pid = env.pid("alice");
    let proc_env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&proc_env).contains(TOKEN));
}

#[test]
fn a_token_others_can_read_is_not_handed_to_the_bridge() {
    let env = Env::new();
    let standin = StandIn::start(TOKEN).unwrap();
    write_token(&env, 0o644);
    daemon_toml(&env, &standin);
    env.ok(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    let lanes = env.wait(20, "the bridge's problem", || {
        let v = env.json(&["lanes"]);
        v["bridge"]["problem"].as_str().map(str::to_string)
    });
    assert!(lanes.contains("chmod 600"), "{lanes}");
    assert!(lanes.contains("discord_token"), "{lanes}");
    assert!(!env.home.join("bridge/discord_token").exists());
    assert!(!standin.connected());
}

/// The discord source as `oxidepm lanes --json` has it: `(up, error)`.
fn discord_state(env: &Env) -> Option<(bool, Option<String>)> {
    let v = env.json(&["lanes"]);
    let s = v["bridge"]["sources"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "discord")?
        .clone();
    Some((s["up"].as_bool()?, s["error"].as_str().map(str::to_string)))
}

/// `oxidepm_bridge_source_up{source="discord"}` in a scrape of `addr`.
fn source_up_metric(addr: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines()
        .find_map(|l| l.strip_prefix("oxidepm_bridge_source_up{source=\"discord\"} "))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn a_refused_token_is_shown_in_lanes_and_metrics_and_a_new_one_and_a_reload_bring_it_back() {
    let env = Env::new();
    let standin = StandIn::start(TOKEN).unwrap();
    standin.allow_channel(CHANNEL);
    // A token reset in the developer portal since it was saved.
    write_token_text(&env, "MTEwMDAw.reset-since.c2VjcmV0", 0o600);
    let metrics = format!("127.0.0.1:{}", oxidepm_testkit::free_port());
    daemon_toml_with(&env, &standin, &format!("metrics = \"{metrics}\""));
    env.ok(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    let why = env.wait(
        30,
        "the discord source to be reported failed",
        || match discord_state(&env) {
            Some((false, why)) => why,
            _ => None,
        },
    );
    assert!(
        why.contains("refused the bot token (close code 4004"),
        "{why}"
    );
    assert!(why.contains("secrets/discord_token"), "{why}");
    let text = env.ok(&["lanes"]);
    assert!(text.contains("sources: discord FAILED"), "{text}");
    assert!(
        text.contains("bridge: source discord stopped at "),
        "{text}"
    );
    env.wait(30, "the metric to say it is down", || {
        source_up_metric(&metrics) == Some(0.0)
    });
    assert_eq!(standin.identify_attempts(), 1, "tried once, not in a loop");
    // The current token, then a reload: the bridge is handed it and the
    // source comes up again, in the same bridge process.
    let bridge = env.pid("oxidepm-bridge");
    write_token(&env, 0o600);
    env.ok(&["reload-daemon-config"]);
    assert!(
        standin.wait_connected(Duration::from_secs(30)),
        "the bridge never identified again: {}",
        read(&env.home.join("daemon.log"))
    );
    env.wait(30, "the discord source to be up", || {
        matches!(discord_state(&env), Some((true, None)))
    });
    env.wait(30, "the metric to say it is up", || {
        source_up_metric(&metrics) == Some(1.0)
    });
    assert_eq!(env.pid("oxidepm-bridge"), bridge);
}
