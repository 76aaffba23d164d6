//! The lane proxy as the daemon runs it: its `system` app and its
//! configuration file (where the Redis is, how keys are written, each
//! agent's socket and bounds).

use super::budgets;
use super::conf_file::write_json;
use super::handle::{AgentLane, Lanes};
use super::layout::PROXY_APP;
use super::responders::ResponderLane;
use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::{AgentConfig, ProxyConfig};
use oxidepm_proto::{AppKind, AppSpec};
use std::path::Path;

impl Lanes {
    pub(super) fn proxy_spec(&self, exe: &Path) -> AppSpec {
        let mut s = AppSpec::new(
            PROXY_APP,
            exe.display().to_string(),
            vec![
                "--config".into(),
                self.layout.proxy_conf().display().to_string(),
            ],
        );
        s.kind = AppKind::System;
        s.protected = true;
        s
    }

    /// The proxy's configuration for `agents`.
    pub(super) fn proxy_conf(&self, agents: &[AgentLane]) -> ProxyConfig {
        let l = &self.layout;
        let quota = budgets::agent_quota(&self.settings, agents.len());
        if let Some(note) = budgets::quota_note(&self.settings, agents.len()) {
            log::warn!("{note}");
        }
        let lanes = agents
            .iter()
            .map(|a| {
                let user = AclUser::Agent(a.name.clone());
                let mut c = AgentConfig::new(a.name.clone(), secrets::path(&l.secrets_dir(), user));
                c.uid = a.uid;
                c.rate_limit = self.settings.rate_limit;
                c.maxlen = self.settings.maxlen;
                c.quota = quota;
                c.max_connections = self.settings.max_connections;
                c
            })
            .collect();
        let mut p = match &self.settings.redis_url {
            Some(url) => {
                let mut p = ProxyConfig::new(url.clone(), l.lanes_dir(), lanes);
                p.tls = self.settings.tls_files();
                p
            }
            None => ProxyConfig::new(l.redis_socket(), l.lanes_dir(), lanes),
        };
        p.key_form = self.settings.key_form();
        p.families = self.settings.families();
        p.limits = self.settings.limits;
        p
    }

    pub(super) fn write_proxy_conf(
        &self,
        agents: &[AgentLane],
        responders: &[ResponderLane],
    ) -> std::io::Result<()> {
        let mut conf = self.proxy_conf(agents);
        conf.families = self.families_with(responders);
        conf.responders = self.responder_configs(responders);
        write_json(&self.layout.proxy_conf(), &conf)
    }
}
