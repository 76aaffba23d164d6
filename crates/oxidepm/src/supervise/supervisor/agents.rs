//! Agents and uids. What keeps one agent from another (and from the
//! daemon) is the kernel's separation of uids: an agent's lane socket is
//! owned by its uid, and only a process that cannot write the cgroup
//! files stays in its app's cgroup. Agents that run as one uid can use
//! each other's lane sockets and, sharing the daemon's uid, can leave
//! their cgroup and act as whoever else runs as that uid. So a root daemon
//! refuses an agent that would run as root unless `daemon.toml` accepts it
//! (`agents_share_uid = true`), and every reply that defines or lists such
//! agents says that they are not isolated.

use super::Supervisor;
use crate::supervise::spawn;
use crate::supervise::validate::Invalid;
use oxidepm_proto::{AppKind, AppSpec};
use std::collections::BTreeMap;

/// The uid app `spec` runs as: its `user`, else the daemon's. A user that
/// does not resolve is left to the spawn to report.
fn uid_of(spec: &AppSpec, daemon_uid: u32) -> Option<u32> {
    match &spec.user {
        None => Some(daemon_uid),
        Some(u) => spawn::resolve_user(u).ok().map(|c| c.uid.as_raw()),
    }
}

/// Whether agent `spec` may be defined: a root daemon runs no agent as
/// root unless `share` (`agents_share_uid = true`).
pub fn check_agent(spec: &AppSpec, daemon_uid: u32, share: bool) -> Result<(), Invalid> {
    if spec.kind != AppKind::Agent || daemon_uid != 0 || share {
        return Ok(());
    }
    if uid_of(spec, daemon_uid) == Some(daemon_uid) {
        return Err(Invalid::AgentAsRoot {
            app: spec.name.clone(),
        });
    }
    Ok(())
}

/// For each agent (name → uid) that shares its uid with the daemon or
/// with another agent, the warning that says so.
pub fn sharing_warnings(
    agents: &BTreeMap<String, u32>,
    daemon_uid: u32,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, uid) in agents {
        let others: Vec<&str> = agents
            .iter()
            .filter(|(n, u)| *n != name && *u == uid)
            .map(|(n, _)| n.as_str())
            .collect();
        let with_daemon = *uid == daemon_uid;
        if others.is_empty() && !with_daemon {
            continue;
        }
        let mut whom = Vec::new();
        if with_daemon {
            whom.push("the daemon".to_string());
        }
        if !others.is_empty() {
            whom.push(format!("agent(s) {}", others.join(", ")));
        }
        out.insert(
            name.clone(),
            format!(
                "agent {name} runs as uid {uid}, like {}: their lanes and their daemon access are not isolated from each other; run each agent as a user of its own (`user`){}",
                whom.join(" and "),
                if daemon_uid == 0 { "" } else { " under a daemon that runs as root" }
            ),
        );
    }
    out
}

impl Supervisor {
    /// Refuses the agents among `specs` that a root daemon would run as
    /// root without `agents_share_uid = true`.
    pub fn check_agent_uids(&self, specs: &[AppSpec]) -> Result<(), Invalid> {
        let me = self.own.uid.as_raw();
        specs
            .iter()
            .try_for_each(|s| check_agent(s, me, self.agents_share_uid))
    }

    /// The warnings about agents that share a uid, by agent name.
    pub fn agent_uid_warnings(&self) -> BTreeMap<String, String> {
        let me = self.own.uid.as_raw();
        let agents: BTreeMap<String, u32> = self
            .apps()
            .filter(|a| a.spec.kind == AppKind::Agent)
            .filter_map(|a| Some((a.spec.name.clone(), uid_of(&a.spec, me)?)))
            .collect();
        sharing_warnings(&agents, me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(name: &str, user: Option<&str>) -> AppSpec {
        let mut s = AppSpec::new(name, "sleep", vec!["1".into()]);
        s.kind = AppKind::Agent;
        s.user = user.map(str::to_string);
        s
    }

    #[test]
    fn a_root_daemon_runs_no_agent_as_root_unless_told() {
        let e = check_agent(&agent("a", None), 0, false).unwrap_err();
        assert!(e.to_string().contains("agents_share_uid = true"), "{e}");
        assert!(check_agent(&agent("a", Some("root")), 0, false).is_err());
        assert!(check_agent(&agent("a", Some("0")), 0, false).is_err());
        assert!(check_agent(&agent("a", None), 0, true).is_ok());
        // A plain app, or a daemon that is not root, is not refused.
        let mut plain = agent("a", None);
        plain.kind = AppKind::App;
        assert!(check_agent(&plain, 0, false).is_ok());
        assert!(check_agent(&agent("a", None), 1000, false).is_ok());
        // An agent of its own user is fine.
        assert!(check_agent(&agent("a", Some("nobody")), 0, false).is_ok());
    }

    #[test]
    fn agents_sharing_a_uid_are_warned_about() {
        let agents: BTreeMap<String, u32> =
            [("a", 0), ("b", 0), ("c", 1001), ("d", 1002), ("e", 1002)]
                .iter()
                .map(|(n, u)| (n.to_string(), *u))
                .collect();
        let w = sharing_warnings(&agents, 0);
        assert!(
            w["a"].contains("the daemon") && w["a"].contains("agent(s) b"),
            "{w:?}"
        );
        assert!(!w.contains_key("c"));
        assert!(w["d"].contains("agent(s) e") && !w["d"].contains("the daemon"));
        // Under a daemon that is not root, every agent shares its uid.
        let one: BTreeMap<String, u32> = [("a".to_string(), 1000)].into();
        assert!(sharing_warnings(&one, 1000)["a"].contains("the daemon"));
    }
}
