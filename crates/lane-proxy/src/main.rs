//! `oxidepm-lane-proxy`, the per-agent Redis auth proxy.
//!
//! Serves `<lanes_dir>/<agent>.sock` for every agent of the configuration
//! file (see `oxidepm_lanes::ProxyConfig`), or the listening sockets it
//! inherits by socket activation (named by FileDescriptorName). Runs in the
//! foreground and logs to stderr (`RUST_LOG`, default `info`). SIGHUP
//! re-reads the configuration; SIGTERM and SIGINT stop it cleanly.

use clap::Parser;
use oxidepm_lane_proxy::{activation, run, runtime};
use std::path::PathBuf;
use std::process::ExitCode;

/// The per-agent Redis auth proxy of oxidepm's message lanes.
#[derive(Parser, Debug)]
#[command(name = "oxidepm-lane-proxy", version, about)]
struct Args {
    /// The JSON configuration file (upstream, lanes_dir, agents).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Worker threads (default 2; 1 runs everything on one thread).
    #[arg(long, value_name = "N", default_value_t = 2)]
    threads: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_target(false)
        .init();
    // Before any thread exists: this also clears the LISTEN_* variables.
    let activated = match activation::take_from_env() {
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
