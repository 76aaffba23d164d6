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
//! The default quota of one agent's outboxes is an eighth of `maxmemory`:
//! one agent that writes faster than its outboxes drain stops there,
//! leaving the rest to the other agents and to the inboxes.

use super::settings::LanesSettings;

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
pub fn maxmemory(settings: &LanesSettings) -> u64 {
    settings
        .maxmemory
        .unwrap_or_else(|| default_maxmemory(host_memory()))
}

/// The quota of each agent's outboxes: `[lanes] agent_quota` (0: none),
/// else an eighth of `maxmemory`.
pub fn agent_quota(settings: &LanesSettings) -> Option<u64> {
    match settings.agent_quota {
        Some(0) => None,
        Some(q) => Some(q),
        None => Some((maxmemory(settings) / 8).max(1)),
    }
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

    #[test]
    fn defaults_follow_the_host_within_bounds() {
        assert_eq!(default_maxmemory(Some(24 << 30)), 1 << 30);
        assert_eq!(default_maxmemory(Some(4 << 30)), 512 << 20);
        assert_eq!(default_maxmemory(Some(128 << 20)), 32 << 20);
        assert_eq!(default_maxmemory(None), 256 << 20);
        assert!(host_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn settings_win_and_zero_turns_the_quota_off() {
        let s: LanesSettings = toml::from_str("maxmemory = 67108864").unwrap();
        assert_eq!(maxmemory(&s), 64 << 20);
        assert_eq!(agent_quota(&s), Some(8 << 20));
        let s: LanesSettings = toml::from_str("agent_quota = 0").unwrap();
        assert_eq!(agent_quota(&s), None);
        let s: LanesSettings = toml::from_str("agent_quota = 1000").unwrap();
        assert_eq!(agent_quota(&s), Some(1000));
    }
}
