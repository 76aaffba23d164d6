//! `oxidepm startup` and `unstartup`: a systemd unit that runs the daemon
//! at boot, installed and removed. The unit is named after the account and
//! the home it serves, so two homes never share (and overwrite) one unit.

use crate::paths::Home;
use nix::unistd::User;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the unit could not be installed or removed; nothing was left half
/// done.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// Its directory cannot be created.
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The unit file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The unit file cannot be removed.
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        /// The unit file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A system unit, asked for by someone who is not root.
    #[error("{} is a system unit and only root can {what} it; run:\n  {sudo}", path.display())]
    NeedsRoot {
        /// The unit file.
        path: PathBuf,
        /// "install" or "remove".
        what: &'static str,
        /// The command that does it.
        sudo: String,
    },
    /// No systemd answers (not booted with it, a container, no user
    /// manager outside a login session).
    #[error("cannot install {}: systemd does not answer here ({detail}); nothing was written. {hint}", path.display())]
    NoSystemd {
        /// The unit file that was not written.
        path: PathBuf,
        /// What systemctl said.
        detail: String,
        /// What to do instead.
        hint: String,
    },
    /// systemctl refused a step after the file was written; the file was
    /// taken back.
    #[error("systemctl {step} failed ({detail}); {} was taken back, nothing is installed", path.display())]
    Systemctl {
        /// The step (`daemon-reload`, `enable …`).
        step: String,
        /// What systemctl said.
        detail: String,
        /// The unit file.
        path: PathBuf,
    },
    /// `unstartup` where no unit was installed.
    #[error("no unit {}: `oxidepm startup --write{}` installed none for the home {}; nothing to remove", path.display(), if *user { " --user" } else { "" }, home.display())]
    NoUnit {
        /// Where the unit would be.
        path: PathBuf,
        /// A user unit.
        user: bool,
        /// The home it would serve.
        home: PathBuf,
    },
    /// `--run-as` names no account.
    #[error("--run-as {name:?}: no such user")]
    NoSuchUser {
        /// The name as given.
        name: String,
    },
    /// `--run-as` with `--user`.
    #[error("--run-as is for a system unit; a user unit runs as the user who installs it")]
    RunAsUserUnit,
    /// A value of the unit holds a line break or another control
    /// character, which would end its line and start a directive of its own.
    #[error("the {what} {value:?} holds a control character, which a unit file line cannot hold; use a {what} without one")]
    ControlCharacter {
        /// What the value is (`home`, `PATH`, `daemon path`).
        what: &'static str,
        /// The value.
        value: String,
    },
    /// The account running the command has no passwd entry.
    #[error("cannot find the account of uid {uid} (no passwd entry)")]
    NoAccount {
        /// The uid.
        uid: u32,
    },
}

/// The unit a `startup` or `unstartup` is about.
pub struct Target {
    /// A user unit (`systemctl --user`) rather than a system one.
    pub user_unit: bool,
    /// The account the daemon runs as.
    pub account: User,
    /// The home the daemon serves.
    pub home: PathBuf,
    /// The unit's file name (`oxidepm.service`, `oxidepm-alice.service`,
    /// `oxidepm-srv-apps-1a2b3c4d.service`).
    pub name: String,
    /// The directory the unit file goes into.
    pub dir: PathBuf,
}

