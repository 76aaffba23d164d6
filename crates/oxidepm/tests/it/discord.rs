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
    let dir = env.home.join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = dir.join("discord_token");
    std::fs::write(&f, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn daemon_toml(env: &Env, standin: &StandIn) {
    env.daemon_toml(&format!(
        r#"
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
