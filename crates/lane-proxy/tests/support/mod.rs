//! The real proxy binary in front of a Redis the test started (a shared
//! server, a cluster, a sentinel's primary), in the tagged key form, as a
//! daemon configured with `[lanes] redis_url` would run it.

#![allow(dead_code)]

use oxidepm_lanes::stream_key::{set_key_form, KeyForm};
use oxidepm_lanes::{AclUser, AgentName, TlsFiles};
use oxidepm_testkit::{eventually, password, Client};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The outbox (and inbox) families of these tests.
pub const FAMILIES: &[&str] = &["webhook", "email"];

/// Fixes this test process's key form: every key and ACL rule the test
/// builds is then the tagged one the proxy uses.
pub fn tagged() {
    set_key_form(KeyForm::Tagged).unwrap();
}

/// The `ACL SETUSER` arguments of `agent_<name>`, as the daemon provisions it.
pub fn agent_setuser(name: &str) -> Vec<String> {
    setuser(AclUser::Agent(name.parse().unwrap()), &[])
}

/// The `ACL SETUSER` arguments of `user`, whose agents may also append to
/// the outboxes of `responders`.
pub fn setuser(user: AclUser, responders: &[&str]) -> Vec<String> {
    let families: Vec<String> = FAMILIES
        .iter()
        .chain(responders)
        .map(|f| f.to_string())
        .collect();
    let mut args = vec![
        "SETUSER".to_string(),
        user.to_string(),
        "reset".into(),
        "on".into(),
        format!(">{}", password(&user.to_string())),
    ];
    args.extend(user.rules(&families));
    args
}

/// An agent's stream key in this process's form.
pub fn inbox(agent: &str, family: &str) -> String {
    oxidepm_lanes::StreamKey::inbox(&agent.parse::<AgentName>().unwrap(), family).to_string()
}

/// An agent's outbox key in this process's form.
pub fn outbox(agent: &str, family: &str) -> String {
    oxidepm_lanes::StreamKey::outbox(&agent.parse::<AgentName>().unwrap(), family).to_string()
}

/// The proxy process; killed on drop.
pub struct ProxyProcess {
    pub dir: tempfile::TempDir,
    pub lanes: PathBuf,
    child: Child,
}

impl ProxyProcess {
    /// Starts `oxidepm-lane-proxy` for `agents` on `url`, and waits until
    /// their sockets accept.
    pub fn start(url: &str, tls: &TlsFiles, agents: &[&str]) -> ProxyProcess {
        Self::start_with(url, tls, agents, &[])
    }

    /// Also serving the lanes of `responders` (whose families the agents
    /// may append to).
    pub fn start_with(
        url: &str,
        tls: &TlsFiles,
        agents: &[&str],
        responders: &[&str],
    ) -> ProxyProcess {
        let dir = tempfile::tempdir().unwrap();
        let secrets = dir.path().join("secrets");
        let lanes = dir.path().join("lanes");
        std::fs::create_dir_all(&secrets).unwrap();
        let mut list = Vec::new();
        for a in agents {
            let user = oxidepm_testkit::agent_user(a);
            let pw = secrets.join(&user);
            std::fs::write(&pw, format!("{}\n", password(&user))).unwrap();
            list.push(serde_json::json!({"name": a, "password_file": pw}));
        }
        let mut resp = Vec::new();
        for r in responders {
            let user = AclUser::Responder(r.to_string()).to_string();
            let pw = secrets.join(&user);
            std::fs::write(&pw, format!("{}\n", password(&user))).unwrap();
            resp.push(serde_json::json!({"name": r, "password_file": pw}));
        }
        let families: Vec<&str> = FAMILIES.iter().chain(responders).copied().collect();
        let mut cfg = serde_json::json!({
            "upstream": url,
            "key_form": "tagged",
            "lanes_dir": lanes,
            "families": families,
            "agents": list,
            "responders": resp,
            "meter_interval_ms": 200,
        });
        if !tls.is_empty() {
            cfg["tls"] = serde_json::to_value(tls).unwrap();
        }
        let config = dir.path().join("lane-proxy.json");
        std::fs::write(&config, cfg.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("proxy.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_oxidepm-lane-proxy"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = ProxyProcess { dir, lanes, child };
        // A socket file exists from bind(); it accepts from listen():
        // ready is a connection that goes through.
        for a in agents.iter().chain(responders) {
            let s = p.socket(a);
            eventually(Duration::from_secs(20), "the lane sockets", || {
                std::os::unix::net::UnixStream::connect(&s).is_ok()
            });
        }
        p
    }

    /// The socket of `agent`'s lane.
    pub fn socket(&self, agent: &str) -> PathBuf {
        self.lanes.join(format!("{agent}.sock"))
    }

    /// A client of `agent`'s lane.
    pub fn client(&self, agent: &str) -> Client {
        Client::connect(&self.socket(agent))
    }

    /// What the proxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("proxy.log")).unwrap_or_default()
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `path` exists.
pub fn wait_for(path: &Path) {
    eventually(Duration::from_secs(20), "a file", || path.exists());
}
