//! Containment: how the daemon knows which processes are an app's, whatever
//! they did (fork, `setsid`, re-parenting to init, a daemon restart).
//!
//! **cgroup v2, where it can be written.** The hierarchy is the cgroup2
//! mount (`/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on
//! a host in systemd's hybrid mode). Under the daemon's own cgroup (its
//! `0::` line of `/proc/self/cgroup`, or `$OXIDEPM_CGROUP_ROOT`) each home
//! gets `oxidepm-<hash of the canonical home path>`, so the many daemons
//! of one host (one per home) never share a cgroup, and each app gets
//! `app-<id>` inside it. Every run of an app is a leaf `run-<n>` of the
//! app's cgroup: the main process is created in it (`clone3` with
//! `CLONE_INTO_CGROUP` on the leaf's directory; on an older kernel it
//! writes "0" to the leaf's `cgroup.procs` between fork and exec), so no
//! instruction of the app runs outside it, and with `clone3` no migration
//! waits on the kernel's cgroup lock. A leaf per run lets a crash
//! take the leftovers of the run that ended without touching the run that
//! replaced it; `cgroup.kill` of `app-<id>` takes every run at once.
//! No controller is enabled anywhere, so the daemon may stay in its own
//! cgroup above them (the "no internal processes" rule binds only cgroups
//! with controllers); this is what systemd's `Delegate=yes` hands over.
//!
//! Health probes run in the app's current run leaf: they are the app's
//! processes, go with it, and whatever they call the daemon with is the
//! app. The log shim is not put in the app's cgroup: it must outlive the
//! app's death to drain the pipes (a `cgroup.kill` would lose the last
//! lines), and it ends by itself at EOF once the app's last writer is gone;
//! it stays in the daemon's cgroup and never calls the daemon.
//!
//! **Sessions, where no cgroup2 hierarchy can be written.** Each app is
//! started in a session (and process group) of its own; the session of
//! every run is recorded in the state with its leader's start time and kept
//! until no process of it is left, so stop, delete and attribution still
//! find what stayed in the session after the main process exited, also
//! after the daemon restarted. A process that starts a session of its own
//! leaves this net: `whoami` and `show` say which mechanism is in force.
//!
//! A session id is a pid: while any process is in session S, pid S cannot
//! be given to a new process, so a recorded session is trusted only while
//! its leader's pid is absent or still names the recorded leader.

use oxidepm_sys::cgroup;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The environment variable that overrides where the home's cgroup is
/// made: a cgroup2 directory (one delegated to the daemon's user), or
/// `none` to turn cgroups off and rely on sessions.
pub const ROOT_ENV: &str = "OXIDEPM_CGROUP_ROOT";

/// Which mechanism holds each app's processes together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// One cgroup v2 per app.
    Cgroup(Cgroups),
    /// Recorded sessions and process groups; why cgroups are not used.
    Sessions(String),
}

/// The home's cgroup in a cgroup2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    mount: PathBuf,
    home: String,
}

/// A run's leaf, made before the run's process is forked.
#[derive(Debug)]
pub struct Run {
    /// Its path in the hierarchy (as in `/proc/<pid>/cgroup`).
    pub path: String,
    /// Its directory, open for the child to be started in.
    pub dir: OwnedFd,
}

