//! Responders as apps: an app of kind `responder` named `<name>` is a
//! family of every agent's lane (agents may append to
//! `<agent>:<name>:outbox`), has the ACL user `resp_<name>` (its password
//! only in `secrets/`), the consumer group `<name>` on every agent's
//! outbox of that family (made here, by the daemon: neither the agents nor
//! the responder make keys), and a lane socket `lanes/<name>.sock` served
//! by the proxy in responder mode, 0600 and owned by the app's uid. The
//! contract it keeps, the same as the built-in `ops`'s, is written once in
//! `oxidepm_lanes::responder`.
//!
//! Deleting the app deletes its user (ACL DELUSER, with the other per-lane
//! users), its socket and every key of its family (`*:<name>:inbox`,
//! `*:<name>:outbox`, `*:<name>:outbox:dead`): as for an agent, a new
//! responder of that name starts empty. Its password file outlives it
//! until that is done, so a daemon stopped half-way finishes at its next
//! start.

use super::error::{Error, NameRefused};
use super::handle::Lanes;
use super::layout::{LaneUrlScheme, Layout};
use super::server::Con;
use crate::supervise::{lock, spawn, Shared};
use oxidepm_lanes::acl::{AclUser, RESPONDER_PREFIX};
use oxidepm_lanes::responder::{group, responder_socket, ResponderConfig, BUILTIN_FAMILIES};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::stream_key::{dead_letter, glob};
use oxidepm_lanes::{AgentName, Dir, Secret, StreamKey};
use oxidepm_proto::{AppKind, AppSpec};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A responder app as the lanes see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponderLane {
    /// Its name: its family, group and socket.
    pub name: AgentName,
    /// The uid its processes run as, when not the daemon's.
    pub uid: Option<u32>,
}

/// The uid of `user`, when it is not the daemon's own.
pub(super) fn other_uid(user: Option<&str>) -> Option<u32> {
    let own = nix::unistd::getuid().as_raw();
    user.and_then(|u| spawn::resolve_user(u).ok())
        .map(|c| c.uid.as_raw())
        .filter(|u| *u != own)
}

impl Lanes {
    /// The responder apps now defined (a name that is not one, from an old
    /// state, gets no lane).
    pub fn responders(&self, shared: &Shared) -> Vec<ResponderLane> {
        let s = lock(shared);
        s.apps()
            .filter(|a| a.spec.kind == AppKind::Responder)
            .filter_map(|a| {
                let name = a.spec.name.parse().ok()?;
                Some(ResponderLane {
                    name,
                    uid: other_uid(a.spec.user.as_deref()),
                })
            })
            .collect()
    }

    /// The lanes of the responders among `specs`, about to be defined.
    pub fn responder_lanes(specs: &[AppSpec]) -> Vec<ResponderLane> {
        specs
            .iter()
            .filter(|s| s.kind == AppKind::Responder)
            .filter_map(|s| {
                Some(ResponderLane {
                    name: s.name.parse().ok()?,
                    uid: other_uid(s.user.as_deref()),
                })
            })
            .collect()
    }

    /// Every family an agent has: the configured sources and responders,
    /// then the responder apps.
    pub fn families_with(&self, responders: &[ResponderLane]) -> Vec<String> {
        let mut f = self.settings.families();
        for r in responders {
            if !f.iter().any(|x| x == r.name.as_str()) {
                f.push(r.name.to_string());
            }
        }
        f
    }

