//! The bridge's counters: fields of the Redis hash `bridge:stats`, each
//! raised with HINCRBY in the same pipeline as the write it counts; and
//! its status (`bridge:status`): whether its last reload failed, and how
//! each source is.

use crate::conn::Con;

pub use oxidepm_lanes::stream_key::{STATS_KEY, UNROUTED_KEY};

/// One counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Inbound messages written to an agent's inbox.
    Routed,
    /// Inbound messages written to `bridge:unrouted`.
    Unrouted,
    /// Outbox entries delivered and acknowledged.
    Delivered,
    /// Delivery tries that failed and were tried again.
    Retried,
    /// Delivery tries the far end asked to wait for (a rate limit): sent
    /// again once it allows, not counted as a failed try.
    Waited,
    /// Outbox entries moved to a dead-letter stream.
    Dead,
    /// Of those, entries over `max_entry_bytes`: their fields were not
    /// copied, and are gone once the outbox is trimmed.
    TooLarge,
    /// Of those, entries that could not be delivered as they are (not
    /// UTF-8, malformed): copied as they are.
    Malformed,
    /// Delivered (or dead-lettered) entries trimmed from the outboxes.
    Trimmed,
    /// Milliseconds from each delivered entry's XADD to its delivery,
    /// added up (with `delivered`, the mean delivery latency).
    DeliveryMs,
    /// Inbound messages given up: Redis did not take them in the tries a
    /// source makes (the discord source's `publish_attempts`).
    Lost,
}

impl Counter {
    /// Its field in `bridge:stats`.
    pub fn field(self) -> &'static str {
        match self {
            Counter::Routed => "routed",
            Counter::Unrouted => "unrouted",
            Counter::Delivered => "delivered",
            Counter::Retried => "retried",
            Counter::Waited => "waited",
            Counter::Dead => "dead",
            Counter::TooLarge => "too_large",
            Counter::Malformed => "malformed",
            Counter::Trimmed => "trimmed",
            Counter::DeliveryMs => "delivery_ms",
            Counter::Lost => "lost",
        }
    }

    /// Adds `HINCRBY bridge:stats <field> n` to a pipeline.
    pub fn add_to(self, pipe: &mut redis::Pipeline, n: i64) {
        pipe.cmd("HINCRBY")
            .arg(STATS_KEY)
            .arg(self.field())
            .arg(n)
            .ignore();
    }
}

/// Records in `bridge:status` that the last reload failed (with why), or
/// that it did not.
pub async fn record_reload(con: &mut Con, error: Option<&str>) -> redis::RedisResult<()> {
    use oxidepm_lanes::bridge_config::STATUS_KEY;
    let cmd = match error {
        Some(e) => {
            let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let mut c = redis::cmd("HSET");
            c.arg(STATUS_KEY)
                .arg("reload_error")
                .arg(e)
                .arg("reload_failed_at")
                .arg(at);
            c
        }
        None => {
            let mut c = redis::cmd("HDEL");
            c.arg(STATUS_KEY)
                .arg("reload_error")
                .arg("reload_failed_at");
            c
        }
    };
    cmd.query_async(con).await
}

/// Raises one counter on its own (when nothing else is written).
pub async fn bump(con: &mut Con, c: Counter, n: i64) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    c.add_to(&mut pipe, n);
    pipe.query_async(con).await
}

/// Records in `bridge:status` that source `name` runs (`failed`: `None`),
/// or that it stopped and why.
pub async fn record_source(
    con: &mut Con,
    name: &str,
    failed: Option<&str>,
) -> redis::RedisResult<()> {
    use oxidepm_lanes::bridge_config::STATUS_KEY;
    use oxidepm_lanes::source_status as st;
    let mut pipe = redis::pipe();
    match failed {
        Some(why) => {
            let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            pipe.cmd("HSET")
                .arg(STATUS_KEY)
                .arg(st::state(name))
                .arg(st::FAILED)
                .arg(st::error(name))
                .arg(why)
                .arg(st::failed_at(name))
                .arg(at)
                .ignore();
        }
        None => {
            pipe.cmd("HSET")
                .arg(STATUS_KEY)
                .arg(st::state(name))
                .arg(st::UP)
                .ignore();
            pipe.cmd("HDEL")
                .arg(STATUS_KEY)
                .arg(st::error(name))
                .arg(st::failed_at(name))
                .ignore();
        }
    }
    pipe.query_async(con).await
}

/// Removes from `bridge:status` what an earlier run said of its sources
/// (one this run no longer has must not look up, or failed).
pub async fn clear_sources(con: &mut Con) -> redis::RedisResult<()> {
    use oxidepm_lanes::bridge_config::STATUS_KEY;
    // HGETALL: the bridge's ACL has no HKEYS, and the hash is small.
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(STATUS_KEY)
        .query_async(con)
        .await?;
    let old: Vec<&String> = fields
        .keys()
        .filter(|f| f.starts_with(oxidepm_lanes::source_status::PREFIX))
        .collect();
    if old.is_empty() {
        return Ok(());
    }
    redis::cmd("HDEL")
        .arg(STATUS_KEY)
        .arg(old)
        .query_async(con)
        .await
}