impl Target {
    /// The unit for this user (or `run_as`) and home: `OXIDEPM_HOME`, else
    /// the account's `~/.oxidepm`.
    pub fn resolve(user_unit: bool, run_as: Option<&str>) -> Result<Target, InstallError> {
        if user_unit && run_as.is_some() {
            return Err(InstallError::RunAsUserUnit);
        }
        let account = match run_as {
            Some(name) => User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| InstallError::NoSuchUser { name: name.into() })?,
            None => {
                let uid = nix::unistd::getuid();
                User::from_uid(uid)
                    .ok()
                    .flatten()
                    .ok_or(InstallError::NoAccount { uid: uid.as_raw() })?
            }
        };
        let default_home = account.dir.join(".oxidepm");
        let home = match (
            std::env::var_os("OXIDEPM_HOME").filter(|h| !h.is_empty()),
            run_as,
        ) {
            (None, Some(_)) => default_home.clone(),
            _ => Home::from_env().root().to_path_buf(),
        };
        let mut name = if !user_unit && !account.uid.is_root() {
            format!("oxidepm-{}", account.name)
        } else {
            "oxidepm".to_string()
        };
        if home != default_home {
            name.push('-');
            name.push_str(&home_tag(&home));
        }
        name.push_str(".service");
        let dir = if user_unit {
            std::env::var_os("XDG_CONFIG_HOME")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| account.dir.join(".config"))
                .join("systemd/user")
        } else {
            PathBuf::from("/etc/systemd/system")
        };
        Ok(Target {
            user_unit,
            account,
            home,
            name,
            dir,
        })
    }

    /// The unit file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    fn systemctl(&self) -> Command {
        let mut c = Command::new("systemctl");
        if self.user_unit {
            c.arg("--user");
        }
        c
    }

    /// The command that does `verb` as root for a person who is not.
    pub fn sudo_line(&self, verb: &str) -> String {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "oxidepm".into());
        format!(
            "sudo env PATH=$PATH OXIDEPM_HOME={} {} {verb} --run-as {}",
            shell_quote(&self.home.display().to_string()),
            shell_quote(&exe),
            shell_quote(&self.account.name)
        )
    }
}

/// A readable, collision-free tag for a home: its path's letters and
/// digits, then a hash of the whole path (`/a-b` and `/a/b` differ).
fn home_tag(home: &Path) -> String {
    let mut tag = String::new();
    for c in home.display().to_string().chars() {
        if c.is_ascii_alphanumeric() {
            tag.push(c);
        } else if !tag.ends_with('-') && !tag.is_empty() {
            tag.push('-');
        }
        if tag.len() >= 32 {
            break;
        }
    }
    let tag = tag.trim_end_matches('-');
    // FNV-1a: stable across builds and versions, unlike std's hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in home.as_os_str().as_encoded_bytes() {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    format!("{tag}-{h:08x}")
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// One argument of ExecStart or a value of Environment=, quoted for
/// systemd when it needs to be (`%` is systemd's specifier character).
fn unit_quote(s: &str) -> String {
    let s = s.replace('%', "%%");
    if s.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        format!("\"{}\"", s.replace('\\', r"\\").replace('"', "\\\""))
    } else {
        s
    }
}

/// An argument of ExecStart: quoted, and `$` written `$$`, since systemd
/// expands `$VAR` there (not in Environment=).
fn exec_quote(s: &str) -> String {
    unit_quote(&s.replace('$', "$$"))
}

/// The unit file text for `target`, with `daemon` as its ExecStart.
pub fn unit(target: &Target, daemon: &str) -> Result<String, InstallError> {
    let run_as = if !target.user_unit && !target.account.uid.is_root() {
        format!("User={}\n", target.account.name)
    } else {
        String::new()
    };
    let wanted_by = if target.user_unit {
        "default.target"
    } else {
        "multi-user.target"
    };
    let home = target.home.display().to_string();
    let described = home.replace('%', "%%");
    // Apps find their programs on the PATH of whoever ran `startup`, as
    // they did when started by hand, not on systemd's short default one.
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    for (what, value) in [
        ("home", &home),
        ("PATH", &path),
        ("daemon path", &daemon.to_string()),
    ] {
        if value.chars().any(char::is_control) {
            return Err(InstallError::ControlCharacter {
                what,
                value: value.clone(),
            });
        }
    }
    let env_home = unit_quote(&format!("OXIDEPM_HOME={home}"));
    let env_path = unit_quote(&format!("PATH={path}"));
    let daemon = exec_quote(daemon);
    let home_arg = exec_quote(&home);
    Ok(format!(
        "[Unit]\n\
Description=oxidepm process manager ({described})\n\
After=network-online.target\n\
Wants=network-online.target\n\
\n\
[Service]\n\
Type=notify\n\
NotifyAccess=main\n\
{run_as}Environment={env_home}\n\
Environment={env_path}\n\
ExecStart={daemon} --foreground --resurrect --home {home_arg}\n\
# `systemctl stop` sends SIGTERM to the daemon alone, which stops every app\n\
# gracefully first. When the daemon crashes or is restarted on its own,\n\
# KillMode=process leaves the apps running; the next daemon re-adopts them.\n\
KillMode=process\n\
# `systemctl reload` makes the daemon read daemon.toml again; no app stops.\n\
ExecReload=/bin/kill -HUP $MAINPID\n\
# The daemon makes one cgroup per app under its own (no controllers needed):\n\
# membership that no fork or re-parenting escapes, see `oxidepm whoami`.\n\
Delegate=yes\n\
# Each app costs the daemon a few descriptors (pidfds of adopted apps, pipes\n\
# while starting); the daemon also raises its soft limit to the hard one.\n\
LimitNOFILE=524288\n\
Restart=on-failure\n\
RestartSec=1\n\
TimeoutStopSec=120\n\
\n\
[Install]\n\
WantedBy={wanted_by}\n"
    ))
}

