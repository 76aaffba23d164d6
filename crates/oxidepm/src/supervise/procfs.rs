//! Processes as the supervisor sees them: what oxidepm-sys reads from /proc
//! (identity, parentage, sessions, resource use), plus whether a pid still
//! names the same process and which processes make up an app's tree or its
//! recorded sessions.

pub use oxidepm_sys::procfs::{all, boot_id, page_size, stat, ticks_per_second, ProcStat};

/// Whether `pid` is still the process that started at `start_ticks`.
pub fn is_same_process(pid: u32, start_ticks: u64) -> bool {
    matches!(stat(pid), Some(s) if s.start_ticks == start_ticks && s.state != b'Z')
}

/// A snapshot of /proc indexed by session and by parent, so that the
/// trees of every app are found in one pass over it (a walk per app over
/// every process made the sampler's cost grow with apps × processes).
pub struct Snapshot<'a> {
    procs: &'a [ProcStat],
    by_pid: std::collections::HashMap<u32, usize>,
    by_session: std::collections::HashMap<u32, Vec<usize>>,
    children: std::collections::HashMap<u32, Vec<usize>>,
}

impl<'a> Snapshot<'a> {
    /// Indexes `procs`.
    pub fn new(procs: &'a [ProcStat]) -> Snapshot<'a> {
        let mut s = Snapshot {
            procs,
            by_pid: std::collections::HashMap::with_capacity(procs.len()),
            by_session: std::collections::HashMap::new(),
            children: std::collections::HashMap::new(),
        };
        for (i, p) in procs.iter().enumerate() {
            s.by_pid.insert(p.pid, i);
            s.by_session.entry(p.session).or_default().push(i);
            s.children.entry(p.ppid).or_default().push(i);
        }
        s
    }

    /// The processes in session `root` or descending from `root`. An app
    /// is started in its own session, so its session catches children that
    /// changed process group; the parent walk catches children that started
    /// a session of their own.
    pub fn tree(&self, root: u32) -> Vec<&'a ProcStat> {
        let mut seen: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let mut out: Vec<&'a ProcStat> = Vec::new();
        let mut push = |i: usize, out: &mut Vec<&'a ProcStat>| {
            let p = &self.procs[i];
            if seen.insert(p.pid) {
                out.push(p);
            }
        };
        if let Some(&i) = self.by_pid.get(&root) {
            push(i, &mut out);
        }
        for &i in self.by_session.get(&root).into_iter().flatten() {
            push(i, &mut out);
        }
        let mut next = 0;
        while next < out.len() {
            let parent = out[next].pid;
            for &i in self.children.get(&parent).into_iter().flatten() {
                push(i, &mut out);
            }
            next += 1;
        }
        out
    }
}

/// A recorded session: its id and its leader's start time.
pub type Session = (u32, u64);

/// Whether recorded session `(sid, leader_start)` can still be the one
/// recorded: its leader is gone or is the same process. (Pid `sid` cannot
/// be reused while any process is in the session; once it names another
/// process, the recorded session is over.)
pub fn session_current(procs: &[ProcStat], (sid, leader_start): Session) -> bool {
    procs
        .iter()
        .find(|p| p.pid == sid)
        .is_none_or(|l| l.start_ticks == leader_start)
}

/// Pids of the live processes in the recorded `sessions` that are still
/// current, and of their descendants, from a snapshot of /proc; never the
/// daemon itself. (The daemon uses the indexed `snapshot::Snapshot::members`;
/// this plain walk is what its tests hold it to.)
#[cfg(test)]
pub fn members(procs: &[ProcStat], sessions: &[Session]) -> Vec<u32> {
    let sids: Vec<u32> = sessions
        .iter()
        .filter(|s| session_current(procs, **s))
        .map(|s| s.0)
        .collect();
    let me = std::process::id();
    let mut out: Vec<u32> = procs
        .iter()
        .filter(|p| sids.contains(&p.session) && p.pid != me)
        .map(|p| p.pid)
        .collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        for p in procs {
            if p.ppid == parent && p.pid != me && !out.contains(&p.pid) {
                out.push(p.pid);
            }
        }
        i += 1;
    }
    out.retain(|pid| procs.iter().any(|p| p.pid == *pid && p.state != b'Z'));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_its_session_and_its_descendants() {
        let p = ProcStat::sleeping;
        let procs = [
            p(10, 1, 10, 10, 1),
            p(11, 10, 11, 10, 2),
            // A session of its own, under the app.
            p(12, 11, 12, 12, 3),
            p(14, 12, 12, 12, 4),
            // Re-parented to init, still in the app's session.
            p(13, 1, 13, 10, 5),
            p(20, 1, 20, 20, 6),
        ];
        let s = Snapshot::new(&procs);
        let mut pids: Vec<u32> = s.tree(10).iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, [10, 11, 12, 13, 14]);
        assert_eq!(s.tree(20).len(), 1);
        assert!(s.tree(99).is_empty());
    }

    fn p(pid: u32, ppid: u32, session: u32, start: u64) -> ProcStat {
        ProcStat::sleeping(pid, ppid, session, session, start)
    }

    #[test]
    fn members_of_recorded_sessions() {
        // 10 leads session 10; 11 stayed in it; 12 left it for a session
        // of its own but is 11's child; 20 is unrelated.
        let procs = [
            p(10, 1, 10, 100),
            p(11, 10, 10, 101),
            p(12, 11, 12, 102),
            p(20, 1, 20, 50),
        ];
        let mut m = members(&procs, &[(10, 100)]);
        m.sort();
        assert_eq!(m, vec![10, 11, 12]);
        // The leader exited: its session is still the app's.
        assert_eq!(members(&procs[1..], &[(10, 100)]), vec![11, 12]);
        // Pid 10 now names another process: the session is over.
        let reused = [p(10, 1, 10, 999), p(13, 10, 10, 1000)];
        assert!(members(&reused, &[(10, 100)]).is_empty());
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
