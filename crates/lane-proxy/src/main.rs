//! `oxidepm-lane-proxy`, the per-agent Redis auth proxy.
//!
//! Serves `<lanes_dir>/<agent>.sock` for every agent of the configuration
//! file (see `oxidepm_lanes::ProxyConfig`), or the listening sockets it
//! inherits by socket activation (named by FileDescriptorName). Runs in the
//! foreground and logs to stderr (`RUST_LOG`, default `info`). SIGHUP
//! re-reads the configuration; SIGTERM and SIGINT stop it cleanly. The
//! configuration's `key_form` is fixed for the process when it is first
//! applied, before any key is built; a reload that names another form is
//! refused, with the reason, and changes nothing.

use oxidepm_lane_proxy::{run, runtime, take_from_env};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
oxidepm's per-agent Redis auth proxy: one unix socket per agent, the socket is the identity

Usage: oxidepm-lane-proxy --config <FILE> [--threads <N>]

Options:
      --config <FILE>  The JSON configuration file (upstream, lanes_dir, agents)
      --threads <N>    Worker threads (default 1: everything on one thread, the cheapest
                       for a relay; more spread the lanes over that many threads)
  -h, --help           Print help
  -V, --version        Print version";

/// The command line.
struct Args {
    config: PathBuf,
    threads: usize,
}

/// What the command line asks for. A hand-sized parser (lexopt) keeps the
/// proxy's dependency tree small: it is the crate a security review reads.
enum Cli {
    Run(Args),
    Help,
    Version,
}

fn parse_args() -> Result<Cli, lexopt::Error> {
    use lexopt::prelude::*;
    let mut config = None;
    // One thread: the proxy mostly relays bytes, and a second worker costs
    // more in wake-ups between threads (futex, eventfd, stealing) than it
    // adds; measured with `oxidepm-bench proxy`.
    let mut threads = 1;
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("config") => config = Some(PathBuf::from(parser.value()?)),
            Long("threads") => threads = parser.value()?.parse()?,
            Short('h') | Long("help") => return Ok(Cli::Help),
            Short('V') | Long("version") => return Ok(Cli::Version),
            _ => return Err(arg.unexpected()),
        }
    }
    let config = config.ok_or("the option --config <FILE> is required")?;
    Ok(Cli::Run(Args { config, threads }))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Cli::Run(a)) => a,
        Ok(Cli::Help) => {
            // A closed stdout (`| head`) is not an error worth a panic.
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Version) => {
            let _ = writeln!(
                std::io::stdout(),
                "oxidepm-lane-proxy {}",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_target(false)
        .init();
    // Before any thread exists: this also clears the LISTEN_* variables.
    let activated = match take_from_env() {
        Ok(a) => a,
        Err(e) => {
            log::error!("socket activation: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match runtime(args.threads) {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args.config, activated)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