/// The daemon binary to put in ExecStart (absolute).
pub fn daemon_path() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("oxidepmd")))
        .filter(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/local/bin/oxidepmd".into())
}

/// `oxidepm startup [--user] [--write] [--run-as USER]`.
pub fn run(user_unit: bool, write: bool, run_as: Option<&str>) -> Result<(), InstallError> {
    let target = Target::resolve(user_unit, run_as)?;
    let text = unit(&target, &daemon_path())?;
    let root = nix::unistd::geteuid().is_root();
    if !write {
        out!("{text}");
        // Advice on stderr: `startup > unit.service` stays a unit file.
        if !user_unit && !root {
            errln!(
                "# {} needs root to install; run:\n{}",
                target.path().display(),
                target.sudo_line("startup --write")
            );
        } else {
            let user = if user_unit { " --user" } else { "" };
            errln!("# to install and enable it: oxidepm startup{user} --write");
        }
        if user_unit {
            errln!("# {}", linger_advice(&target.account.name));
        }
        return Ok(());
    }
    if !user_unit && !root {
        return Err(InstallError::NeedsRoot {
            path: target.path(),
            what: "install",
            sudo: target.sudo_line("startup --write"),
        });
    }
    out!("{}", install(&target, &text)?);
    if user_unit {
        outln!("{}", linger(&target.account.name));
    }
    Ok(())
}

/// A user manager runs only in a login session unless lingering is on.
fn linger_advice(user: &str) -> String {
    format!(
        "a user unit runs only while {user} is logged in, unless lingering is enabled: \
         `loginctl enable-linger {user}` starts it at boot"
    )
}

/// Enables lingering for `user` when it is not (as `--write` does), or
/// says how to.
fn linger(user: &str) -> String {
    if Path::new("/var/lib/systemd/linger").join(user).exists() {
        return format!("lingering is enabled for {user}: the unit starts at boot");
    }
    let done = Command::new("loginctl")
        .args(["enable-linger", user])
        .output()
        .is_ok_and(|o| o.status.success());
    if done {
        format!("enabled lingering for {user} (loginctl enable-linger {user}): the unit starts at boot, not only at login")
    } else {
        format!(
            "{}; it could not be enabled from here, run: sudo loginctl enable-linger {user}",
            linger_advice(user)
        )
    }
}

/// What systemctl said, on one line.
fn said(o: &std::process::Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr);
    let e = e.trim();
    if e.is_empty() {
        format!("exit {}", o.status.code().unwrap_or(-1))
    } else {
        e.lines().next().unwrap_or(e).to_string()
    }
}

/// Runs one systemctl step; `Err` with what it said.
fn step(target: &Target, args: &[&str]) -> Result<(), String> {
    match target.systemctl().args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(said(&o)),
        Err(e) => Err(format!("cannot run systemctl: {e}")),
    }
}

