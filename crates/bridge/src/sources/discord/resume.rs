//! The gateway session, kept in Redis (`bridge:discord:session`: the
//! session id, the sequence number of the last message published and the
//! resume URL), so that the next bridge RESUMEs it and Discord replays
//! what came after — a restart, or a bridge killed with SIGKILL, loses
//! nothing.
//!
//! The publishing task saves it as it goes ([`Saver`]): after the messages
//! it published, at most every [`SAVE_EVERY`] (a bounded write rate), and
//! when it stops. The sequence saved is never past a message not yet
//! published, so a replay may repeat messages (dropped by
//! `super::dedupe`) but never skips one. A session Discord no longer knows
//! is refused (INVALID_SESSION) and twilight identifies anew: what was sent
//! between the last save and the new session is then not replayed by
//! Discord, and the refused resume is counted (`discord_resume_refused` in
//! `bridge:stats`).

use crate::conn::Con;
use crate::stats::{Counter, STATS_KEY};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use twilight_gateway::Session;

/// The hash the session is kept in.
pub const SESSION_KEY: &str = "bridge:discord:session";

/// The shortest time between two saves.
pub const SAVE_EVERY: Duration = Duration::from_millis(250);

/// The `bridge:stats` field counting resumes the gateway refused.
pub const RESUME_REFUSED: &str = "discord_resume_refused";

/// A saved session.
#[derive(Debug)]
pub struct Saved {
    /// The session and the last sequence number taken.
    pub session: Session,
    /// Where to resume it.
    pub resume_url: String,
}

/// Where a session stood: resuming from here replays what came after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The session id.
    pub session: Arc<str>,
    /// The sequence number of the last dispatch taken.
    pub seq: u64,
    /// Where to resume it.
    pub resume_url: Arc<str>,
}

/// The saved session (left in Redis: a bridge killed before its first save
/// resumes from it again); `None` when there is none or it cannot be read.
pub async fn load(con: &mut Con) -> Option<Saved> {
    let h: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(SESSION_KEY)
        .query_async(con)
        .await
        .ok()?;
    if h.is_empty() {
        return None;
    }
    let sequence = h.get("sequence")?.parse().ok()?;
    let id = h.get("session_id")?.clone();
    let resume_url = h.get("resume_url")?.clone();
    let url_ok = resume_url.starts_with("ws://") || resume_url.starts_with("wss://");
    (!id.is_empty() && url_ok).then(|| Saved {
        session: Session::new(sequence, id),
        resume_url,
    })
}

/// What the publishing task owes Redis: the session's place, and the
/// messages it gave up (counted in `lost` once Redis takes it).
pub struct Saver {
    con: Con,
    mark: Option<Mark>,
    saved: Option<Mark>,
    lost: i64,
    refused: i64,
    last: Option<Instant>,
}

impl Saver {
    /// Nothing owed yet.
    pub fn new(con: Con) -> Saver {
        Saver {
            con,
            mark: None,
            saved: None,
            lost: 0,
            refused: 0,
            last: None,
        }
    }

    /// Everything up to `mark` is published (or given up).
    pub fn advance(&mut self, mark: Mark) {
        self.mark = Some(mark);
    }

    /// One message given up.
    pub fn lost(&mut self) {
        self.lost += 1;
    }

    /// A resume of the saved session was refused.
    pub fn resume_refused(&mut self) {
        self.refused += 1;
    }

    /// Whether something is owed.
    pub fn dirty(&self) -> bool {
        self.mark != self.saved || self.lost > 0 || self.refused > 0
    }

    /// How long until a save is allowed (zero: now).
    pub fn due_in(&self) -> Duration {
        self.last
            .map_or(Duration::ZERO, |t| SAVE_EVERY.saturating_sub(t.elapsed()))
    }

    /// Saves what is owed if the last save is far enough back.
    pub async fn maybe_save(&mut self) {
        if self.dirty() && self.due_in().is_zero() {
            self.save().await;
        }
    }

    /// Saves what is owed, in one pipeline; on failure it stays owed.
    pub async fn save(&mut self) {
        if !self.dirty() {
            return;
        }
        self.last = Some(Instant::now());
        let mut pipe = redis::pipe();
        if let Some(m) = self
            .mark
            .as_ref()
            .filter(|m| Some(*m) != self.saved.as_ref())
        {
            pipe.cmd("HSET")
                .arg(SESSION_KEY)
                .arg("session_id")
                .arg(&*m.session)
                .arg("sequence")
                .arg(m.seq)
                .arg("resume_url")
                .arg(&*m.resume_url)
                .ignore();
        }
        // On a cluster the counters are in another slot than the session:
        // a write of their own, after it.
        let mut stats = redis::pipe();
        let counters = if self.con.is_cluster() {
            &mut stats
        } else {
            &mut pipe
        };
        if self.lost > 0 {
            Counter::Lost.add_to(counters, self.lost);
        }
        if self.refused > 0 {
            counters
                .cmd("HINCRBY")
                .arg(STATS_KEY)
                .arg(RESUME_REFUSED)
                .arg(self.refused)
                .ignore();
        }
        let mut written = if pipe.is_empty() {
            Ok(())
        } else {
            pipe.query_async::<()>(&mut self.con).await
        };
        if written.is_ok() && !stats.is_empty() {
            written = stats.query_async::<()>(&mut self.con).await;
        }
        match written {
            Ok(()) => {
                self.saved = self.mark.clone();
                self.lost = 0;
                self.refused = 0;
            }
            Err(e) => log::warn!(
                "discord: cannot save the gateway session ({e}); trying again in {} ms",
                SAVE_EVERY.as_millis()
            ),
        }
    }
}