    /// Checks the names of the responders and agents among `specs` against
    /// each other and what is defined: a responder's name is a family, so
    /// it is not an agent's, a source's, `consult`'s or `ops`'s.
    pub fn check_responders(&self, shared: &Shared, specs: &[AppSpec]) -> Result<(), Error> {
        let refuse = |name: &str, why: String| {
            Err(Error::ResponderName(NameRefused {
                name: name.to_string(),
                why,
            }))
        };
        let (agents, responders) = {
            let s = lock(shared);
            let named = |k: AppKind| -> Vec<String> {
                s.apps()
                    .filter(|a| a.spec.kind == k)
                    .map(|a| a.spec.name.clone())
                    .collect()
            };
            (named(AppKind::Agent), named(AppKind::Responder))
        };
        for s in specs {
            match s.kind {
                AppKind::Responder => {
                    match s.name.parse::<AgentName>() {
                        Ok(_) => {}
                        Err(oxidepm_lanes::NameError::Shape { .. }) => {
                            return refuse(
                                &s.name,
                                "it must start with a lowercase letter and have at most 31 of \
                                 a-z, 0-9, '_' and '-' (it becomes part of key patterns)"
                                    .into(),
                            )
                        }
                        Err(oxidepm_lanes::NameError::Reserved { .. }) => {
                            return refuse(
                                &s.name,
                                "it names a built-in identity of the lanes".into(),
                            )
                        }
                    }
                    let builtin = BUILTIN_FAMILIES.contains(&s.name.as_str())
                        || self.settings.families().contains(&s.name);
                    if builtin {
                        return refuse(
                            &s.name,
                            "it names a built-in source or responder of the lanes".into(),
                        );
                    }
                    let agent = agents.contains(&s.name)
                        || specs
                            .iter()
                            .any(|o| o.kind == AppKind::Agent && o.name == s.name);
                    if agent {
                        return refuse(&s.name, "an agent has that name".into());
                    }
                }
                AppKind::Agent if responders.contains(&s.name) => {
                    return Err(Error::BadName(oxidepm_lanes::NameError::Reserved {
                        name: s.name.clone(),
                    }));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The proxy's lanes of `responders`.
    pub(super) fn responder_configs(&self, responders: &[ResponderLane]) -> Vec<ResponderConfig> {
        let dir = self.layout.secrets_dir();
        responders
            .iter()
            .map(|r| {
                let user = AclUser::Responder(r.name.to_string());
                let mut c = ResponderConfig::new(r.name.clone(), secrets::path(&dir, &user));
                c.uid = r.uid;
                c.max_connections = self.settings.max_connections;
                if let Some(n) = self.settings.responder_inbox_maxlen {
                    c.inbox_maxlen = n;
                }
                if let Some(n) = self.settings.responder_reply_max_bytes {
                    c.reply_max_bytes = n;
                }
                c
            })
            .collect()
    }

    /// Writes `lanes/<name>.json` for each responder: its socket and the
    /// outboxes it reads now (they change as agents come and go: a
    /// responder reads the file again), 0600 and the responder's own.
    pub(super) fn write_responder_descriptions(
        &self,
        responders: &[ResponderLane],
        agents: &[AgentName],
    ) {
        let scheme = self.settings.lane_url_scheme;
        for r in responders {
            let path = description_path(&self.layout, &r.name);
            let text = description(&self.layout, &r.name, agents, scheme).to_string();
            if let Err(e) = super::conf_file::write_atomic(&path, text.as_bytes()) {
                log::error!("cannot write {}: {e}", path.display());
                continue;
            }
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            if let Some(uid) = r.uid {
                let _ = nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(uid)), None);
            }
        }
    }
}

/// Where responder `name`'s description is.
pub fn description_path(layout: &Layout, name: &AgentName) -> std::path::PathBuf {
    layout.lanes_dir().join(format!("{name}.json"))
}

/// What responder `name` is told about its lane, as JSON.
pub fn description(
    layout: &Layout,
    name: &AgentName,
    agents: &[AgentName],
    scheme: LaneUrlScheme,
) -> serde_json::Value {
    let socket = responder_socket(&layout.lanes_dir(), name);
    let outboxes: Vec<String> = agents
        .iter()
        .map(|a| StreamKey::outbox(a, name.as_str()).to_string())
        .collect();
    serde_json::json!({
        "responder": name,
        "lane": scheme.url(&socket),
        "socket": socket,
        "group": group(name.as_str()),
        "outboxes": outboxes,
        "acl_user": AclUser::Responder(name.to_string()).to_string(),
    })
}

/// What a responder app is told, as environment variables: its name, its
/// lane (a URL, and the plain path), its group and the file listing the
/// outboxes it reads.
pub fn responder_env(
    layout: &Layout,
    name: &AgentName,
    scheme: LaneUrlScheme,
) -> Vec<(String, String)> {
    let socket = responder_socket(&layout.lanes_dir(), name);
    vec![
        ("OXIDEPM_RESPONDER".into(), name.to_string()),
        ("OXIDEPM_LANE".into(), scheme.url(&socket)),
        ("OXIDEPM_LANE_SOCKET".into(), socket.display().to_string()),
        ("OXIDEPM_GROUP".into(), group(name.as_str()).to_string()),
        (
            "OXIDEPM_LANE_FILE".into(),
            description_path(layout, name).display().to_string(),
        ),
    ]
}

/// The responders with a password in `dir` and no place among `users`:
/// their keys are to go, then their passwords.
pub fn gone(dir: &Path, users: &[(AclUser, Secret)]) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| name.starts_with(RESPONDER_PREFIX))
        .filter(|name| !users.iter().any(|(u, _)| u.to_string() == *name))
        .collect()
}

