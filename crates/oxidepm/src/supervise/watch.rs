//! Restart on file change, as pm2's `watch`: one inotify instance per
//! watching app, on every directory of its watched trees except what its
//! ignores name (and `node_modules` and `.git` always), with new
//! directories added as they appear. A burst of changes restarts once,
//! after `delay_ms` of quiet. An app that crashed or ended by itself is
//! started by a change (the fix it waited for); one a request stopped
//! stays stopped.
//!
//! Bounds: at most [`MAX_WATCHED_DIRS`] directories per app (a watch of a
//! tree larger than that is refused whole, with what to narrow, rather
//! than watching part of it); symbolic links are not followed (a link can
//! lead out of the tree or round in a loop). When the daemon runs as root
//! and the app as another user, a directory that user could not read is
//! not watched: a watch must not tell an app about files it may not see.
//!
//! The task ends when the app's watch is disarmed: the sender kept in
//! [`App::watch_stop`](super::app::App) is dropped at every re-arm and
//! when the app is deleted, and the inotify instance closes with the task.

use super::lifecycle::DaemonRestart;
use super::supervisor::{lock, Shared};
use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use oxidepm_proto::{Actor, EventKind, Status, WatchSpec, WATCH_ALWAYS_IGNORED};
use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;

/// The most directories one app's watch may hold.
pub const MAX_WATCHED_DIRS: usize = 4096;

/// What the kernel is asked to tell about a watched directory or file.
fn mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// Names and globs a watch leaves out.
#[derive(Debug)]
pub struct Ignore {
    patterns: Vec<glob::Pattern>,
}

impl Ignore {
    /// The ignores of `spec`, beside [`WATCH_ALWAYS_IGNORED`]; an error
    /// names the pattern that is not a glob.
    pub fn new(spec: &WatchSpec) -> Result<Ignore, String> {
        let mut patterns = Vec::new();
        for p in WATCH_ALWAYS_IGNORED
            .iter()
            .copied()
            .chain(spec.ignore.iter().map(String::as_str))
        {
            let p = p.trim_end_matches('/');
            patterns.push(glob::Pattern::new(p).map_err(|e| {
                format!("ignore_watch {p:?} is not a glob ({e}); use names or globs like \"*.log\" or \"tmp/*\"")
            })?);
        }
        Ok(Ignore { patterns })
    }

    /// Whether `rel` (a path inside a watched tree, relative to its root)
    /// is ignored: a pattern without `/` matches any one component of it,
    /// one with `/` the whole relative path (or a leading part of it).
    pub fn ignores(&self, rel: &Path) -> bool {
        let opts = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: false,
        };
        self.patterns.iter().any(|p| {
            if p.as_str().contains('/') {
                rel.ancestors()
                    .filter(|a| !a.as_os_str().is_empty())
                    .any(|a| p.matches_path_with(a, opts))
            } else {
                rel.components()
                    .any(|c| p.matches_with(&c.as_os_str().to_string_lossy(), opts))
            }
        })
    }
}

/// What a change does to an app in `status`; `stopped_by_request` when a
/// request stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    /// Restart the running app.
    Restart,
    /// Start an app that crashed or ended by itself.
    Start,
    /// Leave it: a request stopped it, it is on its way, or the daemon is
    /// shutting down.
    Nothing,
}

/// Decides what a change does.
pub fn on_change(status: Status, stopped_by_request: bool, shutting_down: bool) -> OnChange {
    if shutting_down {
        return OnChange::Nothing;
    }
    match status {
        Status::Online => OnChange::Restart,
        Status::Stopped | Status::Errored if !stopped_by_request => OnChange::Start,
        _ => OnChange::Nothing,
    }
}

/// Why a watch could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// No inotify instance.
    #[error("no inotify instance ({0}); raise fs.inotify.max_user_instances, or watch fewer apps")]
    Init(std::io::Error),
    /// A root that is not there.
    #[error("watch path {path} cannot be read: {error}")]
    Root {
        /// The path.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A root the app's user may not read.
    #[error("watch path {path} is not readable by the app's user {user}")]
    NotReadable {
        /// The path.
        path: String,
        /// The user.
        user: String,
    },
    /// More directories than [`MAX_WATCHED_DIRS`].
    #[error(
        "watch of {path} would hold more than {MAX_WATCHED_DIRS} directories; name the source \
         folders in watch, or add the large ones to ignore_watch"
    )]
    TooMany {
        /// The root being walked.
        path: String,
    },
    /// The kernel's per-user limit of watches.
    #[error("inotify refused a watch of {path} ({error}); raise fs.inotify.max_user_watches, or watch less")]
    Add {
        /// The directory.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// Who must be able to read what is watched: a uid and its groups, when
/// the daemon (root) runs the app as another user.
#[derive(Debug, Clone)]
struct Reader {
    name: String,
    uid: u32,
    gids: Vec<u32>,
}

impl Reader {
    /// The app's user, when the daemon is root and the app is not.
    fn of(user: Option<&str>) -> Option<Reader> {
        let name = user?;
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let u = nix::unistd::User::from_name(name).ok().flatten()?;
        if u.uid.is_root() {
            return None;
        }
        let c = std::ffi::CString::new(name).ok()?;
        let gids = nix::unistd::getgrouplist(&c, u.gid)
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|_| vec![u.gid.as_raw()]);
        Some(Reader {
            name: name.to_string(),
            uid: u.uid.as_raw(),
            gids,
        })
    }

    /// Whether the mode bits let this user list and enter a directory (or
    /// read a file: `dir` false).
    fn may_read(&self, m: &std::fs::Metadata, dir: bool) -> bool {
        let want = if dir { 0o5 } else { 0o4 };
        let mode = m.mode();
        let bits = if m.uid() == self.uid {
            mode >> 6
        } else if self.gids.contains(&m.gid()) {
            mode >> 3
        } else {
            mode
        };
        bits & want == want
    }
}

