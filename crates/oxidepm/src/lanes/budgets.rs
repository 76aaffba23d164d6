//! The memory bounds of the lanes: Redis's `maxmemory` and each agent's
//! quota, from `[lanes]` and the host.
//!
//! Redis holds messages in flight, not an archive: what the bridge has
//! delivered is removed, so its working set is the backlog of slow
//! consumers. The default `maxmemory` is an eighth of the host's memory
//! (the rest is the agents', whose work this is) and at most 1 GiB (a
//! backlog beyond that means a consumer is broken, and a larger bound only
//! makes the append-only file and its rewrites slower); at least 32 MiB,
//! so that a small host still has room for a few large messages. Redis
//! runs with `noeviction`: at the bound, writes fail with `-OOM` and
//! nothing is thrown away; reads, acknowledgements and deletions go on.
//!
//! The agents' outboxes together get at most half of `maxmemory`, the
//! outbox budget; the other half is a reserve no outbox can take, for
//! what must go on when every agent's deliveries stall at once (one sink
//! down is enough): the inboxes the bridge writes, the responders'
//! replies, the bridge's own keys, Redis's buffers. Each agent's quota is
//! its share of the budget, `budget / agents`, so the agents at their
//! quotas together still leave a quiet agent its share and the reserve.
//! `[lanes] agent_quota` lowers every agent's quota; it never raises one
//! above its share (a value above the whole budget is refused when
//! daemon.toml is read). The shares change as agents come and go: the
//! lane proxy applies them to its open connections too. Between two of
//! its measurements the proxy counts an XADD by its size, and Redis keeps
//! more (allocator rounding, the stream's own nodes): an agent may pass
//! its quota by that much until the next measurement, which the reserve
//! also absorbs.

/// What the bounds are made from: `[lanes] maxmemory` and `agent_quota`
/// as daemon.toml gives them (`LanesSettings` converts into it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    /// `maxmemory`, bytes.
    pub maxmemory: Option<u64>,
    /// `agent_quota`, bytes (0: none).
    pub agent_quota: Option<u64>,
}

/// The most the default `maxmemory` is.
const DEFAULT_CEILING: u64 = 1 << 30;
/// The least the default `maxmemory` is.
const DEFAULT_FLOOR: u64 = 32 << 20;
/// Used when the host's memory cannot be read.
const FALLBACK: u64 = 256 << 20;
/// The smallest `maxmemory` accepted: Redis itself takes a few MiB.
pub const MIN_MAXMEMORY: u64 = 16 << 20;

/// `maxmemory` for the private Redis: `[lanes] maxmemory`, else the
/// default for this host.
pub fn maxmemory(settings: impl Into<Asked>) -> u64 {
    settings
        .into()
        .maxmemory
        .unwrap_or_else(|| default_maxmemory(host_memory()))
}

/// The outboxes' share of `maxmemory`: one half (see above).
pub const OUTBOX_SHARE: u64 = 2;

/// The bytes every agent's outboxes may hold together.
pub fn outbox_budget(settings: impl Into<Asked>) -> u64 {
    maxmemory(settings) / OUTBOX_SHARE
}

/// The quota of each agent's outboxes with `agents` agents: its share of
/// the outbox budget, or `[lanes] agent_quota` if lower (0: none).
pub fn agent_quota(settings: impl Into<Asked>, agents: usize) -> Option<u64> {
    let settings: Asked = settings.into();
    let share = (outbox_budget(settings) / agents.max(1) as u64).max(1);
    match settings.agent_quota {
        Some(0) => None,
        Some(q) => Some(q.min(share)),
        None => Some(share),
    }
}

/// What `oxidepm lanes` says when `[lanes] agent_quota` is more than an
/// agent's share with `agents` agents, and so is not what holds.
pub fn quota_note(settings: impl Into<Asked>, agents: usize) -> Option<String> {
    let settings: Asked = settings.into();
    let q = settings.agent_quota.filter(|q| *q > 0)?;
    let held = agent_quota(settings, agents)?;
    (held < q).then(|| {
        format!(
            "lanes.agent_quota = {q} bytes is more than each agent's share of the outbox \
             budget ({} bytes, half of maxmemory, for {agents} agents): each agent's outboxes \
             hold at most {held} bytes; lower agent_quota to {held} or less to make it what \
             holds, or raise maxmemory",
            outbox_budget(settings)
        )
    })
}

/// The default `maxmemory` on a host with `total` bytes of memory (`None`:
/// unknown).
fn default_maxmemory(total: Option<u64>) -> u64 {
    match total {
        Some(t) => (t / 8).clamp(DEFAULT_FLOOR, DEFAULT_CEILING),
        None => FALLBACK,
    }
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line["MemTotal:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::settings::LanesSettings;

    #[test]
    fn defaults_follow_the_host_within_bounds() {
        assert_eq!(default_maxmemory(Some(24 << 30)), 1 << 30);
        assert_eq!(default_maxmemory(Some(4 << 30)), 512 << 20);
        assert_eq!(default_maxmemory(Some(128 << 20)), 32 << 20);
        assert_eq!(default_maxmemory(None), 256 << 20);
        assert!(host_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn quotas_share_the_outbox_budget() {
        let s: LanesSettings = toml::from_str("maxmemory = 67108864").unwrap();
        assert_eq!(maxmemory(&s), 64 << 20);
        assert_eq!(outbox_budget(&s), 32 << 20);
        assert_eq!(agent_quota(&s, 0), Some(32 << 20));
        assert_eq!(agent_quota(&s, 1), Some(32 << 20));
        assert_eq!(agent_quota(&s, 8), Some(4 << 20));
        // Ten agents at their quotas leave the eleventh its share.
        let q = agent_quota(&s, 11).unwrap();
        assert!(10 * q + q <= outbox_budget(&s));
        let s: LanesSettings = toml::from_str("agent_quota = 0").unwrap();
        assert_eq!(agent_quota(&s, 3), None);
        let s: LanesSettings = toml::from_str("maxmemory = 67108864\nagent_quota = 1000").unwrap();
        assert_eq!(agent_quota(&s, 2), Some(1000));
        let s: LanesSettings =
            toml::from_str("maxmemory = 67108864\nagent_quota = 16777216").unwrap();
        assert_eq!(agent_quota(&s, 1), Some(16 << 20));
        assert_eq!(agent_quota(&s, 4), Some(8 << 20), "never above its share");
        assert!(quota_note(&s, 1).is_none());
        let note = quota_note(&s, 4).unwrap();
        assert!(
            note.contains("16777216") && note.contains("8388608"),
            "{note}"
        );
    }

    #[test]
    fn a_quota_above_the_whole_budget_is_refused_with_the_numbers() {
        let s: LanesSettings =
            toml::from_str("maxmemory = 67108864\nagent_quota = 33554433").unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(
            e.contains("33554433") && e.contains("33554432") && e.contains("67108864"),
            "{e}"
        );
        assert!(e.contains("Lower agent_quota"), "{e}");
        let s: LanesSettings =
            toml::from_str("maxmemory = 67108864\nagent_quota = 33554432").unwrap();
        s.check().unwrap();
    }
}
