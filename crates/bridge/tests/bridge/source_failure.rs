//! One source's failure never stops the others or the outbox delivery:
//! the real bridge binary with webhook, email and discord sources, the
//! Discord stand-in closing with each fatal close code, a resumable one,
//! or sending a frame far over the bound, while webhook and mail traffic
//! flows.

use crate::discord::{inbox_of, texts, BOT_TOKEN, CHANNEL};
use crate::harness::*;
use nix::sys::signal::Signal;
use oxidepm_discord_standin::{Msg, StandIn};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Discord's close codes after which a session must not be resumed.
const FATAL: [u16; 6] = [4004, 4010, 4011, 4012, 4013, 4014];

/// The bridge process with its Redis, stand-in, Maildir and webhook sink.
struct Rig {
    redis: Redis,
    standin: StandIn,
    maildir: PathBuf,
    sink: Sink,
    addr: SocketAddr,
    bridge: BridgeProcess,
    token_file: PathBuf,
    /// Webhook posts, mails and outbox entries sent so far, each.
    sent: usize,
}

impl Rig {
    /// Starts it all; the bridge's token file holds `token`.
    fn start(token: &str) -> Rig {
        let redis = Redis::start(&["alice"]);
        let standin = StandIn::start(BOT_TOKEN).unwrap();
        standin.allow_channel(CHANNEL);
        let sink = Sink::start(SinkMode::Ok, std::time::Duration::ZERO);
        let maildir = redis.dir.path().join("Mail");
        for sub in ["tmp", "new", "cur"] {
            std::fs::create_dir_all(maildir.join(sub)).unwrap();
        }
        let token_file = redis.dir.path().join("discord_token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let port = free_port();
        redis.write_config(
            &redis.config_path(),
            json!({
                "agents": ["alice"],
                "sources": ["webhook", "email", "discord"],
                "routes": [
                    {"source": "webhook", "channel": "c", "agent": "alice"},
                    {"source": "email", "address": "alice@example.org", "agent": "alice"},
                    {"source": "discord", "channel": CHANNEL.to_string(), "agent": "alice"},
                ],
                "webhook": {"listen": format!("127.0.0.1:{port}"), "deliver": {"*": sink.url()}},
                "email": {"maildir": maildir, "smtp": "127.0.0.1:1", "domain": "example.org"},
                "discord": {
                    "token_file": token_file,
                    "gateway_url": standin.gateway_url(),
                    "api_url": standin.api_url(),
                },
            }),
        );
        let log = redis.dir.path().join("bridge.log");
        let bridge = BridgeProcess::spawn(&redis.config_path(), &log);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut rig = Rig {
            redis,
            standin,
            maildir,
            sink,
            addr,
            bridge,
            token_file,
            sent: 0,
        };
        eventually(WAIT, "the webhook to listen", || {
            std::net::TcpStream::connect(rig.addr).is_ok()
        });
        rig.traffic();
        rig
    }

    /// `bridge:status`.
    fn status(&self) -> HashMap<String, String> {
        let v = self
            .redis
            .admin()
            .cmd(&["HGETALL", "bridge:status"])
            .strings();
        v.chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect()
    }

    /// Waits until the discord source is `state` (`up`, `failed`), and
    /// returns the status.
    fn wait_discord(&self, state: &str) -> HashMap<String, String> {
        eventually(WAIT, &format!("the discord source to be {state}"), || {
            let s = self.status();
            (s.get("source:discord").map(String::as_str) == Some(state)).then_some(s)
        })
    }

    /// One webhook post, one mail and one outbox entry more, and waits
    /// until each is through: the post and the mail in alice's inboxes,
    /// the entry at the sink.
    fn traffic(&mut self) {
        let n = self.sent;
        let (st, r) = post(
            self.addr,
            "webhook",
            json!({"channel": "c", "sender": "ann", "text": format!("post {n}")}),
        );
        assert_eq!(st, 202, "{r}\n{}", self.bridge.log());
        let tmp = self.maildir.join(format!("tmp/{n}.x.host"));
        std::fs::write(
            &tmp,
            format!("From: carol@example.com\r\nTo: alice@example.org\r\nSubject: m{n}\r\n\r\nmail {n}\r\n"),
        )
        .unwrap();
        std::fs::rename(&tmp, self.maildir.join(format!("new/{n}.x.host"))).unwrap();
        let text = format!("answer {n}");
        let id = self.redis.agent("alice").cmd(&[
            "XADD",
            "alice:webhook:outbox",
            "*",
            "channel",
            "c",
            "text",
            &text,
        ]);
        assert!(id.text().is_some(), "{id:?}");
        self.sent += 1;
        let want = self.sent;
        let mut alice = self.redis.agent("alice");
        eventually(WAIT, "the webhook post in alice's inbox", || {
            entries(&mut alice, "alice:webhook:inbox").len() == want
        });
        eventually(WAIT, "the mail in alice's inbox", || {
            entries(&mut alice, "alice:email:inbox").len() == want
        });
        eventually(WAIT, "the answer at the sink", || {
            self.sink.bodies().len() == want
        });
    }

    /// Whether the bridge process still runs (the same process: it is
    /// our child, so its pid cannot have been reused).
    fn bridge_runs(&mut self) -> bool {
        matches!(self.bridge.child.try_wait(), Ok(None))
    }

    /// The bridge's peak resident memory (VmHWM), in KiB.
    fn peak_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.bridge.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }
}

