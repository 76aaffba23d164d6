//! What the several-hosts tests share: bridges run as the real binary,
//! each with its own directory and consumer name (a host each), on a
//! shared server or a cluster, in the tagged key form.

#![allow(dead_code)]

use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::bridge_config::{BridgeConfig, WebhookConfig};
use oxidepm_lanes::stream_key::{set_key_form, KeyForm};
use oxidepm_lanes::{AgentName, RedisUrl, TlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The bridges' ACL user on the shared server (one for every host here).
pub const USER: &str = "bridge_hosts";
/// Its password.
pub const PASSWORD: &str = "bridge-hosts-pw";
/// The webhook's bearer token.
pub const TOKEN: &str = "hosts-token";

/// Every lanes process of several hosts uses the tagged form; so does
/// this test process, which builds the keys it checks.
pub fn tagged() {
    set_key_form(KeyForm::Tagged).unwrap();
}

/// Agent `i`'s name.
pub fn agent(i: usize) -> AgentName {
    format!("agent{i}").parse().unwrap()
}

/// The ACL rules of the bridges' user on one node (`ACL SETUSER`).
pub fn provision(con: &mut redis::Connection, families: &[String]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(USER).arg("reset").arg("on");
    cmd.arg(format!(">{PASSWORD}"));
    for r in AclUser::Bridge.rules(families) {
        cmd.arg(r);
    }
    cmd.query::<()>(con).unwrap();
}

/// One bridge process (a host's); killed on drop.
pub struct BridgeProc {
    /// Its directory (configuration, password, token).
    pub dir: tempfile::TempDir,
    /// Its webhook listener.
    pub webhook: SocketAddr,
    child: Option<Child>,
}

impl BridgeProc {
    /// Starts the real bridge on `url` as host `host`, delivering every
    /// webhook outbox of `agents` to `sink`; `edit` changes the rest.
    pub fn start(
        url: &str,
        tls: TlsFiles,
        host: &str,
        agents: &[AgentName],
        sink: &str,
        edit: impl FnOnce(&mut BridgeConfig),
    ) -> BridgeProc {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), PASSWORD).unwrap();
        std::fs::write(dir.path().join("token"), TOKEN).unwrap();
        let redis: RedisUrl = url.parse().unwrap();
        let mut cfg = BridgeConfig::new(redis, dir.path().join("pw"));
        cfg.tls = tls;
        cfg.key_form = KeyForm::Tagged;
        cfg.user = USER.into();
        cfg.agents = agents.to_vec();
        cfg.sources = vec!["webhook".into()];
        let port = oxidepm_testkit::free_port();
        let webhook = SocketAddr::from(([127, 0, 0, 1], port));
        let mut w = WebhookConfig::new(webhook, dir.path().join("token"));
        w.settings.deliver.insert("*".into(), sink.to_string());
        cfg.webhook = Some(w);
        cfg.outbox.consumer = host.into();
        cfg.outbox.block_ms = 200;
        cfg.outbox.claim_idle_ms = 1_000;
        cfg.retry.base_ms = 20;
        cfg.retry.max_ms = 200;
        edit(&mut cfg);
        let path: PathBuf = dir.path().join("bridge.json");
        std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_oxidepm-bridge"))
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("bridge.log")).unwrap())
            .spawn()
            .unwrap();
        let mut b = BridgeProc {
            dir,
            webhook,
            child: Some(child),
        };
        oxidepm_testkit::eventually(Duration::from_secs(30), "the bridge's webhook", || {
            b.check_alive();
            std::net::TcpStream::connect(webhook).is_ok()
        });
        b
    }

    /// Panics with its log if it exited.
    pub fn check_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!("the bridge exited ({status}): {}", self.log());
            }
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bridge.log")).unwrap_or_default()
    }

    /// SIGKILL, as a host that dies.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }
}

/// `(agent, entry id, text)` of every body the sink took.
pub fn delivered(sink: &oxidepm_testkit::Sink) -> Vec<(String, String, String)> {
    sink.bodies()
        .iter()
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (s("agent"), s("id"), s("text"))
        })
        .collect()
}

/// Checks at-least-once with de-duplication by entry id: every text of
/// `want` arrived, a text arrived twice only as the same entry, and no
/// entry carried two texts.
pub fn assert_each_delivered(got: &[(String, String, String)], want: &[String]) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut by_entry: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (a, id, t) in got {
        by_entry
            .entry((a.clone(), id.clone()))
            .or_default()
            .insert(t.clone());
    }
    for (e, texts) in &by_entry {
        assert_eq!(texts.len(), 1, "entry {e:?} delivered with different texts");
    }
    let texts: BTreeSet<&String> = got.iter().map(|(_, _, t)| t).collect();
    for w in want {
        assert!(texts.contains(w), "{w:?} was never delivered");
    }
    assert_eq!(
        by_entry.len(),
        want.len(),
        "entries delivered: {by_entry:?}"
    );
}