/// Writes the unit and enables it. systemd is asked first, so that where
/// it does not run nothing is written; a step that fails after the write
/// takes the file back (an earlier unit is put back as it was).
pub fn install(target: &Target, text: &str) -> Result<String, InstallError> {
    let path = target.path();
    if let Err(detail) = step(target, &["show-environment"]) {
        let hint = if target.user_unit {
            format!(
                "A user unit needs {}'s systemd user manager, which runs in a login session \
                 (or from boot with `loginctl enable-linger {}`); print the unit with \
                 `oxidepm startup --user` to install it elsewhere",
                target.account.name, target.account.name
            )
        } else {
            "Print the unit with `oxidepm startup` and install it on a host that boots with systemd; \
             in a container run `oxidepmd --foreground --attach <file>` as its command instead"
                .to_string()
        };
        return Err(InstallError::NoSystemd { path, detail, hint });
    }
    std::fs::create_dir_all(&target.dir).map_err(|source| InstallError::CreateDir {
        dir: target.dir.clone(),
        source,
    })?;
    let before = std::fs::read(&path).ok();
    let tmp = target.dir.join(format!(".{}.tmp", target.name));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            InstallError::Write {
                path: path.clone(),
                source,
            }
        })?;
    let steps: [&[&str]; 2] = [&["daemon-reload"], &["enable", &target.name]];
    for args in steps {
        if let Err(detail) = step(target, args) {
            match &before {
                Some(old) => {
                    let _ = std::fs::write(&path, old);
                }
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
            let _ = step(target, &["daemon-reload"]);
            return Err(InstallError::Systemctl {
                step: args.join(" "),
                detail,
                path,
            });
        }
    }
    let user = if target.user_unit { "--user " } else { "" };
    Ok(format!(
        "wrote {}\nenabled {}; start it now with: systemctl {user}start {}\n",
        path.display(),
        target.name,
        target.name
    ))
}

/// `oxidepm unstartup [--user] [--run-as USER]`: disables and removes the
/// unit `startup --write` installed for this home. A missing unit is an
/// error (exit 1), as `systemctl disable` of a missing unit is.
pub fn uninstall(user_unit: bool, run_as: Option<&str>) -> Result<(), InstallError> {
    let target = Target::resolve(user_unit, run_as)?;
    let path = target.path();
    if !path.exists() {
        return Err(InstallError::NoUnit {
            path,
            user: user_unit,
            home: target.home,
        });
    }
    if !user_unit && !nix::unistd::geteuid().is_root() {
        return Err(InstallError::NeedsRoot {
            path,
            what: "remove",
            sudo: target.sudo_line("unstartup"),
        });
    }
    let user = if user_unit { "--user " } else { "" };
    match step(&target, &["disable", &target.name]) {
        Ok(()) => outln!("disabled {}", target.name),
        Err(e) => outln!(
            "systemctl {user}disable {} failed ({e}); removing the file only",
            target.name
        ),
    }
    std::fs::remove_file(&path).map_err(|source| InstallError::Remove {
        path: path.clone(),
        source,
    })?;
    outln!("removed {}", path.display());
    let _ = step(&target, &["daemon-reload"]);
    outln!(
        "a daemon it started keeps running until stopped: `oxidepm kill` (or `systemctl {user}stop {}`)",
        target.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_tags_are_readable_and_tell_similar_paths_apart() {
        let a = home_tag(Path::new("/srv/apps/pm"));
        assert!(a.starts_with("srv-apps-pm-"), "{a}");
        assert_ne!(home_tag(Path::new("/a-b")), home_tag(Path::new("/a/b")));
        let long = home_tag(Path::new(&format!("/{}", "x".repeat(300))));
        assert!(long.len() < 48, "{long}");
    }

    fn target(home: &str) -> Target {
        let account = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .unwrap();
        Target {
            user_unit: true,
            account,
            home: PathBuf::from(home),
            name: "oxidepm.service".into(),
            dir: PathBuf::from("/nonexistent"),
        }
    }

    #[test]
    fn a_home_path_cannot_add_lines_or_expand_variables_in_the_unit() {
        // A line break would start a directive of its own.
        let evil = "/srv/x\nExecStartPre=/tmp/evil\n";
        assert!(unit(&target(evil), "/usr/bin/oxidepmd").is_err());
        assert!(unit(&target("/srv/x"), "/usr/bin/ox\u{1b}idepmd").is_err());
        // systemd expands $VAR in ExecStart: a literal $ is written $$.
        let text = unit(&target("/srv/a$USER"), "/usr/bin/oxidepmd").unwrap();
        let exec = text.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        assert!(exec.ends_with("--home /srv/a$$USER"), "{exec}");
        assert!(
            text.contains("Environment=OXIDEPM_HOME=/srv/a$USER\n"),
            "{text}"
        );
    }

    #[test]
    fn quoting_keeps_spaces_and_specifiers_literal() {
        assert_eq!(unit_quote("/opt/my home"), "\"/opt/my home\"");
        assert_eq!(unit_quote("/a%b"), "/a%%b");
        assert_eq!(shell_quote("/usr/bin/oxidepm"), "/usr/bin/oxidepm");
        assert_eq!(shell_quote("/it's"), r"'/it'\''s'");
    }
}
