//! What packagers install beside the binary: shell completions
//! (`clap_complete`) and the man page (`clap_mangen`), both printed from
//! the same argument definitions the binary parses, so they never drift.
//!
//! The completion script asks the binary itself for each completion (with
//! `OXIDEPM_COMPLETE=<shell>` set), so that app names come from the daemon.

use super::args::Cli;
use clap::CommandFactory;
use clap_complete::engine::CompletionCandidate;
use oxidepm_proto::{AppInfo, Op};
use std::ffi::OsStr;
use std::io::{self, Write};

/// The variable the completion script sets when it asks for completions
/// (a name of its own: a `COMPLETE` set for another tool must not turn
/// every command into a completion).
const COMPLETE: &str = "OXIDEPM_COMPLETE";

/// Answers a completion request and exits, when the shell's script asked
/// for one; returns at once otherwise.
pub fn complete_if_asked() {
    clap_complete::CompleteEnv::with_factory(Cli::command)
        .var(COMPLETE)
        .complete();
}

/// `oxidepm completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> io::Result<()> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let Some(completer) = shells.completer(&name) else {
        return Err(io::Error::other(format!(
            "no completion script for {name}; use bash, zsh, fish, elvish or powershell"
        )));
    };
    let mut buf = Vec::new();
    completer.write_registration(COMPLETE, "oxidepm", "oxidepm", "oxidepm", &mut buf)?;
    let mut out = io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()
}

/// Completions of an app argument: the names, `@tags` and `all` the daemon
/// lists for the caller. Nothing when no daemon runs: completing never
/// starts one.
pub fn app_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(prefix) = current.to_str() else {
        return Vec::new();
    };
    // An app file stands for its apps: a word that reads as a path
    // completes as one.
    if prefix.contains('/') || prefix.starts_with('.') || prefix.starts_with('~') {
        return files(current);
    }
    let Ok(mut client) = super::connect::client(false) else {
        return Vec::new();
    };
    let Ok(apps) = client.call_as::<Vec<AppInfo>>(Op::Status) else {
        return Vec::new();
    };
    candidates(&apps, prefix)
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// Completions of `start`'s target: an app file or script, or an app.
pub fn files_or_apps(current: &OsStr) -> Vec<CompletionCandidate> {
    let mut all = files(current);
    if !current.to_str().is_some_and(|p| p.contains('/')) {
        all.extend(app_names(current));
    }
    all
}

/// Paths that start with `current`.
fn files(current: &OsStr) -> Vec<CompletionCandidate> {
    use clap_complete::engine::ValueCompleter;
    clap_complete::engine::PathCompleter::any().complete(current)
}

/// The words of `apps` that start with `prefix`: names, then `@tags`, then
/// `all`, each once.
fn candidates(apps: &[AppInfo], prefix: &str) -> Vec<String> {
    let mut words: Vec<String> = apps.iter().map(|a| a.name.clone()).collect();
    let mut tags: Vec<String> = apps
        .iter()
        .flat_map(|a| a.tags.iter().map(|t| format!("@{t}")))
        .collect();
    tags.sort();
    tags.dedup();
    words.extend(tags);
    words.push("all".to_string());
    words.retain(|w| w.starts_with(prefix));
    words
}

/// `oxidepm man`: the man page (roff) on stdout, for `oxidepm man >
/// oxidepm.1`.
pub fn man() -> io::Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut buf)?;
    let mut out = io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()
}
