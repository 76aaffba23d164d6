//! The live processes of this home found at start, grouped into runs, and
//! whose each run is. Pure: the scan is done by the caller.

use crate::supervise::marker::{Found, Marker};
use crate::supervise::procfs::ProcStat;
use std::collections::{BTreeMap, HashSet};

/// The live processes of one run.
#[derive(Debug, Clone)]
pub struct RunGroup {
    /// Its marker (of its first process that has one).
    pub marker: Option<Marker>,
    /// Its cgroup leaf, when it is in one.
    pub leaf: Option<String>,
    /// The app id its leaf's path names (`…/app-<id>/run-…`).
    pub leaf_app: Option<u64>,
    /// Every process.
    pub procs: Vec<ProcStat>,
}

/// Whose a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// App `id`: it holds the process the state records for it.
    Current(u64),
    /// App `id`, by its cgroup or marker, but not its recorded process.
    App(u64),
    /// An app this state does not know, by the marker's name.
    Orphan(String),
    /// Unmarked, in a cgroup of no app: left alone.
    Unknown,
}

/// What recovery knows of an app to tell its runs apart.
#[derive(Debug, Clone)]
pub struct Known {
    /// The app's id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Its recorded process (pid, start time), when recorded in this boot.
    pub recorded: Option<(u32, u64)>,
}

impl RunGroup {
    /// The run's main process: a root of the run's tree (its parent is not
    /// in the run), the earliest started; a session leader first among
    /// equals (the app's main process leads its session).
    pub fn main(&self) -> &ProcStat {
        let pids: HashSet<u32> = self.procs.iter().map(|p| p.pid).collect();
        self.procs
            .iter()
            .filter(|p| !pids.contains(&p.ppid))
            .min_by_key(|p| (p.start_ticks, p.session != p.pid, p.pid))
            .or_else(|| self.procs.first())
            .expect("a group has a process")
    }

    /// Its run id, for ordering runs of one app (newest is largest).
    pub fn order(&self) -> (i64, u64) {
        (
            self.marker.as_ref().map_or(-1, |m| m.run),
            self.main().start_ticks,
        )
    }

    /// Whose it is, among the apps `known`.
    pub fn owner(&self, known: &[Known]) -> Owner {
        if let Some(k) = known.iter().find(|k| {
            k.recorded.is_some_and(|(pid, start)| {
                self.procs
                    .iter()
                    .any(|p| p.pid == pid && p.start_ticks == start)
            })
        }) {
            return Owner::Current(k.id);
        }
        if let Some(id) = self.leaf_app.filter(|id| known.iter().any(|k| k.id == *id)) {
            return Owner::App(id);
        }
        match &self.marker {
            Some(m) => match known.iter().find(|k| k.id == m.app && k.name == m.name) {
                Some(k) => Owner::App(k.id),
                None => Owner::Orphan(m.name.clone()),
            },
            None => Owner::Unknown,
        }
    }
}

/// The app id in a leaf's path `…/app-<id>/run-<n>`.
fn leaf_app(leaf: &str) -> Option<u64> {
    let (app, _) = leaf.rsplit_once('/')?;
    let (_, name) = app.rsplit_once('/')?;
    name.strip_prefix("app-")?.parse().ok()
}

/// Groups processes into runs: by cgroup leaf where they are in one, else
/// by the run their marker names.
pub fn group(found: Vec<Found>) -> Vec<RunGroup> {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Key {
        Leaf(String),
        Run(u64, i64, String),
    }
    let mut groups: BTreeMap<Key, RunGroup> = BTreeMap::new();
    for f in found {
        let key = match (&f.cgroup, &f.marker) {
            (Some(leaf), _) => Key::Leaf(leaf.clone()),
            (None, Some(m)) => Key::Run(m.app, m.run, m.name.clone()),
            (None, None) => continue,
        };
        let g = groups.entry(key).or_insert_with(|| RunGroup {
            marker: None,
            leaf: f.cgroup.clone(),
            leaf_app: f.cgroup.as_deref().and_then(leaf_app),
            procs: Vec::new(),
        });
        if g.marker.is_none() {
            g.marker = f.marker;
        }
        g.procs.push(f.stat);
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, ppid: u32, session: u32, start: u64) -> ProcStat {
        ProcStat::sleeping(pid, ppid, session, session, start)
    }

    fn m(app: u64, run: i64, name: &str) -> Option<Marker> {
        Some(Marker {
            home: "h".into(),
            app,
            run,
            name: name.into(),
        })
    }

    fn found(stat: ProcStat, marker: Option<Marker>, cgroup: Option<&str>) -> Found {
        Found {
            stat,
            marker,
            cgroup: cgroup.map(str::to_string),
        }
    }

    #[test]
    fn runs_are_grouped_and_their_main_process_found() {
        let groups = group(vec![
            // A run of app 1: main 100, a worker, a double-forked daemon.
            found(p(101, 100, 100, 6), m(1, 5, "web"), None),
            found(p(100, 1, 100, 5), m(1, 5, "web"), None),
            found(p(102, 1, 102, 7), m(1, 5, "web"), None),
            // Another run of app 1 in a cgroup leaf, one process unmarked.
            found(p(200, 1, 200, 9), m(1, 6, "web"), Some("/h/app-1/run-2")),
            found(p(201, 200, 200, 9), None, Some("/h/app-1/run-2")),
            // Unmarked, no cgroup: not ours.
            found(p(300, 1, 300, 1), None, None),
        ]);
        assert_eq!(groups.len(), 2);
        let leaf = groups.iter().find(|g| g.leaf.is_some()).unwrap();
        assert_eq!(
            (leaf.leaf_app, leaf.main().pid, leaf.procs.len()),
            (Some(1), 200, 2)
        );
        let run = groups.iter().find(|g| g.leaf.is_none()).unwrap();
        assert_eq!((run.main().pid, run.procs.len()), (100, 3));
        assert!(leaf.order() > run.order());
    }

    #[test]
    fn owners() {
        let known = vec![
            Known {
                id: 1,
                name: "web".into(),
                recorded: Some((100, 5)),
            },
            Known {
                id: 2,
                name: "db".into(),
                recorded: None,
            },
        ];
        let g = |procs: Vec<ProcStat>, marker, leaf: Option<&str>| RunGroup {
            marker,
            leaf: leaf.map(str::to_string),
            leaf_app: leaf.and_then(leaf_app),
            procs,
        };
        assert_eq!(
            g(vec![p(100, 1, 100, 5)], m(9, 1, "x"), None).owner(&known),
            Owner::Current(1)
        );
        // Same pid, another process: not the recorded one.
        assert_eq!(
            g(vec![p(100, 1, 100, 6)], m(1, 2, "web"), None).owner(&known),
            Owner::App(1)
        );
        assert_eq!(
            g(vec![p(5, 1, 5, 6)], None, Some("/h/app-2/run-1")).owner(&known),
            Owner::App(2)
        );
        // An id this state gave to another name: an orphan of its name.
        assert_eq!(
            g(vec![p(5, 1, 5, 6)], m(2, 1, "cache"), None).owner(&known),
            Owner::Orphan("cache".into())
        );
        assert_eq!(
            g(vec![p(5, 1, 5, 6)], None, Some("/h/app-7/run-1")).owner(&known),
            Owner::Unknown
        );
    }
}
