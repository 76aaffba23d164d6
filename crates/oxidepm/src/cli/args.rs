//! The command line.

use clap::{Args, Parser, Subcommand};

/// oxidepm: a process manager that knows who is asking.
#[derive(Parser, Debug)]
#[command(name = "oxidepm", version, about, propagate_version = true)]
pub struct Cli {
    /// Print the daemon's answer as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
// Parsed once per process; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a command (after `--`), the apps of a config file, or existing apps.
    Start(StartArgs),
    /// Stop apps (name, id, `all`, `@tag`).
    Stop {
        /// Apps to stop.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Restart apps.
    Restart {
        /// Apps to restart.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Stop apps and forget them.
    #[command(visible_aliases = ["del", "rm"])]
    Delete {
        /// Apps to delete.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// List apps.
    #[command(visible_aliases = ["ls", "list"])]
    Status,
    /// Show everything about apps.
    #[command(visible_alias = "describe")]
    Show {
        /// Apps to show.
        target: String,
    },
    /// Print an app's log.
    Logs {
        /// App (or selector).
        target: String,
        /// Lines from the end of each stream.
        #[arg(long, short = 'n', default_value_t = 15)]
        lines: usize,
        /// Keep printing new lines.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Standard output only.
        #[arg(long, conflicts_with = "err")]
        out: bool,
        /// Standard error only.
        #[arg(long)]
        err: bool,
        /// Print the apps' bytes as they are, control characters included
        /// (on a terminal they are shown escaped by default).
        #[arg(long)]
        raw: bool,
    },
    /// Lifecycle events with the actor that caused them.
    Events {
        /// App (or selector); every app when absent.
        target: Option<String>,
        /// Most recent events.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Stream new events as they happen (until Ctrl-C) instead.
        #[arg(long, short = 'f')]
        follow: bool,
        /// With --follow: only these kinds (`started`, `exited`, …,
        /// `refusal`); repeat or separate with commas.
        #[arg(long = "kind", value_delimiter = ',', requires = "follow")]
        kinds: Vec<String>,
    },
    /// Empty log files.
    Flush {
        /// App (or selector); every app when absent.
        target: Option<String>,
    },
    /// Save the running apps as a snapshot.
    Save {
        /// Snapshot name (default: `default`).
        name: Option<String>,
    },
    /// Start the apps of a saved snapshot.
    Resurrect {
        /// Snapshot name (default: `default`).
        name: Option<String>,
    },
    /// Check that the daemon answers (starting it if needed).
    Ping,
    /// Who the daemon thinks you are.
    Whoami,
    /// Audited requests.
    Audit {
        /// Only requests that touched this app.
        #[arg(long)]
        app: Option<String>,
        /// Only requests by this actor (class:label).
        #[arg(long)]
        actor: Option<String>,
        /// Only requests at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Most recent rows.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// A live dashboard: apps, the selected app's log, events, lanes.
    Monit,
    /// Agent lanes: sockets, ACL users, streams with length and pending.
    Lanes,
    /// The bridge's routes: list, add, rm.
    Route {
        /// What to do.
        #[command(subcommand)]
        action: RouteAction,
    },
    /// Stop every app, then the daemon.
    Kill,
    /// Print (or install) a systemd unit that starts the daemon at boot.
    Startup {
        /// A user unit (~/.config/systemd/user) instead of a system one.
        #[arg(long)]
        user: bool,
        /// Write the unit and enable it, instead of printing it.
        #[arg(long)]
        write: bool,
    },
}

/// Arguments of `start`.
#[derive(Args, Debug)]
pub struct StartArgs {
    /// An app file (.toml, .yaml, .json, ecosystem.config.js, ...), a
    /// script (app.js, worker.py, run.sh), a program with its arguments
    /// after `--`, or existing apps.
    pub target: Option<String>,
    /// The command to run, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
    /// App name (default: the script's or the program's file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Working directory (default: the current one).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long, value_name = "K=V")]
    pub env: Vec<String>,
    /// File of KEY=VALUE lines.
    #[arg(long, value_name = "FILE")]
    pub env_file: Option<String>,
    /// Tag (repeatable); select with @tag.
    #[arg(long)]
    pub tag: Vec<String>,
    /// always | on-failure | never.
    #[arg(long)]
    pub restart: Option<String>,
    /// Delay before a restart (ms, or with a unit: 2s).
    #[arg(long, value_name = "MS")]
    pub restart_delay: Option<String>,
    /// Unstable restarts in a row before the app is errored.
    #[arg(long)]
    pub max_restarts: Option<u32>,
    /// Uptime after which a run is stable (ms, or with a unit).
    #[arg(long, value_name = "MS")]
    pub min_uptime: Option<String>,
    /// Time between the stop signal and SIGKILL (ms, or with a unit).
    #[arg(long, value_name = "MS")]
    pub kill_timeout: Option<String>,
    /// Signal that stops the app (default SIGTERM).
    #[arg(long, value_name = "SIG")]
    pub stop_signal: Option<String>,
    /// Run as this user (the daemon must run as root).
    #[arg(long)]
    pub user: Option<String>,
    /// Restart when the tree's memory exceeds this (200M, 1G).
    #[arg(long, value_name = "SIZE")]
    pub max_memory_restart: Option<String>,
    /// Restart on this cron schedule.
    #[arg(long, value_name = "CRON")]
    pub cron_restart: Option<String>,
    /// app | agent | adapter.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only a human may stop, restart, change or delete it.
    #[arg(long)]
    pub protected: bool,
    /// Do not prefix log lines with a timestamp.
    #[arg(long)]
    pub no_timestamps: bool,
    /// Where the app's output goes: files, journald or both (default:
    /// daemon.toml's log_target).
    #[arg(long, value_name = "TARGET", value_parser = oxidepm_proto::LogTarget::parse)]
    pub log_target: Option<oxidepm_proto::LogTarget>,
    /// Program that runs the script (default by extension: .js node, .py
    /// python3, .sh sh; `none`: the script runs itself).
    #[arg(long, value_name = "PROGRAM")]
    pub interpreter: Option<String>,
    /// Options for the interpreter, before the script ("--inspect").
    #[arg(
        long,
        visible_alias = "node-args",
        value_name = "ARGS",
        allow_hyphen_values = true
    )]
    pub interpreter_args: Option<String>,
    /// Change an app that exists with another spec (else refused, with
    /// what differs).
    #[arg(long)]
    pub update: bool,
}

/// `route` subcommands.
#[derive(Subcommand, Debug)]
pub enum RouteAction {
    /// List routes and the bridge's counters.
    #[command(visible_alias = "ls")]
    List,
    /// Add a route.
    Add(RouteArgs),
    /// Remove a route added at runtime.
    Rm(RouteArgs),
}

/// A route on the command line.
#[derive(Args, Debug)]
pub struct RouteArgs {
    /// Source (webhook, email, ...).
    #[arg(long)]
    pub source: String,
    /// Match this channel.
    #[arg(long)]
    pub channel: Option<String>,
    /// Match this guild.
    #[arg(long)]
    pub guild: Option<String>,
    /// Match this address.
    #[arg(long)]
    pub address: Option<String>,
    /// The agent that gets the messages.
    #[arg(long)]
    pub agent: String,
}

impl RouteArgs {
    /// The route.
    pub fn route(self) -> oxidepm_proto::Route {
        oxidepm_proto::Route {
            source: self.source,
            channel: self.channel,
            guild: self.guild,
            address: self.address,
            agent: self.agent,
        }
    }
}
