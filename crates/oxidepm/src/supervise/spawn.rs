//! Starting an app's process and its log shim, and signalling its process
//! groups and recorded sessions (where no cgroup holds the app).

use super::logshim::ShimConfig;
use super::procfs;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{Gid, Pid, Uid};
use oxidepm_proto::AppSpec;
use oxidepm_sys::exec;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::str::FromStr;

/// The identity an app runs as.
#[derive(Debug, Clone)]
pub struct Creds {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: Uid,
    /// Primary group.
    pub gid: Gid,
    /// Supplementary groups.
    pub groups: Vec<Gid>,
    /// Home directory.
    pub home: String,
    /// Login shell.
    pub shell: String,
}

/// Why an app's process, or a health check of it, could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The user database could not be read.
    #[error("cannot look up user {user:?}: {source}")]
    LookUp {
        /// The user the spec names.
        user: String,
        /// The lookup's failure.
        source: nix::Error,
    },
    /// The spec names a user this host does not have.
    #[error("user {user:?} does not exist on this host")]
    NoSuchUser {
        /// The user the spec names.
        user: String,
    },
    /// The user database gave a name with a NUL byte.
    #[error(transparent)]
    UserName(#[from] std::ffi::NulError),
    /// The spec asks for another user, and only root can switch to one.
    #[error("app {app:?} asks to run as user {user:?}, but the daemon runs as {daemon_user:?}; only a daemon running as root can start apps as other users")]
    NotRoot {
        /// The app.
        app: String,
        /// The user it asks for.
        user: String,
        /// The user the daemon runs as.
        daemon_user: String,
    },
    /// The program is not there.
    #[error(
        "cannot start {app:?}: program {command:?} not found{} (check the path, or set PATH in the app's env)",
        searched(.command, .user, .path)
    )]
    ProgramNotFound {
        /// The app.
        app: String,
        /// The program.
        command: String,
        /// The user it runs as.
        user: String,
        /// The PATH it was looked up on.
        path: String,
        /// The exec's failure.
        source: std::io::Error,
    },
    /// The program cannot be executed.
    #[error("cannot start {app:?}: permission denied executing {command:?}{} (is it executable, and can that user reach it?)", as_user(.user))]
    NotExecutable {
        /// The app.
        app: String,
        /// The program.
        command: String,
        /// The user it runs as, when the spec names one.
        user: Option<String>,
        /// The exec's failure.
        source: std::io::Error,
    },
    /// The working directory is not there (an exec's ENOENT that is not
    /// the program's).
    #[error("cannot start {app:?}: working directory {cwd:?} does not exist")]
    NoCwd {
        /// The app.
        app: String,
        /// The directory.
        cwd: String,
        /// The exec's failure.
        source: std::io::Error,
    },
    /// The app's user may not enter its working directory.
    #[error("cannot start {app:?}: user {user:?} may not enter its working directory {cwd:?} (it is entered as the app's user); give that user access to it, or choose another `cwd`")]
    CwdDenied {
        /// The app.
        app: String,
        /// The directory.
        cwd: String,
        /// The app's user.
        user: String,
        /// The exec's failure.
        source: std::io::Error,
    },
    /// The script is there, but the interpreter its `#!` line names is not.
    #[error("cannot start {app:?}: {command:?} starts with #!{interpreter}, which does not exist; install it or fix the script's first line")]
    NoInterpreter {
        /// The app.
        app: String,
        /// The script.
        command: String,
        /// The interpreter its first line names.
        interpreter: String,
        /// The exec's failure.
        source: std::io::Error,
    },
    /// Any other failure to start the program.
    #[error("cannot start {app:?} ({command:?}): {source}{}", shortage(source))]
    Exec {
        /// The app.
        app: String,
        /// The program.
        command: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The pipes for the app's output could not be made.
    #[error("cannot create a pipe: {0}")]
    Pipe(#[source] nix::Error),
    /// The log shim could not be started (the app was killed: without a
    /// reader it would die at its first line).
    #[error("cannot start the log writer for {app}: {source}{}", shortage(source))]
    LogWriter {
        /// The app.
        app: String,
        /// The failure.
        source: std::io::Error,
    },
    /// A health-check command with no program.
    #[error("the health-check command is empty")]
    EmptyProbe,
    /// The health-check program could not be started.
    #[error("cannot run health check {program:?}: {source}")]
    Probe {
        /// The program.
        program: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The app was deleted before its check could run.
    #[error("app is gone")]
    AppGone,
    /// The cgroup of the run could not be made; the app is not started
    /// outside it.
    #[error("cannot start {app:?}: cannot make its cgroup {}: {source} (set {}=none to run without cgroups)", dir.display(), super::cgroup::ROOT_ENV)]
    Cgroup {
        /// The app.
        app: String,
        /// The cgroup's directory.
        dir: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

impl SpawnError {
    /// Whether the failure may pass by itself (descriptors, processes or
    /// memory short: EMFILE, ENFILE, EAGAIN, ENOMEM), so the start is
    /// worth trying again; a missing program, user or cwd, or a permission
    /// refused, is not.
    pub fn is_transient(&self) -> bool {
        match self {
            SpawnError::LookUp { source, .. } | SpawnError::Pipe(source) => {
                is_transient_errno(*source as i32)
            }
            SpawnError::Exec { source, .. }
            | SpawnError::LogWriter { source, .. }
            | SpawnError::Probe { source, .. }
            | SpawnError::Cgroup { source, .. } => {
                source.raw_os_error().is_some_and(is_transient_errno)
            }
            _ => false,
        }
    }
}

/// What a person reads after a failure for a resource that is short: which
/// one, and what to do (empty for any other failure).
fn shortage(e: &std::io::Error) -> &'static str {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOMEM) => " (out of memory: the host, or the memory cgroup the daemon runs in, is at its limit; free memory or raise the limit; it is tried again under its restart policy)",
        Some(Errno::EAGAIN) => " (the limit on processes is reached: ulimit -u, or pids.max of the daemon's cgroup; it is tried again under its restart policy)",
        Some(Errno::EMFILE | Errno::ENFILE) => " (out of file descriptors: raise the daemon's LimitNOFILE or ulimit -n; it is tried again under its restart policy)",
        _ => "",
    }
}

/// Whether `errno` says a resource is short for now.
fn is_transient_errno(errno: i32) -> bool {
    use nix::errno::Errno;
    matches!(
        Errno::from_raw(errno),
        Errno::EMFILE | Errno::ENFILE | Errno::EAGAIN | Errno::ENOMEM
    )
}

fn searched(command: &str, user: &str, path: &str) -> String {
    if command.contains('/') {
        String::new()
    } else {
        format!(" on the PATH of user {user:?} ({path})")
    }
}

fn as_user(user: &Option<String>) -> String {
    user.as_ref()
        .map(|u| format!(" as user {u:?}"))
        .unwrap_or_default()
}

/// Looks up a user by name or numeric id.
pub fn resolve_user(user: &str) -> Result<Creds, SpawnError> {
    let found = match user.parse::<u32>() {
        Ok(uid) => nix::unistd::User::from_uid(Uid::from_raw(uid)),
        Err(_) => nix::unistd::User::from_name(user),
    };
    let u = found
        .map_err(|source| SpawnError::LookUp {
            user: user.to_string(),
            source,
        })?
        .ok_or_else(|| SpawnError::NoSuchUser {
            user: user.to_string(),
        })?;
    let cname = std::ffi::CString::new(u.name.clone())?;
    let groups = nix::unistd::getgrouplist(&cname, u.gid).unwrap_or_else(|_| vec![u.gid]);
    Ok(Creds {
        name: u.name,
        uid: u.uid,
        gid: u.gid,
        groups,
        home: u.dir.to_string_lossy().into_owned(),
        shell: u.shell.to_string_lossy().into_owned(),
    })
}

/// The identity the daemon itself runs as.
pub fn own_creds() -> Creds {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid).ok().flatten() {
        Some(u) => Creds {
            name: u.name,
            uid,
            gid: u.gid,
            groups: Vec::new(),
            home: u.dir.to_string_lossy().into_owned(),
            shell: u.shell.to_string_lossy().into_owned(),
        },
        None => Creds {
            name: uid.to_string(),
            uid,
            gid: nix::unistd::getgid(),
            groups: Vec::new(),
            home: "/".into(),
            shell: "/bin/sh".into(),
        },
    }
}

/// Parses a signal name (`SIGTERM`, `TERM`, `term`) or number.
pub fn parse_signal(name: &str) -> Option<Signal> {
    if let Ok(n) = name.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&full).ok()
}

