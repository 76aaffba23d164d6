//! `oxidepmd`, the oxidepm daemon.

fn main() -> std::process::ExitCode {
    oxidepm::daemon_main()
}
