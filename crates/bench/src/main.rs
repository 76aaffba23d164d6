//! `oxidepm-bench`: the project's benchmark command.
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release -p oxidepm-bench -- [--quick] [scenario...]
//! ```
//!
//! It drives the real release binaries `oxidepm` and `oxidepmd` found next to
//! its own executable, each scenario in a fresh `OXIDEPM_HOME` (a temp dir),
//! and compares the figures with the targets of DESIGN.md ("Performance
//! targets"). The same binary is also the test apps (`__write-lines`,
//! `__probe`).

// The benchmark is a process of its own: it sleeps and waits for the
// programs it measures.
#![allow(clippy::disallowed_methods)]

/// `println!` that ignores a closed stdout (`oxidepm-bench | head`), so that
/// a scenario still runs its teardown instead of dying mid-way.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that ignores a closed stdout.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod procfs;
mod report;
mod roles;
mod sandbox;
mod scenarios;

use oxidepm_sys::cnproc;
use report::Row;
use sandbox::Bins;
use scenarios::{Plan, ALL};
use std::process::{Command, ExitCode};

fn usage() -> String {
    let mut u = String::from(
        "usage: oxidepm-bench [--quick] [scenario...]\n\
         \n\
         Measures the release binaries target/release/oxidepm and oxidepmd (next to\n\
         this executable) against DESIGN.md's performance targets. Without\n\
         scenario names, runs them all.\n\
         \n\
         --quick   smaller sizes (20 apps, 100k log lines, fewer runs) for a smoke run\n\
         \n\
         scenarios:\n",
    );
    for s in ALL {
        u.push_str(&format!("  {:<9} {}\n", s.name, s.about));
    }
    u
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("__write-lines") => return roles::write_lines(&args[1..]),
        Some("__probe") => return roles::probe(&args[1..]),
        Some("__hold") => return scenarios::siege::hold(&args[1..]),
        Some("__refuse") => return scenarios::siege::refuse(&args[1..]),
        Some("__webhook") => return scenarios::siege::webhook_attacker(&args[1..]),
        _ => {}
    }
    let mut quick = false;
    let mut chosen: Vec<&scenarios::Scenario> = Vec::new();
    for a in &args {
        match a.as_str() {
            "--quick" | "-q" => quick = true,
            "--help" | "-h" => {
                say_raw!("{}", usage());
                return ExitCode::SUCCESS;
            }
            name => match ALL.iter().find(|s| s.name == name) {
                Some(s) if !chosen.iter().any(|c| c.name == s.name) => chosen.push(s),
                Some(_) => {}
                None => {
                    eprintln!("oxidepm-bench: unknown argument {name:?}\n\n{}", usage());
                    return ExitCode::from(2);
                }
            },
        }
    }
    if chosen.is_empty() {
        chosen = ALL.iter().collect();
    }
    let bins = match Bins::find() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("oxidepm-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan::new(quick);
    print_header(&bins, &plan);
    if let Some(w) = bins.staleness() {
        say!("  WARNING:  {w}");
    }

    let mut rows: Vec<Row> = Vec::new();
    let mut failed = false;
    let mut loads = Vec::new();
    for s in chosen {
        say!("\n== {}: {} ==", s.name, s.about);
        if let Some(busy) = background_cpu(std::time::Duration::from_millis(500)) {
            say!(
                "  background CPU use (0.5 s before): {:.0}%{}",
                busy * 100.0,
                if busy > BUSY_WARN {
                    " -- the machine is not idle; times may be inflated"
                } else {
                    ""
                }
            );
            loads.push(format!("{} {:.0}%", s.name, busy * 100.0));
        }
        match (s.run)(&bins, &plan) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                failed = true;
                say!("  ERROR: {e}");
                rows.push(Row::failed(s.name, &e));
            }
        }
    }
    say!("\n== summary ==");
    report::print_table(&rows);
    if !loads.is_empty() {
        say!(
            "background CPU use before each scenario (other processes on this machine): {}",
            loads.join(", ")
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Background CPU use above which a warning is printed.
const BUSY_WARN: f64 = 0.10;

/// Fraction of all CPUs busy (not idle, not waiting for I/O) during `span`,
/// from /proc/stat; nothing of this benchmark runs meanwhile.
fn background_cpu(span: std::time::Duration) -> Option<f64> {
    fn sample() -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|x| x.parse().ok())
            .collect();
        let total: u64 = v.iter().sum();
        let idle = v.get(3)? + v.get(4)?;
        Some((total, idle))
    }
    let (t0, i0) = sample()?;
    std::thread::sleep(span);
    let (t1, i1) = sample()?;
    let total = t1.checked_sub(t0).filter(|&t| t > 0)?;
    Some(1.0 - (i1 - i0) as f64 / total as f64)
}

fn print_header(bins: &Bins, plan: &Plan) {
    let version = Command::new(&bins.cli)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    say!(
        "oxidepm-bench ({})",
        if plan.quick { "quick" } else { "full" }
    );
    say!(
        "  binaries: {} and {} ({version})",
        bins.cli.display(),
        bins.daemon.display()
    );
    say!("  host:     {cores} CPU(s), {cpu}, Linux {kernel}");
    say!(
        "  sizes:    {} apps, {} status runs, {} respawns, {} start rounds, {} log lines x {} round(s)",
        plan.apps,
        plan.status_runs,
        plan.respawns,
        plan.start_rounds,
        plan.log_lines,
        plan.log_rounds
    );
}
