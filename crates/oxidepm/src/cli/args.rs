//! The command line.

use clap::{Args, Parser, Subcommand};

/// oxidepm: a process manager that knows who is asking.
#[derive(Parser, Debug)]
#[command(
    name = "oxidepm",
    version,
    about,
    propagate_version = true,
    after_help = super::help::MAIN
)]
pub struct Cli {
    /// Print the daemon's answer as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// No colour, even on a terminal (as NO_COLOR=1 does).
    #[arg(long, global = true)]
    pub no_color: bool,
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
    #[command(after_help = super::help::START)]
    Start(StartArgs),
    /// Stop apps (name, id, `all`, `@tag`, or an app file: its apps).
    #[command(after_help = super::help::STOP)]
    Stop {
        /// Apps to stop.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// Restart apps (name, id, `all`, `@tag`, or an app file: its apps).
    #[command(after_help = super::help::RESTART)]
    Restart {
        /// Apps to restart.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// Stop apps and forget them (an app file: its apps).
    #[command(visible_aliases = ["del", "rm"])]
    Delete {
        /// Apps to delete.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// List apps; with apps named, exit 0 when all run, 3 when one does
    /// not, 4 when one is unknown (as `systemctl status`).
    #[command(visible_aliases = ["ls", "list"], after_help = super::help::STATUS)]
    Status {
        /// Only these apps (name, id, `all`, `@tag`).
        #[arg(add = app_names())]
        targets: Vec<String>,
    },
    /// Show everything about apps, with their last log lines.
    #[command(visible_alias = "describe", after_help = super::help::SHOW)]
    Show {
        /// Apps to show.
        #[arg(add = app_names())]
        target: String,
        /// Log lines shown after each app (0: none).
        #[arg(long, short = 'n', default_value_t = 10)]
        lines: usize,
    },
    /// Print the apps' logs (every app when none is named, merged by time).
    #[command(after_help = super::help::LOGS)]
    Logs {
        /// App (or selector); every app you may read when absent.
        #[arg(add = app_names())]
        target: Option<String>,
        /// Lines from the end of each stream (default 15; all the lines
        /// of the window with --since or --until).
        #[arg(long, short = 'n')]
        lines: Option<usize>,
        /// Only lines from this time on: `10m`, `2h`, `1d` ago, a date
        /// (`2026-11-30`, UTC) or an RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only lines up to this time (same forms as --since).
        #[arg(long, value_name = "WHEN", conflicts_with = "follow")]
        until: Option<String>,
        /// Keep printing new lines.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Standard output only.
        #[arg(long, conflicts_with = "err")]
        out: bool,
        /// Standard error only.
        #[arg(long)]
        err: bool,
        /// Only the apps' lines, without the `app|out| <time>` prefix
        /// (pm2's `--raw`, journalctl's `-o cat`).
        #[arg(long)]
        raw: bool,
        /// Print the apps' bytes as they are, control characters included
        /// (on a terminal they are shown escaped by default).
        #[arg(long)]
        no_escape: bool,
        /// Only the lines holding this text, searched in every kept file
        /// (current and rotated): the newest --lines matches (default 15).
        #[arg(long, value_name = "TEXT")]
        grep: Option<String>,
        /// --grep is a regular expression, not plain text.
        #[arg(long, requires = "grep")]
        regex: bool,
        /// Lines of context before and after each match (at most 10).
        #[arg(
            long,
            short = 'C',
            value_name = "N",
            default_value_t = 0,
            requires = "grep"
        )]
        context: u32,
    },
    /// Lifecycle events with the actor that caused them.
    Events {
        /// App (or selector); every app when absent.
        #[arg(add = app_names())]
        target: Option<String>,
        /// Most recent events.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only events from this time on: `1h` ago, a date or an RFC 3339
        /// time (not with --follow).
        #[arg(long, value_name = "WHEN", conflicts_with = "follow")]
        since: Option<String>,
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
        #[arg(add = app_names())]
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
    /// Serve the Model Context Protocol on stdin/stdout, for AI agents
    /// (on agent.sock: every call is class ai; see docs/mcp.md).
    Mcp(crate::mcp::McpArgs),
    /// Audited requests.
    #[command(after_help = super::help::AUDIT)]
    Audit {
        /// Only requests that touched this app.
        #[arg(long)]
        app: Option<String>,
        /// Only requests by this actor (`class:label`), or by any actor of
        /// a class (`human`, `ai`, `adapter`, `system`).
        #[arg(long)]
        actor: Option<String>,
        /// Only requests from this time on: `1h` ago, a date or an RFC
        /// 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only requests up to this time (same forms as --since).
        #[arg(long, value_name = "WHEN")]
        until: Option<String>,
        /// Most recent rows.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// A live dashboard: apps, the selected app's log, events, lanes.
    Monit,
    /// Agent lanes: sockets, ACL users, streams with length and pending.
    Lanes {
        /// What else to do (nothing: show the lanes).
        #[command(subcommand)]
        action: Option<LanesAction>,
    },
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
        /// The account a system unit runs the daemon as (default: you);
        /// the line `startup` prints for `sudo` passes it.
        #[arg(long, value_name = "USER")]
        run_as: Option<String>,
    },
    /// Replace apps' processes: zero-downtime for an app with a health
    /// check (the new one healthy before the old one stops), else a restart.
    Reload {
        /// Apps to reload.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// Send a signal to apps' main processes (`signal USR1 web`).
    #[command(alias = "sendSignal")]
    Signal {
        /// SIGUSR1, USR1, usr1 or a number.
        signal: String,
        /// Apps to signal.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// Zero apps' restart counters; an errored app becomes stopped.
    Reset {
        /// Apps to reset.
        #[arg(required = true, add = app_names())]
        targets: Vec<String>,
    },
    /// Run N instances of an app (`<name>-0` … `<name>-N-1`).
    Scale {
        /// The instance group (its name, or `@name`).
        #[arg(add = app_names())]
        target: String,
        /// How many instances.
        instances: u32,
    },
    /// Disable and remove the unit `startup --write` installed.
    Unstartup {
        /// The user unit instead of the system one.
        #[arg(long)]
        user: bool,
        /// The account whose system unit to remove (default: you).
        #[arg(long, value_name = "USER")]
        run_as: Option<String>,
    },
    /// Make the daemon read daemon.toml again without stopping any app
    /// (as SIGHUP does); it says what it applied and what waits for the
    /// next start.
    ReloadDaemonConfig,
    /// Print an app file of any kind (supervisord, systemd, pm2) as oxidepm TOML.
    ///
    /// Each setting without an exact equivalent gets a `#` comment. Example:
    /// `oxidepm import /etc/supervisor/supervisord.conf > apps.toml`
    Import(super::import::ImportArgs),
    /// Print a shell's completion script (`oxidepm completions bash >
    /// /etc/bash_completion.d/oxidepm`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (`oxidepm man > oxidepm.1`).
    Man,
}

/// Arguments of `start`.
#[derive(Args, Debug)]
pub struct StartArgs {
    /// An app file (.toml, .yaml, .json, ecosystem.config.js, ...), a
    /// script (app.js, worker.py, run.sh), a program with its arguments
    /// after `--`, or existing apps.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::extras::files_or_apps))]
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
    /// Environment variable KEY=VALUE (repeatable); with a config file, a
    /// bare NAME applies its apps' env_NAME sections (pm2's --env production).
    #[arg(long, value_name = "K=V|NAME")]
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
    /// Restart when a file changes: the cwd, or `--watch=src,lib`.
    #[arg(long, value_name = "PATHS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub watch: Option<String>,
    /// With --watch: names or globs not to watch (node_modules and .git never are).
    #[arg(long, value_name = "GLOB")]
    pub ignore_watch: Vec<String>,
    /// With --watch: quiet time after a change before the restart (ms, or with a unit).
    #[arg(long, value_name = "MS")]
    pub watch_delay: Option<String>,
    /// app | agent | adapter | responder.
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
    /// With a config file: start only these of its apps (pm2's --only a,b).
    #[arg(long, value_name = "APPS", value_delimiter = ',')]
    pub only: Vec<String>,
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
    /// Run N instances `<name>-0` … `<name>-N-1` (pm2's `-i N`; cluster
    /// mode and "max" are refused).
    #[arg(long, short = 'i', value_name = "N", value_parser = super::appfile::instances_arg)]
    pub instances: Option<u32>,
}

/// `lanes` subcommands.
#[derive(Subcommand, Debug)]
pub enum LanesAction {
    /// Free a name another host holds on the shared Redis (that host is
    /// gone for good): its agent there loses the name at its next renewal.
    Release {
        /// The agent or responder name.
        name: String,
        /// Required: this takes a name from another host.
        #[arg(long, required = true)]
        force: bool,
    },
    /// Rename this host's agents' streams from the plain key form
    /// (`alice:webhook:inbox`) to the tagged one (`{alice}:webhook:inbox`),
    /// groups and pending entries included, once the daemon runs with
    /// `key_form = "tagged"`.
    MigrateKeys,
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

/// Completes an app argument with the names the daemon lists.
fn app_names() -> clap_complete::engine::ArgValueCompleter {
    clap_complete::engine::ArgValueCompleter::new(super::extras::app_names)
}
