//! The scenarios, each measured in fresh oxidepm homes.

mod adopt;
mod agentsock;
mod bridge;
mod discord;
mod health;
mod hosts;
mod idle;
mod kill2000;
mod logs;
mod logs_read;
mod logwriter;
mod mcp;
mod memwatch;
mod metrics;
mod proxy;
mod respawn;
mod rss;
pub mod siege;
mod start;
mod start1000;
mod status;
mod storm;
mod subscribe;

use crate::report::Row;
use crate::sandbox::{Bins, Result, Sandbox};

/// Sizes of one benchmark run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Smaller sizes for a smoke run.
    pub quick: bool,
    /// Apps for `rss`, `status` and `start100`.
    pub apps: usize,
    /// Timed `status --json` runs.
    pub status_runs: usize,
    /// Timed kills in `respawn`.
    pub respawns: usize,
    /// Rounds of `start100`, each in a fresh home.
    pub start_rounds: usize,
    /// Lines written in `logs`.
    pub log_lines: u64,
    /// Rounds of `logs` (plain file, then oxidepm, each round).
    pub log_rounds: usize,
}

impl Plan {
    /// The full plan, or the `--quick` one.
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                apps: 20,
                status_runs: 50,
                respawns: 10,
                start_rounds: 1,
                log_lines: 100_000,
                log_rounds: 1,
            }
        } else {
            Plan {
                quick,
                apps: 100,
                status_runs: 200,
                respawns: 50,
                start_rounds: 3,
                log_lines: 1_000_000,
                log_rounds: 5,
            }
        }
    }
}

/// A scenario: its name, what it measures, and the code.
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// One line about it.
    pub about: &'static str,
    /// Runs it; prints figures as it goes and returns the summary rows.
    pub run: fn(&Bins, &Plan) -> Result<Vec<Row>>,
}

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "rss",
        about: "daemon memory, idle and with N apps",
        run: rss::run,
    },
    Scenario {
        name: "status",
        about: "wall time of the whole `oxidepm status --json` process with N apps",
        run: status::run,
    },
    Scenario {
        name: "respawn",
        about: "SIGKILL of an app -> its new process runs (restart_delay 0)",
        run: respawn::run,
    },
    Scenario {
        name: "start100",
        about: "start N apps from one TOML file with the daemon running",
        run: start::run,
    },
    Scenario {
        name: "start1000",
        about: "start 1,000 apps from one TOML file with the daemon running (target <= 1 s)",
        run: start1000::run,
    },
    Scenario {
        name: "logs",
        about: "log capture of lines of 100 B, timestamps on, against a plain file",
        run: logs::run,
    },
    Scenario {
        name: "bridge",
        about:
            "oxidepm-bridge: webhook -> inbox msgs/s, outbox -> sink deliveries/s, routing latency, peak RSS under 8 x 32 MiB outbox entries",
        run: bridge::run,
    },
    Scenario {
        name: "discord",
        about: "oxidepm-bridge's discord source against a local gateway/REST stand-in: gateway -> inbox msgs/s, message -> agent answer posted p50/p99",
        run: discord::run,
    },
    Scenario {
        name: "hosts",
        about: "lanes past one host: webhook -> inbox -> agent -> outbox -> sink msgs/s and p50/p99 through 1, 2, 3 bridges on a private, a shared TCP and a clustered Redis",
        run: hosts::run,
    },
    Scenario {
        name: "mcp",
        about: "`oxidepm mcp` from the MCP Python SDK: tools/call status p50/p99 with N apps, the server's RSS idle and through a search of a 1 GiB log",
        run: mcp::run,
    },
    Scenario {
        name: "adopt",
        about: "SIGKILL of the daemon with N apps -> new daemon re-adopts all (same pids)",
        run: adopt::run,
    },
    Scenario {
        name: "health",
        about: "daemon CPU and RSS with N apps under a 1 s health check (tcp, command)",
        run: health::run,
    },
    Scenario {
        name: "idle",
        about: "daemon CPU with 1,000 and 5,000 idle apps nobody looks at, without and with max_memory_restart (targets <= 0.05 % / 0.5 % of a core)",
        run: idle::run,
    },
    Scenario {
        name: "memwatch",
        about: "daemon CPU of max_memory_restart on N apps vs none, per app per second",
        run: memwatch::run,
    },
    Scenario {
        name: "metrics",
        about: "daemon CPU per /metrics scrape with N apps (target < 1 ms); idle RSS with metrics off and on",
        run: metrics::run,
    },
    Scenario {
        name: "agentsock",
        about: "agent.sock req/s, 32 clients (ping, status; pipelined), accept+identity cost",
        run: agentsock::run,
    },
    Scenario {
        name: "proxy",
        about: "lane auth proxy vs direct Redis, redis-benchmark 50 clients, plain and -P 16",
        run: proxy::run,
    },
    Scenario {
        name: "logwriter",
        about: "PSS per log writer with N apps (target <= 100 KiB)",
        run: logwriter::run,
    },
    Scenario {
        name: "siege",
        about: "daemon and sockets under attack: peak RSS vs budget, a person's status and another agent's round trip vs idle",
        run: siege::run,
    },
    Scenario {
        name: "storm",
        about: "800 crash-looping apps: status latency during the storm, time until all errored",
        run: storm::run,
    },
    Scenario {
        name: "subscribe",
        about: "status round trip during a crash storm, without and with a subscriber that never reads",
        run: subscribe::run,
    },
    Scenario {
        name: "kill2000",
        about: "2,000 idle apps: wall time of `oxidepm kill`",
        run: kill2000::run,
    },
];

/// Runs `body` in a fresh home and always tears it down; teardown remarks are printed.
pub fn with_sandbox<T>(bins: &Bins, body: impl FnOnce(&mut Sandbox) -> Result<T>) -> Result<T> {
    let mut sb = Sandbox::new(bins)?;
    say!("  home: {}", sb.home().display());
    let result = body(&mut sb);
    for note in sb.teardown() {
        say!("  teardown: {note}");
    }
    result
}

/// Sleeps for `ms` milliseconds.
pub fn sleep_ms(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}
