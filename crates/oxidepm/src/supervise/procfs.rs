//! Reading processes from /proc: identity (pid + start time + boot id),
//! parentage, sessions, and resource use.

use std::fs;

/// The fields of /proc/<pid>/stat that oxidepm uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: u32,
    /// One-letter state (R, S, Z, ...).
    pub state: u8,
    /// Parent pid.
    pub ppid: u32,
    /// Process group.
    pub pgrp: u32,
    /// Session id.
    pub session: u32,
    /// User + system CPU time in clock ticks.
    pub cpu_ticks: u64,
    /// Start time in clock ticks since boot: with the boot id, it tells a
    /// process apart from a later one that got the same pid.
    pub start_ticks: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
}

/// Reads /proc/<pid>/stat; `None` if the process does not exist.
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of a /proc/<pid>/stat file.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name is in parentheses and may itself contain ") ", so
    // fields are counted from the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    // rest[0] is field 3 (state).
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        pid,
        state: *rest.first()?.as_bytes().first()?,
        ppid: field(4)? as u32,
        pgrp: field(5)? as u32,
        session: field(6)? as u32,
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        rss_pages: field(24)?,
    })
}

/// Every process currently visible in /proc.
pub fn all() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: u32 = name.to_str()?.parse().ok()?;
        stat(pid)
    })
    .collect()
}

/// The kernel's boot id (changes at every boot).
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether `pid` is still the process that started at `start_ticks`.
pub fn is_same_process(pid: u32, start_ticks: u64) -> bool {
    matches!(stat(pid), Some(s) if s.start_ticks == start_ticks && s.state != b'Z')
}

/// Clock ticks per second (USER_HZ).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Pids of the processes in session `sid` or descending from `root`, from a
/// snapshot of /proc. An app is started in its own session, so its session
/// catches children that changed process group; the parent walk catches
/// children that started a session of their own.
pub fn tree(procs: &[ProcStat], root: u32) -> Vec<u32> {
    let mut out: Vec<u32> = procs
        .iter()
        .filter(|p| p.session == root || p.pid == root)
        .map(|p| p.pid)
        .collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        for p in procs {
            if p.ppid == parent && !out.contains(&p.pid) {
                out.push(p.pid);
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parens() {
        let s = "123 (a) b) S 1 123 123 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 777 1000 33 18446744073709551615";
        let p = parse_stat(s).unwrap();
        assert_eq!(p.pid, 123);
        assert_eq!(p.state, b'S');
        assert_eq!(p.ppid, 1);
        assert_eq!(p.session, 123);
        assert_eq!(p.cpu_ticks, 11);
        assert_eq!(p.start_ticks, 777);
        assert_eq!(p.rss_pages, 33);
    }

    #[test]
    fn reads_self() {
        let me = std::process::id();
        let s = stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert!(is_same_process(me, s.start_ticks));
        assert!(!is_same_process(me, s.start_ticks + 1));
        assert!(!boot_id().is_empty());
    }
}
