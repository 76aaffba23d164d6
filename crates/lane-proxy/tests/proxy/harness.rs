//! Test harness for the lane proxy: the proxy in-process, in front of the
//! testkit's private redis-server, whose ACL is the one the daemon writes.

use oxidepm_lane_proxy::{Proxy, ReloadReport};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use oxidepm_testkit::{bulk, ok, password, words, Client, Redis, Value};

/// One agent of the proxy's configuration.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    pub extra: String,
}

impl Agent {
    pub fn new(name: &str) -> Agent {
        Agent {
            name: name.into(),
            extra: String::new(),
        }
    }

    /// Extra JSON members, e.g. `"maxlen": 5`.
    pub fn with(mut self, extra: &str) -> Agent {
        self.extra = format!(", {extra}");
        self
    }
}

/// The proxy, in-process on its own runtime.
pub struct TestProxy {
    pub proxy: Arc<Proxy>,
    pub config: PathBuf,
    pub lanes: PathBuf,
    secrets: PathBuf,
    upstream: PathBuf,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestProxy {
    pub fn start(redis: &Redis, agents: &[Agent]) -> TestProxy {
        Self::start_with(redis, agents, "", Vec::new())
    }

    /// `top_extra`: extra top-level JSON members (`"limits": {...}`).
    pub fn start_with(
        redis: &Redis,
        agents: &[Agent],
        top_extra: &str,
        activated: Vec<oxidepm_sys::activation::ActivatedSocket>,
    ) -> TestProxy {
        let base = redis.dir.path();
        let secrets = base.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        let config = base.join("lane-proxy.json");
        let lanes = base.join("lanes");
        let upstream = redis.socket.clone();
        write_config(&config, &secrets, &upstream, &lanes, agents, top_extra);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (proxy, report) = Proxy::start(config.clone(), activated, rt.handle().clone()).unwrap();
        assert!(report.failed.is_empty(), "{report}");
        TestProxy {
            proxy,
            config,
            lanes,
            secrets,
            upstream,
            rt: Some(rt),
        }
    }

    pub fn write_config(&self, agents: &[Agent], top_extra: &str) {
        write_config(
            &self.config,
            &self.secrets,
            &self.upstream,
            &self.lanes,
            agents,
            top_extra,
        );
    }

    /// Rewrites the configuration and reloads it, as SIGHUP would.
    pub fn reconfigure(&self, agents: &[Agent]) -> ReloadReport {
        self.write_config(agents, "");
        self.proxy.reload().unwrap()
    }

    pub fn socket(&self, agent: &str) -> PathBuf {
        self.lanes.join(format!("{agent}.sock"))
    }

    /// A client of `agent`'s lane.
    pub fn client(&self, agent: &str) -> Client {
        Client::connect(&self.socket(agent))
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.proxy.shutdown();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn write_config(
    config: &Path,
    secrets: &Path,
    upstream: &Path,
    lanes: &Path,
    agents: &[Agent],
    top_extra: &str,
) {
    let mut list = Vec::new();
    for a in agents {
        // Also for agents Redis does not know, whose AUTH must fail.
        let user = oxidepm_testkit::agent_user(&a.name);
        let pw = secrets.join(&user);
        std::fs::write(&pw, format!("{}\n", password(&user))).unwrap();
        list.push(format!(
            r#"{{"name": "{}", "password_file": "{}"{}}}"#,
            a.name,
            pw.display(),
            a.extra
        ));
    }
    // The testkit's Redis grants its agents the outboxes of these.
    let families = if top_extra.contains("\"families\"") {
        String::new()
    } else {
        let list: Vec<String> = oxidepm_testkit::redis::SOURCES
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect();
        format!(r#", "families": [{}]"#, list.join(", "))
    };
    let sep = if top_extra.is_empty() { "" } else { ", " };
    let json = format!(
        r#"{{"upstream": "{}", "lanes_dir": "{}", "agents": [{}]{families}{sep}{top_extra}}}"#,
        upstream.display(),
        lanes.display(),
        list.join(", ")
    );
    std::fs::write(config, json).unwrap();
}

/// Sends, without waiting for the answer, a read of alice's discord inbox
/// in group `alice` as `consumer` that blocks until an entry arrives.
pub fn send_blocking_read(c: &mut Client, consumer: &str) {
    c.send(&words(&format!(
        "XREADGROUP GROUP alice {consumer} BLOCK 0 STREAMS alice:discord:inbox >"
    )));
}
