//! What is left of an agent once it is deleted: nothing. A new agent may
//! take a deleted one's name, under another uid, and would otherwise read
//! its predecessor's unread messages, its answers not yet sent and its
//! dead letters.
//!
//! The lane's keys are deleted (`UNLINK`), not archived: every key an
//! archive could have, a glob of some identity's ACL may match one day,
//! while a deleted key is nobody's. They are the keys of the agent's own ACL
//! globs (`<agent>:*:inbox`, `<agent>:*:outbox`) and the dead letters of
//! its outboxes (`<agent>:*:outbox:dead`); an agent name holds no glob
//! character, so these match that agent's keys and no one else's. Their
//! consumer groups go with them.
//!
//! It happens in two places, so that no path leaves data behind: when an
//! agent is gone (its password file in `secrets/` outlives it until its
//! keys are deleted, so a daemon stopped half-way finishes the job at its
//! next start), and when an agent's lane is made for the first time (its
//! password is new), for what an older daemon, or a message routed during
//! the deletion, left under its name.

use super::server::Con;
use oxidepm_lanes::acl::{AclUser, AGENT_PREFIX};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::stream_key::{dead_letter, glob};
use oxidepm_lanes::{AgentName, Dir, Secret};
use std::path::Path;

/// Keys asked for per SCAN step.
const SCAN_COUNT: usize = 1000;

/// The globs of every key of `agent`'s lane.
pub fn lane_globs(agent: &AgentName) -> [String; 3] {
    let outboxes = glob(Some(agent), None, Dir::Outbox);
    [
        glob(Some(agent), None, Dir::Inbox),
        dead_letter(&outboxes),
        outboxes,
    ]
}

/// Deletes every key of `agent`'s lane; returns how many there were.
pub async fn purge(con: &mut Con, agent: &AgentName) -> redis::RedisResult<usize> {
    let mut removed = 0;
    // With the lane go the bridge's records of it (its open questions, so
    // that a new agent of the name cannot be answered what the old one
    // asked; the channels it may answer in on Discord), in either key form.
    let records = oxidepm_lanes::stream_key::agent_record_globs(agent);
    for pattern in lane_globs(agent).into_iter().chain(records) {
        removed += unlink_matching(con, &pattern).await?;
    }
    Ok(removed)
}

/// Deletes every key matching `pattern`; returns how many there were.
pub async fn unlink_matching(con: &mut Con, pattern: &str) -> redis::RedisResult<usize> {
    let mut removed = 0;
    // One at a time: on a cluster node, keys one SCAN returns may lie in
    // several slots, and one UNLINK may only touch one.
    for k in scan(con, pattern).await? {
        removed += redis::cmd("UNLINK")
            .arg(k)
            .query_async::<usize>(con)
            .await?;
    }
    Ok(removed)
}

/// Every key matching `pattern` (an agent's keys: a few streams).
pub(super) async fn scan(con: &mut Con, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(con)
            .await?;
        out.extend(keys);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// An agent whose lane outlived it: the name of its password file in
/// `secrets/`, and the agent, when that name is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Gone {
    /// The password file's name (`agent_<name>`).
    pub secret: String,
    /// The agent, if the rest of the name is an agent name.
    pub agent: Option<AgentName>,
}

/// The agents with a password in `dir` and no place among `users`.
pub fn gone(dir: &Path, users: &[(AclUser, Secret)]) -> Vec<Gone> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| name.starts_with(AGENT_PREFIX))
        .filter(|name| !users.iter().any(|(u, _)| u.to_string() == *name))
        .map(|secret| Gone {
            agent: secret
                .strip_prefix(AGENT_PREFIX)
                .and_then(|a| a.parse().ok()),
            secret,
        })
        .collect()
}

/// Forgets the passwords of agents whose keys are gone.
pub fn forget(dir: &Path, gone: &[Gone]) {
    for g in gone {
        secrets::remove(dir, &g.secret);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_globs_are_the_lanes_own_and_no_one_elses() {
        let a: AgentName = "al".parse().unwrap();
        assert_eq!(
            lane_globs(&a),
            [
                "al:*:inbox".to_string(),
                "al:*:outbox:dead".to_string(),
                "al:*:outbox".to_string()
            ]
        );
    }

    #[tokio::test]
    async fn a_deleted_agent_leaves_no_discord_channel_for_its_namesake() {
        use oxidepm_lanes::acl::ADMIN_USER;
        let redis = oxidepm_testkit::Redis::start(&["al", "alice"]);
        let mut t = redis.admin();
        for k in [
            "bridge:discord:channels:al",
            "bridge:discord:channels:alice",
        ] {
            t.cmd(&["ZADD", k, "1", "42"]);
        }
        let server = super::super::server::Server::Private {
            socket: redis.socket.clone(),
        };
        let pw = Secret::new(oxidepm_testkit::password(ADMIN_USER));
        let mut con = server.connect(ADMIN_USER, &pw).await.unwrap();
        purge(&mut con, &"al".parse().unwrap()).await.unwrap();
        for (k, n) in [
            ("bridge:discord:channels:al", 0),
            ("bridge:discord:channels:alice", 1),
        ] {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(k)
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(exists, n);
        }
    }

    #[test]
    fn gone_agents_are_found_by_their_password_files() {
        let d = tempfile::tempdir().unwrap();
        for f in ["agent_alice", "agent_bob", "agent_Bad*", "bridge", "sys"] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        let users = vec![(AclUser::Agent("alice".parse().unwrap()), Secret::new("x"))];
        let mut got = gone(d.path(), &users);
        got.sort_by(|a, b| a.secret.cmp(&b.secret));
        assert_eq!(
            got,
            vec![
                Gone {
                    secret: "agent_Bad*".into(),
                    agent: None
                },
                Gone {
                    secret: "agent_bob".into(),
                    agent: Some("bob".parse().unwrap())
                },
            ]
        );
        forget(d.path(), &got);
        assert!(d.path().join("agent_alice").exists());
        assert!(!d.path().join("agent_bob").exists());
        assert!(d.path().join("bridge").exists());
    }
}
