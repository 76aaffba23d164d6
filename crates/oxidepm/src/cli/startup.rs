//! `oxidepm startup`: a systemd unit that runs the daemon at boot.

use crate::paths::Home;
use std::path::PathBuf;

/// Why the unit file could not be written.
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
}

/// The unit file text for a daemon on `home`.
pub fn unit(home: &Home, daemon: &str, user_unit: bool) -> String {
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten();
    let run_as = match (&me, user_unit) {
        (Some(u), false) if !u.uid.is_root() => format!("User={}\n", u.name),
        _ => String::new(),
    };
    let wanted_by = if user_unit {
        "default.target"
    } else {
        "multi-user.target"
    };
    let home = home.root().display();
    format!(
        "[Unit]\n\
Description=oxidepm process manager ({home})\n\
After=network-online.target\n\
Wants=network-online.target\n\
\n\
[Service]\n\
Type=notify\n\
NotifyAccess=main\n\
{run_as}Environment=OXIDEPM_HOME={home}\n\
ExecStart={daemon} --foreground --resurrect --home {home}\n\
# `systemctl stop` sends SIGTERM to the daemon alone, which stops every app\n\
# gracefully first. When the daemon crashes or is restarted on its own,\n\
# KillMode=process leaves the apps running; the next daemon re-adopts them.\n\
KillMode=process\n\
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
    )
}

/// Where the unit file goes.
pub fn unit_path(user_unit: bool) -> PathBuf {
    if user_unit {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
            .unwrap_or_else(|| PathBuf::from(".config"));
        base.join("systemd/user/oxidepm.service")
    } else {
        PathBuf::from("/etc/systemd/system/oxidepm.service")
    }
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

/// Writes the unit and enables it with systemctl when there is one.
pub fn install(text: &str, user_unit: bool) -> Result<String, InstallError> {
    let path = unit_path(user_unit);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| InstallError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    if let Err(source) = std::fs::write(&path, text) {
        return Err(InstallError::Write { path, source });
    }
    let mut said = format!("wrote {}\n", path.display());
    let scope: &[&str] = if user_unit { &["--user"] } else { &[] };
    let run = |args: &[&str]| {
        std::process::Command::new("systemctl")
            .args(scope)
            .args(args)
            .output()
    };
    match run(&["daemon-reload"]) {
        Ok(o) if o.status.success() => match run(&["enable", "oxidepm.service"]) {
            Ok(o) if o.status.success() => {
                said.push_str("enabled oxidepm.service; start it now with: systemctl ");
                said.push_str(if user_unit { "--user " } else { "" });
                said.push_str("start oxidepm\n");
            }
            _ => said.push_str("systemctl enable failed; enable the unit by hand\n"),
        },
        _ => said.push_str(
            "systemd is not running here (or systemctl is missing); enable the unit by hand where it is\n",
        ),
    }
    Ok(said)
}
