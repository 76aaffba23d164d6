//! `oxidepm-bridge`, the bridge between the outside world and the lanes.
//!
//! Routes inbound messages (the webhook listener, …) into
//! `<agent>:<source>:inbox` and delivers every `<agent>:<source>:outbox`,
//! as the Redis user `bridge`; see the `oxidepm_bridge` library. Runs in the
//! foreground and logs to stderr (`RUST_LOG`, default `info`). SIGHUP
//! re-reads the configuration without dropping anything; SIGTERM and
//! SIGINT stop it cleanly.

use clap::Parser;
use oxidepm_bridge as bridge;
use std::path::PathBuf;
use std::process::ExitCode;

/// The bridge of oxidepm's message lanes.
#[derive(Parser, Debug)]
#[command(name = "oxidepm-bridge", version, about)]
struct Args {
    /// The JSON configuration file (see oxidepm_lanes::bridge_config).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Worker threads. The default, 1, is the most efficient: the work is
    /// I/O, and one thread avoids waking another for each message.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_target(false)
        .init();
    let rt = match bridge::runtime(args.threads) {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(bridge::run(args.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
