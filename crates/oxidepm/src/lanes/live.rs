//! Changes applied to the running Redis: its users (ACL SETUSER and
//! DELUSER, never ACL LOAD), the keys of gone lanes, the agents' groups,
//! and `maxmemory`.

use super::admin::connect;
use super::error::Error;
use super::{layout, migrate, purge};
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::{AgentName, Secret};
use std::path::Path;
use std::time::{Duration, Instant};

/// Sets a running Redis's `maxmemory` (redis.conf is written only when
/// Redis is not running), so that a changed `[lanes] maxmemory` applies to
/// a Redis the daemon adopted.
pub(super) fn set_maxmemory(sock: &Path, admin_pw: &Secret, bytes: u64) -> Result<(), Error> {
    let mut con = connect(sock, admin_pw)?;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query::<()>(&mut con)
        .map_err(|source| Error::Redis {
            command: format!("CONFIG SET maxmemory {bytes}"),
            source,
        })
}

/// Applies the users to a running Redis (ACL SETUSER / DELUSER, then ACL
/// SAVE: no restart, and no ACL LOAD, which would drop every client on
/// Redis 7.0/7.2), deletes the keys of the lanes of `purged` (after
/// DELUSER, which disconnects a gone agent's clients), and makes each
/// agent's inbox streams and group.
pub(super) fn apply_live(
    sock: &Path,
    admin_pw: &Secret,
    users: &[(AclUser, Secret)],
    agents: &[AgentName],
    families: &[String],
    purged: &[AgentName],
    migrate_keys: bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut con = loop {
        match connect(sock, admin_pw) {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let fail = |command: String, source: redis::RedisError| Error::Redis { command, source };
    if migrate_keys {
        // Before anything makes a stream in the form in force.
        let form = oxidepm_lanes::stream_key::key_form();
        let done = migrate::migrate(&mut con, agents, form)
            .map_err(|e| fail(format!("RENAMENX into the {form:?} key form"), e))?;
        if done.renamed > 0 {
            log::info!(
                "lanes: {} stream(s) renamed into the {form:?} key form",
                done.renamed
            );
        }
        for k in &done.kept {
            log::error!(
                "lanes: {k} kept its name: its {form:?} form exists too; read what it \
                 holds and delete one of them (nothing was overwritten)"
            );
        }
    }
    for (user, pw) in users {
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER")
            .arg(user.to_string())
            .arg("reset")
            .arg("on")
            .arg(acl::hashed(pw.expose()));
        for r in user.rules(families) {
            c.arg(r);
        }
        c.query::<()>(&mut con)
            .map_err(|e| fail(format!("ACL SETUSER {user}"), e))?;
    }
    let existing: Vec<String> = redis::cmd("ACL")
        .arg("USERS")
        .query(&mut con)
        .map_err(|e| fail("ACL USERS".into(), e))?;
    for u in existing {
        if AclUser::is_per_lane(&u) && !users.iter().any(|(n, _)| n.to_string() == u) {
            redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&u)
                .query::<()>(&mut con)
                .map_err(|e| fail(format!("ACL DELUSER {u}"), e))?;
        }
    }
    redis::cmd("ACL")
        .arg("SAVE")
        .query::<()>(&mut con)
        .map_err(|e| fail("ACL SAVE".into(), e))?;
    for a in purged {
        let n = purge::purge(&mut con, a).map_err(|e| fail(format!("SCAN/UNLINK {a}:*"), e))?;
        if n > 0 {
            log::info!("lanes: deleted the {n} stream(s) left by agent {a}");
        }
    }
    for a in agents {
        for key in layout::streams(a, families).0 {
            let r: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&key)
                .arg(a.as_str())
                .arg("0")
                .arg("MKSTREAM")
                .query(&mut con);
            if let Err(e) = r {
                if e.code() != Some("BUSYGROUP") {
                    return Err(fail(format!("XGROUP CREATE {key}"), e));
                }
            }
        }
    }
    Ok(())
}