/// The environment an app gets: exactly its spec's variables, plus the
/// basics a program expects (PATH, HOME, USER, LOGNAME, SHELL) when the spec
/// does not set them, `PYTHONUNBUFFERED=1` for a Python app that does not
/// set it, plus `extra` (the daemon's own variables for the app).
/// Nothing of the daemon's environment leaks in except PATH, and that only
/// to an app of the daemon's own user: another user's app gets a PATH it
/// can search, and HOME, USER, LOGNAME and SHELL from its passwd entry, as
/// systemd's `User=` gives.
pub fn app_env(
    spec: &AppSpec,
    creds: &Creds,
    extra: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<String, String> = spec.env.clone();
    let other_user = creds.uid != nix::unistd::geteuid();
    env.insert("PATH".into(), super::program::app_path(spec, other_user));
    env.entry("HOME".into())
        .or_insert_with(|| creds.home.clone());
    env.entry("USER".into())
        .or_insert_with(|| creds.name.clone());
    env.entry("LOGNAME".into())
        .or_insert_with(|| creds.name.clone());
    env.entry("SHELL".into())
        .or_insert_with(|| creds.shell.clone());
    if super::program::runs_python(spec) {
        env.entry("PYTHONUNBUFFERED".into())
            .or_insert_with(|| "1".into());
    }
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    env.into_iter().map(|(k, v)| (k.into(), v.into())).collect()
}