/// The globs of every key of family `name`, of every agent.
pub fn family_globs(name: &str) -> [String; 3] {
    let outboxes = glob(None, Some(name), Dir::Outbox);
    [
        glob(None, Some(name), Dir::Inbox),
        dead_letter(&outboxes),
        outboxes,
    ]
}

/// As the admin user: deletes the keys of the responders gone (the users
/// in `gone`, after their ACL users were deleted), and makes each
/// responder's group on each agent's outbox of its family.
///
/// `only` (on a shared server): the gone responders' keys of these agents
/// (this host's) are deleted, never a glob over every host's agents.
pub async fn apply(
    con: &mut Con,
    gone: &[String],
    responders: &[AgentName],
    agents: &[AgentName],
    only: Option<&[AgentName]>,
) -> Result<(), Error> {
    let fail = |command: String, source: redis::RedisError| Error::Redis { command, source };
    for user in gone {
        let Some(name) = user
            .strip_prefix(RESPONDER_PREFIX)
            .filter(|n| oxidepm_lanes::stream_key::is_family_name(n))
        else {
            continue;
        };
        let patterns: Vec<String> = match only {
            None => family_globs(name).to_vec(),
            Some(own) => own
                .iter()
                .flat_map(|a| {
                    let outbox = StreamKey::outbox(a, name).to_string();
                    [
                        StreamKey::inbox(a, name).to_string(),
                        dead_letter(&outbox),
                        outbox,
                    ]
                })
                .collect(),
        };
        for pattern in patterns {
            // Exact keys need no SCAN (which a cluster answers per node).
            let n = if only.is_some() {
                redis::cmd("UNLINK")
                    .arg(&pattern)
                    .query_async::<usize>(con)
                    .await
            } else {
                super::purge::unlink_matching(con, &pattern).await
            }
            .map_err(|e| fail(format!("SCAN/UNLINK {pattern}"), e))?;
            if n > 0 {
                log::info!("lanes: deleted the {n} stream(s) of responder {name}");
            }
        }
    }
    for r in responders {
        for a in agents {
            let key = StreamKey::outbox(a, r.as_str()).to_string();
            let made: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&key)
                .arg(group(r.as_str()))
                .arg("0")
                .arg("MKSTREAM")
                .query_async(con)
                .await;
            match made {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(fail(format!("XGROUP CREATE {key}"), e)),
            }
        }
    }
    Ok(())
}

/// Waits (up to 5 s) until the proxy has removed the sockets of the
/// responders gone (the users in `gone`), so that a `delete` answers once
/// the lane is closed.
pub async fn wait_removed(layout: &Layout, gone: &[String]) {
    let sockets: Vec<std::path::PathBuf> = gone
        .iter()
        .filter_map(|u| u.strip_prefix(RESPONDER_PREFIX)?.parse::<AgentName>().ok())
        .map(|name| responder_socket(&layout.lanes_dir(), &name))
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sockets.iter().any(|s| s.exists()) {
        if std::time::Instant::now() > deadline {
            log::warn!("lanes: a deleted responder's socket is still there after 5 s");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Forgets the passwords of responders whose keys are gone.
pub fn forget(dir: &Path, gone: &[String]) {
    for g in gone {
        secrets::remove(dir, g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_s_globs_are_its_own() {
        assert_eq!(
            family_globs("echo"),
            [
                "*:echo:inbox".to_string(),
                "*:echo:outbox:dead".to_string(),
                "*:echo:outbox".to_string()
            ]
        );
    }

    #[test]
    fn gone_responders_are_found_by_their_password_files() {
        let d = tempfile::tempdir().unwrap();
        for f in ["resp_ops", "resp_echo", "agent_alice", "sys"] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        let users = vec![(AclUser::Responder("ops".into()), Secret::new("x"))];
        assert_eq!(gone(d.path(), &users), vec!["resp_echo".to_string()]);
    }
}
