//! What the benchmark reads from /proc: process stats, memory, command lines.

use std::fs;

pub use oxidepm_sys::procfs::{all, stat, ProcStat as Stat};

/// Direct children of `ppid` (zombies included), from
/// `/proc/<ppid>/task/*/children`, or by scanning every process's parent
/// when the kernel lacks those files (CONFIG_PROC_CHILDREN).
pub fn children(ppid: u32) -> Vec<Stat> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{ppid}/task")) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = Vec::new();
    for t in tasks.flatten() {
        match fs::read_to_string(t.path().join("children")) {
            Ok(text) => pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            ),
            Err(_) => return all().into_iter().filter(|p| p.ppid == ppid).collect(),
        }
    }
    pids.into_iter()
        .filter_map(stat)
        .filter(|p| p.ppid == ppid)
        .collect()
}

/// Every descendant of `root` (not `root` itself).
pub fn descendants(root: u32) -> Vec<Stat> {
    let procs = all();
    let mut found: Vec<Stat> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                frontier.push(p.pid);
                found.push(*p);
            }
        }
    }
    found
}

/// The process still runs (exists, is not a zombie, and is the same process).
pub fn alive(p: &Stat) -> bool {
    stat(p.pid).is_some_and(|s| s.state != b'Z' && s.start_ticks == p.start_ticks)
}

/// The arguments of a process (empty for zombies and kernel threads).
pub fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, ...), in bytes.
pub fn status_bytes(pid: u32, key: &str) -> Option<u64> {
    kb_field(
        &fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        key,
    )
}

/// Proportional set size (shared pages divided among their users), in bytes.
pub fn pss_bytes(pid: u32) -> Option<u64> {
    kb_field(
        &fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?,
        "Pss",
    )
}

fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn ticks_per_second() -> f64 {
    oxidepm_sys::procfs::ticks_per_second() as f64
}

/// How many processes the host has now.
pub fn count() -> usize {
    fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|s| s.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}