/// A process that was started.
#[derive(Debug, Clone, Copy)]
pub struct Spawned {
    /// Pid of the app (also its process group and session id).
    pub pid: u32,
    /// Start time of the app's process (ticks since boot).
    pub start_ticks: u64,
}

/// Starts `spec` in a new session with its output piped to a new log shim.
///
/// The shim, not the daemon, holds the read ends of the pipes: it outlives a
/// daemon that is killed or restarted, so an app never gets SIGPIPE and no
/// line is lost while no daemon runs, and the daemon never holds app output.
///
/// With `cgroup` (the directory of the run's cgroup), the app is started
/// inside that cgroup; the shim is not (see `super::cgroup`).
pub fn spawn_app(
    spec: &AppSpec,
    creds: Option<&Creds>,
    env: Vec<(OsString, OsString)>,
    cgroup: Option<OwnedFd>,
    shim_exe: &Path,
    shim: &ShimConfig,
    watch: Option<super::fd_budget::Share>,
) -> Result<Spawned, SpawnError> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let searched = Searched {
        user: creds.map(|c| c.name.clone()),
        path: env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let launch = Launch {
        command: &spec.command,
        args: &spec.args,
        env,
        cwd: spec.cwd.as_deref(),
        stdout: out_w,
        stderr: err_w,
        cgroup,
        creds,
    };
    // The write ends are dropped inside, so the shim sees EOF when the
    // app's tree is gone.
    let pid = launch
        .start()
        .map_err(|e| spawn_error(spec, &searched, e))?;
    let start_ticks = procfs::stat(pid).map(|s| s.start_ticks).unwrap_or(0);

    if let Err(e) = super::logwriters::start(shim_exe, shim, out_r, err_r, watch) {
        // Without a reader the app would die of SIGPIPE at its first line;
        // better to fail the start cleanly.
        let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        return Err(SpawnError::LogWriter {
            app: spec.name.clone(),
            source: e,
        });
    }
    Ok(Spawned { pid, start_ticks })
}

/// The `oom_score_adj` of every app process (`i32::MIN`: the daemon's).
static APP_OOM_SCORE_ADJ: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(i32::MIN);

/// Under memory pressure the kernel is to kill an app, not the daemon
/// that would restart it (as systemd shields itself): a daemon that may
/// (root with `CAP_SYS_RESOURCE`) lowers its own `oom_score_adj` to −900
/// and starts its apps at 0; one that may not starts its apps 100 above
/// its own. Returns what a person reads about it.
pub fn shield_from_oom() -> String {
    use std::sync::atomic::Ordering;
    let lowered = nix::unistd::geteuid().is_root() && exec::own_oom_score_adj(Some(-900)).is_ok();
    let own = match exec::own_oom_score_adj(None) {
        Ok(own) => own,
        Err(e) => return format!("cannot read the daemon's oom_score_adj: {e}"),
    };
    let apps = if lowered { 0 } else { (own + 100).min(1000) };
    APP_OOM_SCORE_ADJ.store(apps, Ordering::Relaxed);
    format!("oom_score_adj: the daemon {own}, its apps {apps}")
}

