//! `oxidepmd`'s command line: the daemon in the foreground or detached, or
//! the log writer of one app run (`oxidepmd __logshim …`).

use crate::daemon::daemon_log::DaemonLog;
use crate::daemon::journal_log;
use crate::daemon::{self, Options};
use crate::paths::lock::{DaemonLock, LockError};
use crate::paths::Home;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// The oxidepm daemon: supervises apps and answers the `oxidepm` CLI.
#[derive(Parser, Debug)]
#[command(name = "oxidepmd", version, about)]
struct Args {
    /// Stay in the foreground (for systemd and containers); by default the
    /// daemon detaches and logs to $OXIDEPM_HOME/daemon.log.
    #[arg(long)]
    foreground: bool,
    /// Start the apps that were running when the daemon last stopped.
    #[arg(long)]
    resurrect: bool,
    /// Home directory (default: $OXIDEPM_HOME, else ~/.oxidepm).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Log to the home's daemon.log, rotated by size (given by the
    /// detaching parent, which points stdout and stderr there too).
    #[arg(long, hide = true)]
    daemon_log: bool,
    /// Container mode (like pm2-runtime): run this app file's apps in the
    /// foreground, their output on stdout/stderr as `app | line`; SIGTERM
    /// stops them; exits with their status once they have all ended (78
    /// when the file cannot be used).
    #[arg(long, value_name = "FILE")]
    attach: Option<PathBuf>,
    /// With --attach: apply the file's `env_<NAME>` sections.
    #[arg(long = "env", value_name = "NAME", requires = "attach")]
    env_name: Option<String>,
    /// With --attach: only these apps of the file.
    #[arg(long, value_name = "A,B", requires = "attach", value_delimiter = ',')]
    only: Vec<String>,
}

/// `oxidepmd`: parses the command line, then runs the daemon (or, as
/// `oxidepmd __logshim …`, one app's log writer).
pub fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "__logshim") {
        return run_shim(&argv[2..]);
    }
    let args = Args::parse();
    // The file is read before anything else: a file that cannot be used
    // starts nothing, not even the daemon.
    let attach = match &args.attach {
        Some(file) => match daemon::attach::load(file, args.env_name.clone(), args.only.clone()) {
            Ok(a) => Some(a),
            Err(e) => {
                eprintln!("oxidepmd: {e}");
                return ExitCode::from(daemon::attach::EX_CONFIG);
            }
        },
        None => None,
    };
    let home = match args.home {
        Some(h) => Home::at(h),
        None => Home::from_env(),
    };
    let Some(lock) = claim_home(&home) else {
        return ExitCode::FAILURE;
    };
    if !args.foreground && attach.is_none() {
        drop(lock);
        return daemon::detach(&home, args.resurrect);
    }
    let config = daemon::config::Config::load(&home.config());
    start_logging(&home, &config, args.daemon_log, attach.as_ref());
    if let Err(e) = config {
        eprintln!("oxidepmd: {e}");
        return ExitCode::FAILURE;
    }
    match daemon::run(
        Options {
            home,
            resurrect: args.resurrect,
            attach,
        },
        lock,
    ) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            log::error!("{e}");
            eprintln!("oxidepmd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The home checked and made private, and its lock taken; none (said on
/// stderr) when another daemon has it or the home is refused.
fn claim_home(home: &Home) -> Option<DaemonLock> {
    // Everything the daemon creates (sockets, state, secrets, logs) is
    // private to its user from the moment it exists.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    if let Err(e) = daemon::prepare_home(home) {
        eprintln!("oxidepmd: refusing the home {}: {e}", home.root().display());
        return None;
    }
    match DaemonLock::acquire(home) {
        Ok(l) => Some(l),
        Err(e @ LockError::Held { .. }) => {
            eprintln!(
                "oxidepmd: {e} ({}); use `oxidepm kill` to stop it, or set OXIDEPM_HOME to run another",
                home.root().display()
            );
            None
        }
        Err(e) => {
            eprintln!("oxidepmd: {e}");
            None
        }
    }
}

/// The daemon's log: at daemon.toml's level (`OXIDEPM_LOG` over it), to
/// the rotated daemon.log when detached, to the attached file's output in
/// container mode, to the journal under systemd, else to stderr.
fn start_logging(
    home: &Home,
    config: &Result<daemon::config::Config, daemon::config::ConfigError>,
    daemon_log: bool,
    attach: Option<&daemon::attach::Attach>,
) {
    let level = match config {
        Ok(c) => c.log_level.clone(),
        Err(_) => "info".into(),
    };
    let mut logger = env_logger::Builder::new();
    logger
        .parse_filters(&std::env::var("OXIDEPM_LOG").unwrap_or(level))
        .format_timestamp_millis();
    if daemon_log {
        let defaults = daemon::config::Config::default();
        let c = config.as_ref().unwrap_or(&defaults);
        match DaemonLog::open(
            home.root(),
            "daemon.log".as_ref(),
            c.daemon_log_max_bytes,
            c.daemon_log_keep,
            true,
        ) {
            Ok(log) => {
                logger.target(env_logger::Target::Pipe(Box::new(log)));
            }
            // stderr is daemon.log too, only never rotated.
            Err(e) => eprintln!(
                "oxidepmd: cannot open {} to rotate it ({e}); logging to stderr",
                home.daemon_log().display()
            ),
        }
    }
    if let Some(a) = attach {
        // Never blocking on a stderr nobody reads.
        logger.target(env_logger::Target::Pipe(Box::new(a.outputs.log_writer())));
    }
    if attach.is_none() && journal_log::stderr_is_journal() {
        match journal_log::JournalLogger::connect() {
            Ok(j) => {
                let _ = journal_log::JournalLogger::new(logger.build(), j).install();
            }
            Err(e) => {
                eprintln!("oxidepmd: cannot log to the journal ({e}); logging to stderr");
                logger.init();
            }
        }
    } else {
        logger.init();
    }
}

/// The log writer's code, run by the daemon's own program when
/// `oxidepm-logwriter` is not installed beside it.
fn run_shim(args: &[std::ffi::OsString]) -> ExitCode {
    match oxidepm_logwriter::main_with_args(args) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
