//! The log writer's interface as the daemon sees it; the writer itself is
//! the `oxidepm-logwriter` crate (one copy of its logic, run either as the
//! `oxidepm-logwriter` program or as `oxidepmd __logshim`).

#[cfg(test)]
pub use oxidepm_logwriter::copy_stream;
pub use oxidepm_logwriter::{WriterConfig as ShimConfig, ERR_INPUT_FD, MARKER};

use oxidepm_logwriter::JournalTarget;
use oxidepm_proto::{AppSpec, LogTarget};
use std::path::PathBuf;

/// Where apps' output goes unless an app says otherwise, and the journal's
/// socket (the writer starts with an empty environment, so it is passed).
#[derive(Debug, Clone)]
pub struct LogOutput {
    /// daemon.toml's `log_target`.
    pub default: LogTarget,
    /// The journal's socket: `OXIDEPM_JOURNAL_SOCKET`, else journald's.
    pub socket: PathBuf,
}

impl Default for LogOutput {
    fn default() -> LogOutput {
        LogOutput::new(LogTarget::Files)
    }
}

impl LogOutput {
    /// `default` for apps without their own target, the socket from the environment.
    pub fn new(default: LogTarget) -> LogOutput {
        LogOutput {
            default,
            socket: oxidepm_logwriter::journal::socket_path(),
        }
    }

    /// Warns when daemon.toml sends apps to a journal that is not there
    /// (their output then goes to their log files).
    pub fn check(&self) {
        if self.default != LogTarget::Files && !self.socket.exists() {
            log::warn!(
                "log_target = \"{}\" in daemon.toml, but there is no journal socket at {} \
                 (is systemd-journald running? OXIDEPM_JOURNAL_SOCKET moves it); \
                 app output goes to the log files until it appears",
                self.default.as_str(),
                self.socket.display()
            );
        }
    }

    /// The writer's configuration for one run of `spec`.
    pub fn shim_config(&self, spec: &AppSpec, out_path: PathBuf, err_path: PathBuf) -> ShimConfig {
        let target = spec.log_target.unwrap_or(self.default);
        let journal = (target != LogTarget::Files).then(|| JournalTarget {
            identifier: spec.name.clone(),
            socket: self.socket.clone(),
        });
        ShimConfig {
            out_path,
            err_path,
            timestamps: spec.log_timestamps,
            max_bytes: spec.log_max_bytes,
            keep: spec.log_keep,
            journal,
            files: target != LogTarget::Journald,
        }
    }
}