fn app_oom_score_adj() -> Option<i32> {
    let v = APP_OOM_SCORE_ADJ.load(std::sync::atomic::Ordering::Relaxed);
    (v != i32::MIN).then_some(v)
}

/// A process to start: program, output, cgroup and identity.
struct Launch<'a> {
    command: &'a str,
    args: &'a [String],
    env: Vec<(OsString, OsString)>,
    cwd: Option<&'a str>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// The directory of the run's cgroup the process starts in.
    cgroup: Option<OwnedFd>,
    creds: Option<&'a Creds>,
}

impl Launch<'_> {
    /// Starts the process in a session of its own and returns its pid.
    ///
    /// With a cgroup it is born there (`clone3`), so that no migration
    /// waits on the kernel's cgroup lock; on a kernel without that it
    /// joins between fork and exec instead. Either way it is never run
    /// outside the cgroup. Called with the supervisor locked, so the
    /// reaper cannot reap a child that failed before its exec: that one
    /// is reaped in `oxidepm_sys::spawn::spawn` itself.
    fn start(self) -> std::io::Result<u32> {
        let id = self.creds.map(|c| exec::Identity {
            uid: c.uid,
            gid: c.gid,
            groups: c.groups.clone(),
        });
        let procs = match &self.cgroup {
            Some(dir) => {
                let program = oxidepm_sys::spawn::Program::new(
                    self.command.as_ref(),
                    self.args,
                    &self.env,
                    self.cwd.map(Path::new),
                )?;
                let setup = oxidepm_sys::spawn::Setup {
                    stdin: None,
                    stdout: self.stdout.as_fd(),
                    stderr: Some(self.stderr.as_fd()),
                    cgroup: Some(dir.as_fd()),
                    identity: id.as_ref(),
                    oom_score_adj: app_oom_score_adj(),
                };
                if let Some(pid) = oxidepm_sys::spawn::spawn(&program, &setup)? {
                    return Ok(pid);
                }
                Some(oxidepm_sys::cgroup::open_procs_at(dir)?)
            }
            None => None,
        };
        let mut cmd = Command::new(self.command);
        cmd.args(self.args)
            .env_clear()
            .envs(self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(self.stdout))
            .stderr(Stdio::from(self.stderr));
        exec::own_session_in(&mut cmd, procs, id);
        if let Some(v) = app_oom_score_adj() {
            exec::set_oom_score_adj(&mut cmd, v);
        }
        if let Some(cwd) = self.cwd {
            exec::change_dir_after(&mut cmd, Path::new(cwd))?;
        }
        // The reaper owns waiting; dropping a std Child neither waits nor
        // kills.
        Ok(cmd.spawn()?.id())
    }
}

/// Whether `user` (the daemon's when `None`) may search every directory
/// down to `dir`, by the mode bits (ACLs are not read).
pub(super) fn user_may_enter(user: Option<&str>, dir: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let creds = match user {
        Some(u) => match resolve_user(u) {
            Ok(c) => c,
            Err(_) => return true,
        },
        None => own_creds(),
    };
    if creds.uid.is_root() {
        return true;
    }
    Path::new(dir).ancestors().all(|d| {
        let Ok(m) = std::fs::metadata(d) else {
            return true;
        };
        let bit = if m.uid() == creds.uid.as_raw() {
            0o100
        } else if m.gid() == creds.gid.as_raw()
            || creds.groups.iter().any(|g| g.as_raw() == m.gid())
        {
            0o010
        } else {
            0o001
        };
        m.mode() & bit != 0
    })
}

/// The user and PATH a program was looked up with, for the message.
struct Searched {
    /// `None`: the daemon's own user.
    user: Option<String>,
    path: String,
}

