//! `oxidepm lanes migrate-keys`: renames this host's agents' streams from
//! the plain key form (`alice:webhook:inbox`) to the tagged one
//! (`{alice}:webhook:inbox`), for a daemon whose `key_form` became
//! `tagged` (set, or the default with `redis_url`) while its server holds
//! keys of the plain form. Consumer groups and pending entries go with
//! their streams (RENAME keeps them). Run it on the server where the keys
//! are, before that server becomes a cluster: a cluster refuses a RENAME
//! across slots.

use super::error::Error;
use super::handle::Lanes;
use super::server::Con;
use crate::supervise::Shared;
use oxidepm_lanes::KeyForm;

/// What a migration did: `(from, to)` renamed, and keys left where they
/// were with why.
#[derive(Debug, Default)]
pub struct Migrated {
    /// Streams renamed.
    pub renamed: Vec<(String, String)>,
    /// Streams left alone, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// The plain keys of `agent`'s lane: `<agent>:<family>:inbox`,
/// `…:outbox` and `…:outbox:dead`.
fn plain_globs(agent: &str) -> [String; 3] {
    [
        format!("{agent}:*:inbox"),
        format!("{agent}:*:outbox"),
        format!("{agent}:*:outbox:dead"),
    ]
}

/// Renames `agent`'s plain keys to the tagged form. A tagged key that
/// already exists is replaced only when it is an empty stream (the one a
/// daemon of the tagged form made at start); else the plain key stays.
async fn migrate_agent(con: &mut Con, agent: &str, out: &mut Migrated) -> redis::RedisResult<()> {
    for pattern in plain_globs(agent) {
        for from in super::purge::scan(con, &pattern).await? {
            // Only the agent's own keys: the rest after `<agent>:`.
            let Some(rest) = from.strip_prefix(agent).filter(|r| r.starts_with(':')) else {
                continue;
            };
            let to = format!("{}{rest}", KeyForm::Tagged.agent_part(agent));
            let len: redis::RedisResult<i64> = redis::cmd("XLEN").arg(&to).query_async(con).await;
            let exists: i64 = redis::cmd("EXISTS").arg(&to).query_async(con).await?;
            if exists == 1 {
                if len.unwrap_or(1) != 0 {
                    out.skipped
                        .push((from, format!("{to} exists and is not an empty stream")));
                    continue;
                }
                redis::cmd("UNLINK")
                    .arg(&to)
                    .query_async::<i64>(con)
                    .await?;
            }
            match redis::cmd("RENAMENX")
                .arg(&from)
                .arg(&to)
                .query_async::<i64>(con)
                .await
            {
                Ok(1) => out.renamed.push((from, to)),
                Ok(_) => out.skipped.push((from, format!("{to} appeared meanwhile"))),
                Err(e) => out.skipped.push((from, e.to_string())),
            }
        }
    }
    Ok(())
}

impl Lanes {
    /// `lanes migrate-keys`: every agent of this host's plain keys to the
    /// tagged form in force.
    pub async fn migrate_keys(&self, shared: &Shared) -> Result<Migrated, Error> {
        if self.settings.key_form() != KeyForm::Tagged {
            return Err(Error::NothingToMigrate);
        }
        let agents: Vec<String> = self
            .agents(shared)
            .into_iter()
            .map(|a| a.name.to_string())
            .collect();
        let mut con = self.connect_admin().await?;
        let mut out = Migrated::default();
        for a in &agents {
            migrate_agent(&mut con, a, &mut out)
                .await
                .map_err(|source| Error::Redis {
                    command: format!("SCAN/RENAMENX {a}:*"),
                    source,
                })?;
        }
        Ok(out)
    }
}
