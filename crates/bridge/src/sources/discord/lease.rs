//! One gateway per bot across hosts: when several bridges share a Redis
//! (the tagged key form), only the holder of the lease
//! [`LEASE_KEY`] (its value the holder's host id, expiring after
//! [`TTL`] unless renewed) runs the bot's gateway session — a second
//! IDENTIFY with the same token would fight the first. Every bridge
//! delivers outboxes (REST) whether it holds the lease or not.
//!
//! Without EVAL the renewal is a read then an expiry: if the lease expired
//! between the two, the expiry lengthens the new holder's lease, which is
//! alive anyway; the old holder sees it is not its own at the next renewal
//! and stops its session. A holder that cannot reach Redis for half the
//! TTL stops too, so that by the time another can take the lease, it has.

use crate::conn::Con;
use crate::shutdown::Shutdown;
use std::future::Future;
use std::time::{Duration, Instant};

/// The lease of the gateway.
pub const LEASE_KEY: &str = "bridge:discord:gateway";
/// How long a lease lasts unless renewed.
pub const TTL: Duration = Duration::from_secs(10);
/// How often it is renewed (and tried for by the others).
const EVERY: Duration = Duration::from_secs(2);

/// Takes the lease if nobody holds it.
async fn acquire(con: &mut Con, host: &str) -> redis::RedisResult<bool> {
    let r: Option<String> = redis::cmd("SET")
        .arg(LEASE_KEY)
        .arg(host)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(con)
        .await?;
    Ok(r.is_some())
}

/// Renews the lease if it is `host`'s; false if another holds it.
async fn renew(con: &mut Con, host: &str) -> redis::RedisResult<bool> {
    let holder: Option<String> = redis::cmd("GET").arg(LEASE_KEY).query_async(con).await?;
    if holder.as_deref() != Some(host) {
        return Ok(false);
    }
    redis::cmd("PEXPIRE")
        .arg(LEASE_KEY)
        .arg(TTL.as_millis() as u64)
        .query_async::<()>(con)
        .await?;
    Ok(true)
}

/// Lets the lease go at once (a bridge stopping cleanly), if it is ours.
async fn release(con: &mut Con, host: &str) {
    let holder: Option<String> = redis::cmd("GET")
        .arg(LEASE_KEY)
        .query_async(con)
        .await
        .unwrap_or(None);
    if holder.as_deref() == Some(host) {
        let _ = redis::cmd("PEXPIRE")
            .arg(LEASE_KEY)
            .arg(1)
            .query_async::<()>(con)
            .await;
    }
}

/// Runs `session` whenever this bridge (`host`) holds the lease, stopping
/// it when the lease is lost, until `shutdown`.
pub async fn hold<F, Fut, E>(
    con: Con,
    host: String,
    mut shutdown: Shutdown,
    mut session: F,
) -> Result<(), E>
where
    F: FnMut(Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut con = con;
    loop {
        // Wait for the lease.
        loop {
            if shutdown.is_set() {
                return Ok(());
            }
            match acquire(&mut con, &host).await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => log::warn!("discord: cannot ask for the gateway lease: {e}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = shutdown.wait() => return Ok(()),
            }
        }
        log::info!("discord: this bridge ({host}) holds the gateway lease; starting the session");
        let (trigger, child) = Shutdown::new();
        let mut keeper_con = con.clone();
        let mut outer = shutdown.clone();
        let keeper = async {
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(EVERY) => {}
                    _ = outer.wait() => break,
                }
                match renew(&mut keeper_con, &host).await {
                    Ok(true) => renewed = Instant::now(),
                    Ok(false) => {
                        log::warn!("discord: the gateway lease is another bridge's now; stopping this session");
                        break;
                    }
                    Err(e) if renewed.elapsed() >= TTL / 2 => {
                        log::warn!(
                            "discord: cannot renew the gateway lease ({e}); stopping this session"
                        );
                        break;
                    }
                    Err(e) => log::warn!("discord: cannot renew the gateway lease yet: {e}"),
                }
            }
            trigger.trigger();
        };
        let run = session(child);
        tokio::pin!(run);
        tokio::pin!(keeper);
        let result = tokio::select! {
            r = &mut run => Some(r),
            _ = &mut keeper => None,
        };
        let result = match result {
            Some(r) => r,
            // The keeper told the session to stop: let it finish.
            None => run.await,
        };
        if shutdown.is_set() || result.is_err() {
            release(&mut con, &host).await;
            return result;
        }
        // The lease was lost (or the session ended): wait for it again.
    }
}
