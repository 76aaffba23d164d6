//! The lanes of one daemon: the handle every lanes operation is a method
//! of (provisioning in `admin`, reports in `report`, the bridge in
//! `bridge_admin`, …), and what it keeps between calls. It is its own
//! module so that those files depend on it and not on one another.

use super::layout::Layout;
use super::server::Con;
use super::settings::LanesSettings;
use oxidepm_lanes::AgentName;
use std::sync::Arc;

/// An agent as the lanes see it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentLane {
    /// Its name.
    pub name: AgentName,
    /// The uid its processes run as, when not the daemon's.
    pub uid: Option<u32>,
}

/// The lanes of one daemon.
#[derive(Debug, Clone)]
pub struct Lanes {
    /// Where the files are.
    pub layout: Layout,
    /// `[lanes]` of daemon.toml.
    pub settings: LanesSettings,
    /// What the lanes keep between calls.
    pub(super) state: Arc<LanesState>,
    /// This host's id on a shared server (`[lanes] host_id` or derived).
    pub host_id: String,
}

/// What the lanes keep between calls, shared by every clone.
#[derive(Debug, Default)]
pub(super) struct LanesState {
    /// Held through a reconcile: two at once would each take the other's
    /// new agent for a deleted one.
    pub(super) reconciling: tokio::sync::Mutex<()>,
    /// Why the bridge does not run, when the daemon decided it cannot.
    pub(super) bridge_problem: std::sync::Mutex<Option<String>>,
    /// The consult rules put in force by a reload (`None`: daemon.toml's
    /// at start).
    pub(super) consult: std::sync::Mutex<Option<oxidepm_lanes::consult::ConsultConfig>>,
    /// Every family as of the last reconcile (the responder apps' too);
    /// read when an agent starts, for its environment.
    pub(super) families: Arc<std::sync::RwLock<Vec<String>>>,
    /// The agents of every host sharing the server, as last read
    /// (`shared_routes::server_agents`).
    pub(super) server_agents: std::sync::Mutex<Vec<AgentName>>,
    /// The admin connection those reads use, kept between them.
    pub(super) discovery_con: KeptCon,
}

impl Lanes {
    /// The lanes of the home of `layout`, with `settings`.
    pub fn new(layout: Layout, settings: LanesSettings) -> Lanes {
        let state = LanesState {
            families: Arc::new(std::sync::RwLock::new(settings.families())),
            ..LanesState::default()
        };
        let host_id = settings.host_id.clone().unwrap_or_else(|| {
            let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            super::settings::default_host_id(hostname.trim(), layout.home.root())
        });
        Lanes {
            layout,
            settings,
            state: Arc::new(state),
            host_id,
        }
    }

    /// Every family as of the last reconcile, shared: what an agent
    /// starting now has outboxes for.
    pub fn live_families(&self) -> Arc<std::sync::RwLock<Vec<String>>> {
        self.state.families.clone()
    }

    pub(super) fn families_now(&self) -> Vec<String> {
        self.state
            .families
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// An admin connection kept between the reads of the other hosts' agents.
#[derive(Default)]
pub(super) struct KeptCon(std::sync::Mutex<Option<Con>>);

impl KeptCon {
    pub(super) fn take(&self) -> Option<Con> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(super) fn put(&self, con: Con) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(con);
    }
}

impl std::fmt::Debug for KeptCon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptCon")
    }
}
