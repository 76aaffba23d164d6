//! Processes as the supervisor sees them: what oxidepm-sys reads from /proc
//! (identity, parentage, sessions, resource use), plus whether a pid still
//! names the same process and which processes make up an app's tree.

pub use oxidepm_sys::procfs::{all, boot_id, page_size, stat, ticks_per_second, ProcStat};

/// Whether `pid` is still the process that started at `start_ticks`.
pub fn is_same_process(pid: u32, start_ticks: u64) -> bool {
    matches!(stat(pid), Some(s) if s.start_ticks == start_ticks && s.state != b'Z')
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
    fn reads_self() {
        let me = std::process::id();
        let s = stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert!(is_same_process(me, s.start_ticks));
        assert!(!is_same_process(me, s.start_ticks + 1));
        assert!(!boot_id().is_empty());
    }
}