/// One app's watched directories and files.
struct Tree {
    watches: Watches,
    ignore: Ignore,
    reader: Option<Reader>,
    /// Each watch: its root (as the event names it) and the path inside.
    watched: HashMap<WatchDescriptor, (PathBuf, PathBuf)>,
    /// Directories watched, against [`MAX_WATCHED_DIRS`].
    dirs: usize,
    /// The app's cwd, for naming changes.
    cwd: PathBuf,
}

impl Tree {
    /// The inotify instance and the tree it watches.
    fn new(
        spec: &WatchSpec,
        cwd: &Path,
        user: Option<&str>,
    ) -> Result<(Inotify, Tree), WatchError> {
        let ignore = Ignore::new(spec).map_err(|e| WatchError::Root {
            path: String::new(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        let inotify = Inotify::init().map_err(WatchError::Init)?;
        let mut t = Tree {
            watches: inotify.watches(),
            ignore,
            reader: Reader::of(user),
            watched: HashMap::new(),
            dirs: 0,
            cwd: cwd.to_path_buf(),
        };
        let roots: Vec<PathBuf> = if spec.paths.is_empty() {
            vec![cwd.to_path_buf()]
        } else {
            spec.paths.iter().map(|p| cwd.join(p)).collect()
        };
        for root in roots {
            t.add_root(&root)?;
        }
        Ok((inotify, t))
    }

    fn add_root(&mut self, root: &Path) -> Result<(), WatchError> {
        let shown = root.display().to_string();
        let m = std::fs::metadata(root).map_err(|error| WatchError::Root {
            path: shown.clone(),
            error,
        })?;
        if let Some(r) = &self.reader {
            if !r.may_read(&m, m.is_dir()) {
                return Err(WatchError::NotReadable {
                    path: shown,
                    user: r.name.clone(),
                });
            }
        }
        if m.is_dir() {
            self.add_tree(root, root)
        } else {
            self.add_one(root, root, false)
        }
    }

    fn add_one(&mut self, root: &Path, path: &Path, dir: bool) -> Result<(), WatchError> {
        if dir {
            if self.dirs >= MAX_WATCHED_DIRS {
                return Err(WatchError::TooMany {
                    path: root.display().to_string(),
                });
            }
            self.dirs += 1;
        }
        let wd = self
            .watches
            .add(path, mask() | WatchMask::DONT_FOLLOW)
            .map_err(|error| WatchError::Add {
                path: path.display().to_string(),
                error,
            })?;
        let rel = path.strip_prefix(root).unwrap_or(path).to_path_buf();
        self.watched.insert(wd, (root.to_path_buf(), rel));
        Ok(())
    }

    /// Watches `top` and every directory under it that is not ignored,
    /// not a link, and readable by the app's user.
    fn add_tree(&mut self, root: &Path, top: &Path) -> Result<(), WatchError> {
        let mut queue = VecDeque::from([top.to_path_buf()]);
        while let Some(dir) = queue.pop_front() {
            // Below the root, a directory swapped for a link since it was
            // seen is not entered: the walk would list (and watch) where
            // the link leads. The root itself may be a link its app named.
            if dir != root {
                match std::fs::symlink_metadata(&dir) {
                    Ok(m) if m.is_dir() => {}
                    _ => continue,
                }
            }
            self.add_one(root, &dir, true)?;
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                if !ft.is_dir() {
                    continue;
                }
                let path = e.path();
                let rel = path.strip_prefix(root).unwrap_or(&path);
                if self.ignore.ignores(rel) {
                    continue;
                }
                if let Some(r) = &self.reader {
                    match e.metadata() {
                        Ok(m) if r.may_read(&m, true) => {}
                        _ => continue,
                    }
                }
                queue.push_back(path);
            }
        }
        Ok(())
    }

    /// What one event means: the changed path as a change names it, or
    /// `None` when it is ignored. A new directory is watched from now on.
    fn change(
        &mut self,
        wd: &WatchDescriptor,
        mask: EventMask,
        name: Option<&Path>,
    ) -> Option<String> {
        if mask.contains(EventMask::Q_OVERFLOW) {
            return Some(self.cwd.display().to_string());
        }
        let (root, rel) = self.watched.get(wd)?.clone();
        if mask.contains(EventMask::IGNORED) {
            // The watch is gone (its directory was removed): forget it.
            if self.watched.remove(wd).is_some() && root != rel {
                self.dirs = self.dirs.saturating_sub(1);
            }
            return None;
        }
        let rel = match name {
            Some(n) => rel.join(n),
            None => rel,
        };
        if !rel.as_os_str().is_empty() && self.ignore.ignores(&rel) {
            return None;
        }
        let path = root.join(&rel);
        if mask.contains(EventMask::ISDIR)
            && (mask.contains(EventMask::CREATE) || mask.contains(EventMask::MOVED_TO))
        {
            if let Err(e) = self.add_tree(&root, &path) {
                log::warn!("watch: {e}; changes under {} are not seen", path.display());
            }
        }
        Some(match path.strip_prefix(&self.cwd) {
            Ok(r) if !r.as_os_str().is_empty() => r.display().to_string(),
            _ => path.display().to_string(),
        })
    }
}

/// One app's watch as armed: the app, the spec epoch it is armed for,
/// and what it watches as whom.
pub struct Armed {
    /// The app.
    pub id: u64,
    /// Its automation epoch when armed; a later one ends the watch.
    pub epoch: u64,
    /// What to watch.
    pub spec: WatchSpec,
    /// The app's cwd, which relative paths start from.
    pub cwd: PathBuf,
    /// The app's user, whose read rights bound a root daemon's walk.
    pub user: Option<String>,
}

/// Arms a watch: returns the sender whose drop ends it.
pub fn arm(shared: Shared, armed: Armed) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(run(shared, armed, stopped));
    stop
}

async fn run(shared: Shared, armed: Armed, mut stopped: oneshot::Receiver<()>) {
    let Armed {
        id,
        epoch,
        spec,
        cwd,
        user,
    } = armed;
    let delay = Duration::from_millis(spec.delay_ms);
    let off = |why: String| {
        log::warn!("app {id}: watch off: {why}");
        let detail = format!("watch off: {why}");
        lock(&shared).event(id, EventKind::Watch, &Actor::system("watch"), &detail);
    };
    // The inotify descriptor is held for as long as the watch.
    let Some(_fd) = super::fd_budget::take(1) else {
        off("the daemon's file descriptors are short (raise its RLIMIT_NOFILE)".into());
        return;
    };
    // The walk reads directories: off the runtime's threads.
    let built = tokio::task::spawn_blocking(move || Tree::new(&spec, &cwd, user.as_deref())).await;
    let (inotify, mut tree) = match built {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            off(e.to_string());
            return;
        }
        Err(_) => return,
    };
    let mut events = match inotify.into_event_stream(vec![0u8; 16 * 1024]) {
        Ok(s) => s,
        Err(e) => {
            off(e.to_string());
            return;
        }
    };
    {
        // Said once armed: from here on a change is seen.
        let s = lock(&shared);
        if s.app(id).is_none_or(|a| a.auto_epoch != epoch) {
            return;
        }
        let detail = format!("watching {} directories", tree.dirs);
        s.event(id, EventKind::Watch, &Actor::system("watch"), &detail);
    }
    loop {
        // The first change of a burst, then quiet for `delay`.
        let mut first: Option<String> = None;
        loop {
            let next = async {
                if first.is_some() {
                    tokio::time::timeout(delay, events.next()).await.ok()
                } else {
                    Some(events.next().await)
                }
            };
            let got = tokio::select! {
                _ = &mut stopped => return,
                got = next => got,
            };
            let e = match got {
                None => break,
                Some(Some(Ok(e))) => e,
                Some(Some(Err(e))) => {
                    log::warn!("app {id}: watch ended: {e}");
                    return;
                }
                Some(None) => return,
            };
            let name = e.name.as_deref().map(Path::new);
            if let Some(path) = tree.change(&e.wd, e.mask, name) {
                first.get_or_insert(path);
            }
        }
        let Some(path) = first else { continue };
        let what = {
            let s = lock(&shared);
            match s.app(id) {
                Some(a) if a.auto_epoch == epoch => {
                    on_change(a.rt.status, a.rt.stopped_by.is_some(), s.shutting_down)
                }
                _ => return,
            }
        };
        match what {
            OnChange::Restart => {
                let reason = DaemonRestart::Watch { path };
                super::control::restart_by_daemon(&shared, id, reason).await;
            }
            OnChange::Start => {
                let actor = Actor::system("watch");
                lock(&shared).event(id, EventKind::Watch, &actor, &format!("{path} changed"));
                if let Err(e) = super::control::start(&shared, &[id], &actor).await {
                    log::warn!("app {id}: the start after a change failed: {e}");
                }
            }
            OnChange::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests;
