//! `oxidepm mcp`: a Model Context Protocol server over stdio, for AI
//! coding agents. It is a client of the daemon like the CLI, on
//! `agent.sock` by default, so whatever a model or its configuration
//! claims, the daemon decides who is asking; every tool call is one
//! audited request naming the tool (`via mcp:<tool>`).
//!
//! `transport` reads and writes bounded lines, `server` answers the
//! protocol, `tools` turns a tool call into daemon requests, `wait` waits
//! for an app, `resources` serves logs and events as resources and
//! `subscribe` tells their updates, `ports` finds listening ports, and
//! `bounds` holds every limit.

// A process of its own, like the CLI: the blocking client runs on
// blocking threads (spawn_blocking), never on the runtime's.
#![allow(clippy::disallowed_methods)]

mod bounds;
mod daemon;
mod lane;
mod ports;
mod resources;
mod server;
mod subscribe;
mod tools;
mod transport;
mod wait;

use crate::paths::Home;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `oxidepm mcp`'s options.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// The daemon's socket: `agent.sock` (the default: every call is class
    /// ai), `daemon.sock` for a person's rights (refused inside an agent's
    /// or an AI-defined app's tree), or a path.
    #[arg(long, value_name = "SOCKET", default_value = "agent.sock")]
    pub socket: String,
    /// Start the daemon when none runs (by default the server never does).
    #[arg(long)]
    pub start_daemon: bool,
    /// A tool result's bound in bytes (larger results are cut, and say so).
    #[arg(long, value_name = "BYTES", default_value_t = bounds::DEFAULT_RESULT,
          value_parser = clap::value_parser!(usize))]
    pub max_result_bytes: usize,
    /// Tool calls run at once; the others wait their turn.
    #[arg(long, value_name = "N", default_value_t = bounds::DEFAULT_CALLS)]
    pub max_calls: usize,
}

/// Runs the server until the client closes its end.
pub fn main(args: McpArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "oxidepm mcp: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: McpArgs) -> Result<(), String> {
    if !(1024..=bounds::MAX_MESSAGE / 2).contains(&args.max_result_bytes) {
        return Err(format!(
            "--max-result-bytes must be from 1024 to {} (a result travels in one message of at most {} bytes)",
            bounds::MAX_MESSAGE / 2,
            bounds::MAX_MESSAGE
        ));
    }
    if !(1..=64).contains(&args.max_calls) {
        return Err("--max-calls must be from 1 to 64".into());
    }
    let home = Home::from_env();
    let socket = socket_path(&home, &args.socket);
    let agent = socket == home.agent_socket();
    if args.start_daemon {
        crate::cli::connect::client(true).map_err(|e| e.to_string())?;
    }
    let daemon = daemon::Daemon::new(socket, agent);
    // A person's socket is refused at once when the daemon can already say
    // this process is an agent's; with no daemon yet, at the first call.
    if !agent {
        if let Err(daemon::Refusal::Tree(why)) = daemon.check_identity() {
            return Err(why);
        }
    }
    let bounds = bounds::Bounds {
        result_bytes: args.max_result_bytes,
        calls: args.max_calls,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(bounds.calls + 4)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    rt.block_on(server::serve(daemon, bounds))
}

/// `name` as a socket: `agent.sock` and `daemon.sock` are the home's, any
/// other text a path.
fn socket_path(home: &Home, name: &str) -> PathBuf {
    match name {
        "agent.sock" | "agent" => home.agent_socket(),
        "daemon.sock" | "daemon" => home.daemon_socket(),
        path => PathBuf::from(path),
    }
}
