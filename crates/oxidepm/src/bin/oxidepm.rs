//! `oxidepm`, the command-line client.

fn main() -> std::process::ExitCode {
    oxidepm::cli_main()
}