fn spawn_error(spec: &AppSpec, searched: &Searched, source: std::io::Error) -> SpawnError {
    let (app, command) = (spec.name.clone(), spec.command.clone());
    match source.kind() {
        // Looked at now: a missing cwd, or a script's missing interpreter,
        // makes the exec fail with ENOENT too, and the program would be
        // blamed for it.
        std::io::ErrorKind::NotFound => {
            if let Some(cwd) = spec.cwd.clone().filter(|c| !Path::new(c).is_dir()) {
                return SpawnError::NoCwd { app, cwd, source };
            }
            let script = Path::new(spec.cwd.as_deref().unwrap_or("/")).join(&command);
            if command.contains('/') && script.is_file() {
                if let Some(interpreter) = super::program::missing_interpreter(&script) {
                    return SpawnError::NoInterpreter {
                        app,
                        command,
                        interpreter,
                        source,
                    };
                }
            }
            SpawnError::ProgramNotFound {
                app,
                command,
                user: searched.user.clone().unwrap_or_else(|| own_creds().name),
                path: searched.path.clone(),
                source,
            }
        }
        // The directory is entered as the app's user (as systemd does).
        std::io::ErrorKind::PermissionDenied
            if spec
                .cwd
                .as_deref()
                .is_some_and(|c| !user_may_enter(spec.user.as_deref(), c)) =>
        {
            SpawnError::CwdDenied {
                app,
                cwd: spec.cwd.clone().unwrap_or_default(),
                user: spec.user.clone().unwrap_or_else(|| own_creds().name),
                source,
            }
        }
        std::io::ErrorKind::PermissionDenied => SpawnError::NotExecutable {
            app,
            command,
            user: spec.user.clone(),
            source,
        },
        _ => SpawnError::Exec {
            app,
            command,
            source,
        },
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(SpawnError::Pipe)
}

/// Sends `sig` to the process group `pgid`; false when the group is gone.
pub fn signal_group(pgid: u32, sig: Signal) -> bool {
    killpg(Pid::from_raw(pgid as i32), sig).is_ok()
}

/// Sends `sig` to the process group `pgid` unless pid `pgid` now names a
/// process other than the leader that started at `leader_start`: a group
/// whose id was given to a new process after the old group emptied is not
/// the app's.
pub fn signal_group_of(pgid: u32, leader_start: u64, sig: Signal) -> bool {
    if procfs::stat(pgid).is_some_and(|s| s.start_ticks != leader_start) {
        return false;
    }
    signal_group(pgid, sig)
}

/// Starts a health-check command in its own session (inside the app's
/// run cgroup, when `cgroup` is its directory), output discarded.
pub fn spawn_probe(
    cmd: &[String],
    cwd: Option<&str>,
    env: Vec<(OsString, OsString)>,
    cgroup: Option<OwnedFd>,
    creds: Option<&Creds>,
) -> Result<u32, SpawnError> {
    let (prog, args) = cmd.split_first().ok_or(SpawnError::EmptyProbe)?;
    let probe_err = |source| SpawnError::Probe {
        program: prog.clone(),
        source,
    };
    let null = || -> std::io::Result<OwnedFd> { Ok(std::fs::File::create("/dev/null")?.into()) };
    let launch = Launch {
        command: prog,
        args,
        env,
        cwd,
        stdout: null().map_err(probe_err)?,
        stderr: null().map_err(probe_err)?,
        cgroup,
        creds,
    };
    launch.start().map_err(probe_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortages_are_transient_mistakes_are_not() {
        let io = |n| std::io::Error::from_raw_os_error(n);
        let exec = |n| SpawnError::Exec {
            app: "a".into(),
            command: "c".into(),
            source: io(n),
        };
        for n in [libc::EMFILE, libc::ENFILE, libc::EAGAIN, libc::ENOMEM] {
            assert!(exec(n).is_transient(), "{n}");
            assert!(SpawnError::Pipe(nix::Error::from_raw(n)).is_transient());
        }
        assert!(!exec(libc::EACCES).is_transient());
        // A shortage says which resource and what to do.
        let text = exec(libc::ENOMEM).to_string();
        assert!(
            text.contains("out of memory") && text.contains("raise the limit"),
            "{text}"
        );
        assert!(exec(libc::EAGAIN)
            .to_string()
            .contains("limit on processes"));
        assert!(!exec(libc::EACCES).to_string().contains("limit"));
        let nf = SpawnError::ProgramNotFound {
            app: "a".into(),
            command: "c".into(),
            user: "u".into(),
            path: "/bin".into(),
            source: io(libc::ENOENT),
        };
        assert!(!nf.is_transient());
        assert!(!SpawnError::NoSuchUser { user: "x".into() }.is_transient());
        let cg = SpawnError::Cgroup {
            app: "a".into(),
            dir: "/x".into(),
            source: io(libc::ENOMEM),
        };
        assert!(cg.is_transient());
    }
}