#[test]
fn each_fatal_close_code_stops_only_the_discord_source_and_a_reload_starts_it_again() {
    let mut rig = Rig::start(BOT_TOKEN);
    assert!(rig.standin.wait_connected(WAIT), "{}", rig.bridge.log());
    rig.wait_discord("up");
    let pid = rig.bridge.child.id();
    for code in FATAL {
        let connections = rig.standin.connections();
        rig.standin.close_connection(code);
        let status = rig.wait_discord("failed");
        let why = &status["source:discord:error"];
        assert!(why.contains(&format!("close code {code}")), "{code}: {why}");
        assert!(why.contains("reload-daemon-config"), "{code}: {why}");
        assert!(
            status.contains_key("source:discord:failed_at"),
            "{status:?}"
        );
        assert_eq!(status["source:webhook"], "up");
        assert_eq!(status["source:email"], "up");
        // Webhook posts, mail and deliveries go on while it is down…
        rig.traffic();
        // …and, having had that long, the source did not try again: a
        // fatal close is not retried in a loop, and the process is the
        // same one.
        assert_eq!(
            rig.standin.connections(),
            connections,
            "{code}: reconnected"
        );
        assert!(!rig.standin.connected());
        assert!(rig.bridge_runs(), "{code}: {}", rig.bridge.log());
        assert_eq!(rig.bridge.child.id(), pid);
        // A reload starts it again, once; it resumes its session.
        rig.bridge.signal(Signal::SIGHUP);
        rig.wait_discord("up");
        assert!(rig.standin.wait_connected(WAIT), "{}", rig.bridge.log());
        assert_eq!(rig.standin.connections(), connections + 1);
    }
    rig.standin.send_message(&Msg::new(CHANNEL, "still here"));
    assert_eq!(texts(&inbox_of(&rig.redis, 1)), ["still here"]);
    let log = rig.bridge.log();
    assert_eq!(
        log.matches("source discord stopped").count(),
        FATAL.len(),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_refused_token_is_tried_once_and_a_new_token_and_a_reload_bring_the_source_up() {
    // A token reset in the developer portal: Discord refuses the old one
    // (close code 4004).
    let mut rig = Rig::start("a-token-reset-since");
    let status = rig.wait_discord("failed");
    let why = &status["source:discord:error"];
    assert!(why.contains("refused the bot token"), "{why}");
    assert!(why.contains(&rig.token_file.display().to_string()), "{why}");
    assert!(
        !why.contains("a-token-reset-since"),
        "the token is in no message: {why}"
    );
    rig.traffic();
    assert_eq!(rig.standin.identify_attempts(), 1, "{}", rig.bridge.log());
    assert_eq!(rig.standin.connections(), 1);
    assert!(rig.bridge_runs(), "{}", rig.bridge.log());
    // The new token in the file, then a reload: taken up, source up.
    std::fs::write(&rig.token_file, format!("{BOT_TOKEN}\n")).unwrap();
    rig.bridge.signal(Signal::SIGHUP);
    assert!(rig.standin.wait_connected(WAIT), "{}", rig.bridge.log());
    let status = rig.wait_discord("up");
    assert!(!status.contains_key("source:discord:error"), "{status:?}");
    rig.standin
        .send_message(&Msg::new(CHANNEL, "with the new token"));
    assert_eq!(texts(&inbox_of(&rig.redis, 1)), ["with the new token"]);
}

#[test]
fn a_resumable_close_code_is_resumed_and_the_source_stays_up() {
    let mut rig = Rig::start(BOT_TOKEN);
    assert!(rig.standin.wait_connected(WAIT), "{}", rig.bridge.log());
    for (n, code) in [4000u16, 1001].into_iter().enumerate() {
        let (_, resumes) = rig.standin.sessions_started();
        rig.standin.close_connection(code);
        eventually(WAIT, "a resume", || {
            rig.standin.connected() && rig.standin.sessions_started().1 > resumes
        });
        rig.standin
            .send_message(&Msg::new(CHANNEL, &format!("after {code}")));
        inbox_of(&rig.redis, n + 1);
        assert_eq!(rig.status()["source:discord"], "up");
    }
    rig.traffic();
    assert_eq!(
        rig.standin.sessions_started().0,
        1,
        "resumed, never identified again"
    );
}

#[test]
fn a_48_mib_gateway_frame_is_refused_unread_and_the_session_resumed() {
    let mut rig = Rig::start(BOT_TOKEN);
    assert!(rig.standin.wait_connected(WAIT), "{}", rig.bridge.log());
    rig.standin.send_message(&Msg::new(CHANNEL, "before"));
    inbox_of(&rig.redis, 1);
    let before = rig.peak_kib();
    let (_, resumes) = rig.standin.sessions_started();
    rig.standin.send_frame_of(48 << 20);
    // Done with: read whole by the bridge, or cut short by it.
    eventually(WAIT, "the stand-in to be done with the frame", || {
        rig.standin.huge_frames_done() == 1
    });
    assert!(rig.bridge_runs(), "{}", rig.bridge.log());
    // Generous: a 48 MiB frame read whole costs more than twice this.
    let grown = rig.peak_kib().saturating_sub(before);
    assert!(
        grown < 20 << 10,
        "the bridge's peak RSS grew by {grown} KiB"
    );
    let resumed = oxidepm_discord_standin::wait(WAIT, || {
        rig.standin.connected() && rig.standin.sessions_started().1 > resumes
    });
    assert!(resumed, "no resume after the frame: {}", rig.bridge.log());
    rig.standin.send_message(&Msg::new(CHANNEL, "after"));
    assert_eq!(texts(&inbox_of(&rig.redis, 2)), ["before", "after"]);
    rig.traffic();
    assert_eq!(rig.status()["source:discord"], "up");
}
