//! Moving this host's agents' streams into the key form in force.
//!
//! The key form (`[lanes] key_form`, see `oxidepm_lanes::stream_key`) is
//! fixed when the daemon starts. When it changed since the last start (a
//! single host getting ready for a Redis Cluster, or `redis_url` set on a
//! server that holds streams of the plain form), the daemon renames each
//! of its agents' streams found in the other form, before any lanes
//! process uses them: `alice:webhook:inbox` becomes `{alice}:webhook:inbox`
//! with its entries, consumer groups and pending entries (RENAME keeps them
//! all), and so do outboxes and their dead letters.
//!
//! A rename never overwrites (RENAMENX): where both forms of a key exist,
//! both are kept, the agent's older stream stays under its old name, and
//! the start says so. On a Redis Cluster the two forms of a key lie in
//! different slots, which RENAME refuses (CROSSSLOT); streams are renamed
//! on a standalone server first, then moved into the cluster (README,
//! Several hosts).

use oxidepm_lanes::stream_key::{is_family_name, KeyForm};
use oxidepm_lanes::AgentName;

/// Keys asked for per SCAN step.
const SCAN_COUNT: usize = 1000;

/// What a migration did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Streams renamed.
    pub renamed: usize,
    /// Streams left under the old name because the new one was taken.
    pub kept: Vec<String>,
}

/// The name in form `to` of `key`, a stream of `agent` in the other form
/// (`<agent part>:<family>:inbox|outbox[:dead]`); `None` for any other key.
pub fn renamed(key: &str, agent: &AgentName, to: KeyForm) -> Option<String> {
    let from = other(to);
    let rest = key
        .strip_prefix(from.agent_part(agent.as_str()).as_str())?
        .strip_prefix(':')?;
    let (family, dir) = rest.split_once(':')?;
    let known_dir = matches!(dir, "inbox" | "outbox" | "outbox:dead");
    if !known_dir || !is_family_name(family) {
        return None;
    }
    Some(format!("{}:{rest}", to.agent_part(agent.as_str())))
}

fn other(form: KeyForm) -> KeyForm {
    match form {
        KeyForm::Plain => KeyForm::Tagged,
        KeyForm::Tagged => KeyForm::Plain,
    }
}

/// Renames the streams of `agents` held in the other form into `to`.
pub fn migrate(
    con: &mut redis::Connection,
    agents: &[AgentName],
    to: KeyForm,
) -> redis::RedisResult<Migrated> {
    let mut done = Migrated::default();
    for agent in agents {
        // `{`, `}` and an agent name hold no glob character.
        let pattern = format!("{}:*", other(to).agent_part(agent.as_str()));
        for key in scan(con, &pattern)? {
            let Some(new) = renamed(&key, agent, to) else {
                continue;
            };
            let moved: bool = redis::cmd("RENAMENX").arg(&key).arg(&new).query(con)?;
            if moved {
                done.renamed += 1;
            } else {
                done.kept.push(key);
            }
        }
    }
    Ok(done)
}

fn scan(con: &mut redis::Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query(con)?;
        out.extend(keys);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agents_own_streams_are_renamed() {
        let alice: AgentName = "alice".parse().unwrap();
        let t = KeyForm::Tagged;
        for (key, want) in [
            ("alice:webhook:inbox", Some("{alice}:webhook:inbox")),
            ("alice:ops:outbox", Some("{alice}:ops:outbox")),
            ("alice:email:outbox:dead", Some("{alice}:email:outbox:dead")),
            ("alice:webhook:inbox:x", None),
            ("alice:a*:inbox", None),
            ("alice:webhook", None),
            ("alicex:webhook:inbox", None),
            ("{alice}:webhook:inbox", None),
            ("bridge:stats", None),
        ] {
            assert_eq!(renamed(key, &alice, t).as_deref(), want, "{key}");
        }
        assert_eq!(
            renamed("{alice}:webhook:inbox", &alice, KeyForm::Plain).as_deref(),
            Some("alice:webhook:inbox")
        );
    }
}