/// The name of the cgroup of the home at `root`.
pub fn home_name(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let canon = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let digest = Sha256::digest(canon.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("oxidepm-{hex}")
}

impl Containment {
    /// Finds the mechanism for the home at `home_root`: makes the home's
    /// cgroup where a cgroup2 hierarchy can be written (under the daemon's
    /// own cgroup, or under `root_override`), else says why not.
    pub fn detect(home_root: &Path, root_override: Option<&str>) -> Containment {
        match root_override {
            Some("none") => {
                return Containment::Sessions(format!("cgroups turned off by {ROOT_ENV}=none"))
            }
            Some(dir) => return Self::at(Path::new(dir), home_root),
            None => {}
        }
        let Some(mount) = cgroup::mount_point() else {
            return Containment::Sessions("no cgroup2 hierarchy is mounted".into());
        };
        let Some(own) = cgroup::own_path() else {
            return Containment::Sessions("the daemon is in no cgroup2 cgroup".into());
        };
        Self::make(mount, &own, home_root)
    }

    /// The home's cgroup under the cgroup2 directory `dir`.
    fn at(dir: &Path, home_root: &Path) -> Containment {
        let Some(mount) = cgroup::mount_point() else {
            return Containment::Sessions("no cgroup2 hierarchy is mounted".into());
        };
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        match dir.strip_prefix(&mount) {
            Ok(rel) if cgroup::is_cgroup2(&dir) => {
                let rel = format!("/{}", rel.display());
                Self::make(mount, &rel, home_root)
            }
            _ => Containment::Sessions(format!(
                "{ROOT_ENV}={} is not a directory of the cgroup2 hierarchy at {}",
                dir.display(),
                mount.display()
            )),
        }
    }

    fn make(mount: PathBuf, base: &str, home_root: &Path) -> Containment {
        let home = format!("{}/{}", base.trim_end_matches('/'), home_name(home_root));
        let c = Cgroups { mount, home };
        let dir = c.dir(&c.home);
        if let Err(e) = std::fs::create_dir(&dir) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Containment::Sessions(format!(
                    "no writable cgroup2 hierarchy: cannot create {}: {e}",
                    dir.display()
                ));
            }
        }
        if !cgroup::has_kill(&dir) {
            return Containment::Sessions("the kernel has no cgroup.kill (Linux < 5.14)".into());
        }
        // Moving a process needs write access to the target's and to the
        // common ancestor's cgroup.procs (here, the daemon's own cgroup).
        let base_dir = c.dir(base);
        for d in [&dir, &base_dir] {
            if let Err(e) = cgroup::open_procs(d) {
                return Containment::Sessions(format!(
                    "no writable cgroup2 hierarchy: cannot write {}/cgroup.procs: {e}",
                    d.display()
                ));
            }
        }
        Containment::Cgroup(c)
    }

    /// What `whoami` and `show` say.
    pub fn describe(&self) -> String {
        match self {
            Containment::Cgroup(c) => format!("cgroup2 ({})", c.dir(&c.home).display()),
            Containment::Sessions(why) => format!("sessions ({why})"),
        }
    }

    /// The cgroups, when they are in force.
    pub fn cgroups(&self) -> Option<&Cgroups> {
        match self {
            Containment::Cgroup(c) => Some(c),
            Containment::Sessions(_) => None,
        }
    }
}

impl Cgroups {
    /// The directory of the cgroup at hierarchy path `path`.
    pub fn dir(&self, path: &str) -> PathBuf {
        let mut p = self.mount.clone().into_os_string();
        p.push(path);
        PathBuf::from(p)
    }

    /// The home's cgroup, as a hierarchy path.
    pub fn home(&self) -> &str {
        &self.home
    }

    /// The cgroup of app `id`, as a hierarchy path.
    pub fn app(&self, id: u64) -> String {
        format!("{}/app-{id}", self.home)
    }

    /// Whether hierarchy path `path` is an app's cgroup of a home named like
    /// this one (possibly under another base, when the daemon moved).
    pub fn app_of_path(&self, path: &str, id: u64) -> Option<String> {
        let name = self.home.rsplit('/').next().unwrap_or_default();
        let marker = format!("/{name}/app-{id}");
        let end = path.find(&marker)? + marker.len();
        let app = &path[..end];
        cgroup::is_within(path, app).then(|| app.to_string())
    }

