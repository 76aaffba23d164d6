//! Changes applied to the running Redis: its users (ACL SETUSER and
//! DELUSER, never ACL LOAD), the keys of gone lanes, the agents' groups,
//! and `maxmemory` (the private Redis's only: a shared server's memory is
//! its operator's).

use super::error::Error;
use super::server::{Con, Server};
use super::{layout, purge};
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::{AgentName, Secret};
use std::time::{Duration, Instant};

/// A user as provisioned: its name on the server (host-qualified where it
/// exists once per host on a shared server), what it is, its password.
pub(super) type NamedUser = (String, AclUser, Secret);

/// What one provisioning pass does, and as whom.
pub(super) struct Provision<'a> {
    /// Where.
    pub server: &'a Server,
    /// The admin user's name (`sys`, or the shared server's admin).
    pub admin_user: &'a str,
    /// Its password.
    pub admin_pw: &'a Secret,
    /// Every user of this host's lanes.
    pub users: &'a [NamedUser],
    /// The agents, whose groups are made.
    pub agents: &'a [AgentName],
    /// Every stream family.
    pub families: &'a [String],
    /// Agents whose keys are deleted.
    pub purged: &'a [AgentName],
    /// On a shared server: what this host may delete.
    pub own: Option<Own>,
}

/// What a host may delete on a shared server: the users of its own gone
/// agents and responders, and users qualified with its host id.
pub(super) struct Own {
    /// `@<host id>`, the suffix of this host's per-host users.
    pub suffix: String,
    /// Users of names this host held (and nobody else holds now).
    pub deletable: Vec<String>,
}

/// Sets a running private Redis's `maxmemory` (redis.conf is written
/// only when Redis is not running), so that a changed `[lanes] maxmemory`
/// applies to a Redis the daemon adopted.
pub(super) async fn set_maxmemory(con: &mut Con, bytes: u64) -> Result<(), Error> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async::<()>(con)
        .await
        .map_err(|source| Error::Redis {
            command: format!("CONFIG SET maxmemory {bytes}"),
            source,
        })
}

fn fail(command: String, source: redis::RedisError) -> Error {
    Error::Redis { command, source }
}

/// The nodes as the admin user, tried until Redis answers (the private
/// one may be starting), 10 s at most.
async fn nodes_patiently(p: &Provision<'_>) -> Result<Vec<(String, Con)>, Error> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match p.server.nodes(p.admin_user, p.admin_pw, false).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Applies the users to Redis — to every node of a cluster, replicas too,
/// since ACLs are not replicated — (ACL SETUSER / DELUSER, then ACL SAVE:
/// no restart, and no ACL LOAD, which would drop every client on Redis
/// 7.0/7.2), deletes the keys of the lanes of `purged` (after DELUSER,
/// which disconnects a gone agent's clients), and makes each agent's inbox
/// streams and group. Returns the keys connection, for what follows.
pub(super) async fn apply_live(p: &Provision<'_>) -> Result<Con, Error> {
    let nodes = nodes_patiently(p).await?;
    for (at, mut con) in nodes {
        apply_users(p, &mut con).await.map_err(|e| match e {
            Error::Redis { command, source } if p.own.is_some() => Error::Redis {
                command: format!("{command} on {at}"),
                source,
            },
            e => e,
        })?;
    }
    if p.server.is_cluster() {
        // SCAN sees one node's keys: every primary is asked.
        for (_, mut con) in p.server.nodes(p.admin_user, p.admin_pw, true).await? {
            purge_all(&mut con, p.purged).await?;
        }
    }
    let mut con = p.server.connect(p.admin_user, p.admin_pw).await?;
    if !p.server.is_cluster() {
        purge_all(&mut con, p.purged).await?;
    }
    for a in p.agents {
        for key in layout::streams(a, p.families).0 {
            let r: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&key)
                .arg(a.as_str())
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut con)
                .await;
            if let Err(e) = r {
                if e.code() != Some("BUSYGROUP") {
                    return Err(fail(format!("XGROUP CREATE {key}"), e));
                }
            }
        }
    }
    Ok(con)
}

async fn purge_all(con: &mut Con, purged: &[AgentName]) -> Result<(), Error> {
    for a in purged {
        let n = purge::purge(con, a)
            .await
            .map_err(|e| fail(format!("SCAN/UNLINK {a}:*"), e))?;
        if n > 0 {
            log::info!("lanes: deleted the {n} stream(s) left by agent {a}");
        }
    }
    Ok(())
}

/// The users on one node.
async fn apply_users(p: &Provision<'_>, con: &mut Con) -> Result<(), Error> {
    for (name, user, pw) in p.users {
        if p.own.is_some() && *user == AclUser::Admin {
            // A shared server's admin is the person's user, never `sys`.
            continue;
        }
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER")
            .arg(name)
            .arg("reset")
            .arg("on")
            .arg(acl::hashed(pw.expose()));
        for r in user.rules(p.families) {
            c.arg(r);
        }
        c.query_async::<()>(con)
            .await
            .map_err(|e| fail(format!("ACL SETUSER {name}"), e))?;
    }
    let existing: Vec<String> = redis::cmd("ACL")
        .arg("USERS")
        .query_async(con)
        .await
        .map_err(|e| fail("ACL USERS".into(), e))?;
    for u in existing {
        if p.users.iter().any(|(n, _, _)| *n == u) {
            continue;
        }
        let delete = match &p.own {
            None => AclUser::is_per_lane(&u),
            Some(own) => own.deletable.contains(&u) || u.ends_with(&own.suffix),
        };
        if delete {
            redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&u)
                .query_async::<()>(con)
                .await
                .map_err(|e| fail(format!("ACL DELUSER {u}"), e))?;
        }
    }
    let saved = redis::cmd("ACL").arg("SAVE").query_async::<()>(con).await;
    match saved {
        Ok(()) => Ok(()),
        // A shared server without an ACL file keeps users in memory (its
        // operator's choice): nothing to save them to.
        Err(e) if p.own.is_some() && e.to_string().contains("ACL file") => Ok(()),
        Err(e) if p.own.is_some() => {
            log::warn!(
                "lanes: ACL SAVE on the shared server: {e}; the users are in force but not saved"
            );
            Ok(())
        }
        Err(e) => Err(fail("ACL SAVE".into(), e)),
    }
}
