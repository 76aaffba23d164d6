//! The gateway session of a cleanly stopped bridge, kept in Redis
//! (`bridge:discord:session`: the session id, the last sequence number
//! taken and the resume URL), so that the next bridge RESUMEs it and
//! Discord replays what was sent meanwhile — a restart loses nothing.
//!
//! Saved only after every message received was published, and taken (read
//! and removed) at start, so it is used once. A session Discord no longer
//! knows is refused (INVALID_SESSION) and twilight identifies anew; after a
//! crash there is nothing saved and the new session starts from now.

use redis::aio::ConnectionManager;
use std::collections::HashMap;
use twilight_gateway::Session;

/// The hash the session is kept in.
pub const SESSION_KEY: &str = "bridge:discord:session";

/// A saved session.
#[derive(Debug)]
pub struct Saved {
    /// The session and the last sequence number taken.
    pub session: Session,
    /// Where to resume it.
    pub resume_url: String,
}

/// The saved session, removed from Redis; `None` when there is none or it
/// cannot be read.
pub async fn take(con: &mut ConnectionManager) -> Option<Saved> {
    let h: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(SESSION_KEY)
        .query_async(con)
        .await
        .ok()?;
    if h.is_empty() {
        return None;
    }
    let _: Result<i64, _> = redis::cmd("HDEL")
        .arg(SESSION_KEY)
        .arg("session_id")
        .arg("sequence")
        .arg("resume_url")
        .query_async(con)
        .await;
    let sequence = h.get("sequence")?.parse().ok()?;
    let id = h.get("session_id")?.clone();
    let resume_url = h.get("resume_url")?.clone();
    let url_ok = resume_url.starts_with("ws://") || resume_url.starts_with("wss://");
    (!id.is_empty() && url_ok).then(|| Saved {
        session: Session::new(sequence, id),
        resume_url,
    })
}

/// Saves the session for the next bridge.
pub async fn save(con: &mut ConnectionManager, session: &Session, resume_url: &str) {
    let r: redis::RedisResult<i64> = redis::cmd("HSET")
        .arg(SESSION_KEY)
        .arg("session_id")
        .arg(session.id())
        .arg("sequence")
        .arg(session.sequence())
        .arg("resume_url")
        .arg(resume_url)
        .query_async(con)
        .await;
    if let Err(e) = r {
        log::warn!(
            "discord: cannot save the gateway session ({e}); the next start identifies anew"
        );
    }
}