    /// Makes a new leaf for a run of the app whose cgroup is `app`.
    pub fn new_run(&self, app: &str) -> std::io::Result<Run> {
        std::fs::create_dir_all(self.dir(app))?;
        // Unique within a boot, and cgroups do not outlive a boot.
        let path = format!("{app}/run-{}", oxidepm_sys::clock::monotonic_ns());
        let dir = self.dir(&path);
        std::fs::create_dir(&dir)?;
        match cgroup::open_dir(&dir) {
            Ok(fd) => Ok(Run { path, dir: fd }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The run leaves of the app whose cgroup is `app`.
    pub fn runs(&self, app: &str) -> Vec<String> {
        cgroup::children(&self.dir(app))
            .into_iter()
            .filter_map(|d| Some(format!("{app}/{}", d.file_name()?.to_str()?)))
            .collect()
    }

    /// Removes the empty run leaves of the app whose cgroup is `app`, and
    /// with `whole` the app's cgroup too when it is empty.
    pub fn tidy(&self, app: &str, whole: bool) {
        for run in self.runs(app) {
            // rmdir of a populated cgroup fails (EBUSY) and changes nothing.
            let _ = std::fs::remove_dir(self.dir(&run));
        }
        if whole {
            let _ = std::fs::remove_dir(self.dir(app));
        }
    }

    /// Sends `sig` to every process in the cgroup at `path`.
    pub fn signal(&self, path: &str, sig: i32) -> usize {
        cgroup::signal_all(&self.dir(path), path, sig)
    }

    /// The app cgroups of this home whose app id is not in `known`, with
    /// whether processes are left in them.
    pub fn strays(&self, known: &[u64]) -> Vec<(PathBuf, bool)> {
        cgroup::children(&self.dir(&self.home))
            .into_iter()
            .filter(|d| {
                let id = d
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_prefix("app-"))
                    .and_then(|n| n.parse::<u64>().ok());
                id.is_none_or(|id| !known.contains(&id))
            })
            .map(|d| {
                let busy = cgroup::populated(&d);
                (d, busy)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> Cgroups {
        Cgroups {
            mount: "/sys/fs/cgroup/unified".into(),
            home: "/x.service/oxidepm-0123".into(),
        }
    }

    #[test]
    fn paths() {
        let c = c();
        assert_eq!(
            c.dir(&c.app(3)),
            PathBuf::from("/sys/fs/cgroup/unified/x.service/oxidepm-0123/app-3")
        );
        assert_eq!(
            c.app_of_path("/x.service/oxidepm-0123/app-3/run-9", 3)
                .as_deref(),
            Some("/x.service/oxidepm-0123/app-3")
        );
        // The same home under the base of an earlier daemon.
        assert_eq!(
            c.app_of_path("/y/oxidepm-0123/app-3/run-9", 3).as_deref(),
            Some("/y/oxidepm-0123/app-3")
        );
        assert_eq!(
            c.app_of_path("/x.service/oxidepm-0123/app-30/run-9", 3),
            None
        );
        assert_eq!(c.app_of_path("/x.service/oxidepm-0123/app-3", 4), None);
        assert_eq!(
            c.app_of_path("/x.service/oxidepm-9999/app-3/run-1", 3),
            None
        );
    }

    #[test]
    fn homes_are_named_apart() {
        let a = home_name(Path::new("/tmp/a"));
        assert_eq!(a, home_name(Path::new("/tmp/a")));
        assert_ne!(a, home_name(Path::new("/tmp/b")));
        assert!(a.starts_with("oxidepm-") && a.len() == "oxidepm-".len() + 16);
    }

    #[test]
    fn can_be_turned_off() {
        let off = Containment::detect(Path::new("/tmp"), Some("none"));
        assert!(off.cgroups().is_none());
        assert!(
            off.describe().starts_with("sessions ("),
            "{}",
            off.describe()
        );
        let bad = Containment::detect(Path::new("/tmp"), Some("/tmp"));
        assert!(bad.cgroups().is_none(), "{}", bad.describe());
    }
}
