//! The run marker: every process the daemon starts for an app carries
//! `OXIDEPM_RUN=<home id>:<app id>:<run id>:<app name>` in its environment,
//! and its children inherit it. Recovery finds with it the live processes
//! of this home that the state does not know (a run forked by a daemon
//! killed before it wrote the pid, a double-forked descendant, a state.db
//! that was lost), also where no cgroup holds them.
//!
//! The home id is the hash that names the home's cgroup (16 hex digits of
//! the canonical home path), so daemons of other homes never take each
//! other's processes. The app name comes last, so it is read whole; it
//! lets a process whose app id the state no longer knows be matched to the
//! app of that name when one is defined again.

use super::procfs::{self, ProcStat};
use std::path::Path;

/// The environment variable of the marker.
pub const VAR: &str = "OXIDEPM_RUN";

/// What a marker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The home's id (see [`home_id`]).
    pub home: String,
    /// The app's id when the process was started.
    pub app: u64,
    /// The run's id (a row of `runs`).
    pub run: i64,
    /// The app's name.
    pub name: String,
}

/// The id of the home at `root` in markers.
pub fn home_id(root: &Path) -> String {
    let name = super::cgroup::home_name(root);
    name.trim_start_matches("oxidepm-").to_string()
}

impl Marker {
    /// The variable's value.
    pub fn value(&self) -> String {
        format!("{}:{}:{}:{}", self.home, self.app, self.run, self.name)
    }

    /// Reads a variable's value; `None` when it is not a marker.
    pub fn parse(value: &str) -> Option<Marker> {
        let mut parts = value.splitn(4, ':');
        let home = parts.next()?.to_string();
        let app = parts.next()?.parse().ok()?;
        let run = parts.next()?.parse().ok()?;
        let name = parts.next()?.to_string();
        (!home.is_empty() && !name.is_empty()).then_some(Marker {
            home,
            app,
            run,
            name,
        })
    }
}

/// The marker in the environment of `pid`, if it has one (a process of
/// another user is readable only by root).
pub fn of_process(pid: u32) -> Option<Marker> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{VAR}=");
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(Marker::parse)
}

/// A live process of this home, as a scan finds it.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its /proc entry when scanned.
    pub stat: ProcStat,
    /// Its marker, when its environment has one of this home.
    pub marker: Option<Marker>,
    /// Its cgroup path, when it is in a run leaf of this home's cgroups.
    pub cgroup: Option<String>,
}

/// Every live process carrying a marker of the home `home` (and, with
/// `in_cgroups`, every process in the given run leaves, marked or not),
/// from one snapshot of /proc. `leaves` are (hierarchy path, directory).
pub fn scan(home: &str, leaves: &[(String, std::path::PathBuf)]) -> Vec<Found> {
    let mut by_cgroup = std::collections::HashMap::new();
    for (path, dir) in leaves {
        for pid in oxidepm_sys::cgroup::procs(dir) {
            by_cgroup.insert(pid, path.clone());
        }
    }
    let own = std::process::id();
    procfs::all()
        .into_iter()
        .filter(|p| p.state != b'Z' && p.pid != own)
        .filter_map(|stat| {
            let marker = of_process(stat.pid).filter(|m| m.home == home);
            let cgroup = by_cgroup.remove(&stat.pid);
            (marker.is_some() || cgroup.is_some()).then_some(Found {
                stat,
                marker,
                cgroup,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = Marker {
            home: "0123456789abcdef".into(),
            app: 7,
            run: 42,
            name: "web:1".into(),
        };
        assert_eq!(m.value(), "0123456789abcdef:7:42:web:1");
        assert_eq!(Marker::parse(&m.value()), Some(m));
        for bad in ["", "x", "h:1:2", "h:x:2:n", "h:1:y:n", ":1:2:n", "h:1:2:"] {
            assert_eq!(Marker::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn found_in_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(VAR, "abcd:3:9:web")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Other tests fork concurrently: look a few times.
        let mut f = None;
        for _ in 0..50 {
            f = scan("abcd", &[]).into_iter().find(|f| f.stat.pid == pid);
            if f.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let other = scan("other", &[]).iter().any(|f| f.stat.pid == pid);
        let _ = child.kill();
        let _ = child.wait();
        let f = f.expect("the marked child is found");
        assert_eq!(f.marker.as_ref().map(|m| (m.app, m.run)), Some((3, 9)));
        assert!(!other, "a marker of another home is not ours");
    }
}
