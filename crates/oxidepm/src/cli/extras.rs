//! What packagers install beside the binary: shell completions
//! (`clap_complete`) and the man page (`clap_mangen`), both printed from
//! the same argument definitions the binary parses, so they never drift.

use super::args::Cli;
use clap::CommandFactory;
use std::io::{self, Write};

/// `oxidepm completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> io::Result<()> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "oxidepm", &mut buf);
    let mut out = io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()
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
