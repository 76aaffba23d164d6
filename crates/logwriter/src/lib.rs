//! oxidepm's log writer: one process per app run copies the app's stdout
//! (fd 0) and stderr (fd 1) into size-rotated log files.
//!
//! The writer, not the daemon, reads the app's pipes, so apps keep logging
//! while the daemon is down, and a slow disk only slows the app through
//! pipe backpressure, never the daemon's control plane. The daemon keeps a
//! copy of each pipe's read end and starts a new writer on the same pipes
//! if this one dies, so the writer's death never harms the app.
//!
//! One writer runs per app, so it is kept small: one thread, no async
//! runtime, small buffers that a burst grows and the writer gives back.
//! The program is `oxidepm-logwriter`; the daemon's `oxidepmd __logshim`
//! runs the same code when that program is not installed beside it.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, RawFd};
use std::time::Duration;

mod config;
mod file;
pub mod journal;
mod journal_out;
mod names;
mod stamp;
mod stream;

pub use config::{ArgsError, JournalTarget, WriterConfig, MARKER};
pub use file::read_total;
pub use names::{dropped_name, rotated_name, split};
pub use stream::{copy_stream, MAX_LINE, READ_CHUNK};

use stream::Stream;

/// The fd the writer reads the app's stderr from (stdout comes on fd 0).
pub const ERR_INPUT_FD: RawFd = 1;

/// The program's name, installed beside `oxidepmd`.
pub const PROGRAM: &str = "oxidepm-logwriter";

/// Runs a writer from its command-line arguments (after the program name;
/// a leading `MARKER` is skipped). Returns the process's exit status.
pub fn main_with_args(args: &[std::ffi::OsString]) -> i32 {
    let args = match args.first() {
        Some(a) if a == MARKER => &args[1..],
        _ => args,
    };
    let result = WriterConfig::from_args(args)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        .and_then(|cfg| run(&cfg));
    match result {
        Ok(()) => 0,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(io::stderr(), "{PROGRAM}: {e}");
            1
        }
    }
}

/// Copies fd 0 to `out_path` and fd 1 to `err_path` until both reach EOF.
pub fn run(cfg: &WriterConfig) -> io::Result<()> {
    // The daemon starts the writer without a pre-exec hook (a spawn that
    // copies no page tables), so the writer leaves the daemon's session
    // itself: a signal to the daemon's group never takes the writer, and
    // with it the app's output. Already a leader (run by hand): fine.
    let _ = oxidepm_sys::signal::new_session();
    ignore_signals()?;
    let mut inputs = [Some(take_fd(0)?), Some(take_fd(ERR_INPUT_FD)?)];
    let journal = cfg.journal.as_ref().map(journal_out::JournalOut::new);
    let sink = |path: &std::path::Path, stderr: bool| {
        let log = file::LogFile::new(path, cfg.timestamps, cfg.max_bytes, cfg.keep);
        journal_out::Sink::new(log, journal.clone(), stderr, cfg.files)
    };
    let mut streams = [
        Stream::to_sink(sink(&cfg.out_path, false)),
        Stream::to_sink(sink(&cfg.err_path, true)),
    ];
    let mut buf = vec![0u8; READ_CHUNK];
    let mut out = Vec::new();
    let mut result = Ok(());
    while inputs.iter().any(Option::is_some) {
        let fds = [
            inputs[0].as_ref().map(|f| f.as_fd()),
            inputs[1].as_ref().map(|f| f.as_fd()),
        ];
        let ready = match oxidepm_sys::poll::readable_any(&fds, Duration::from_secs(3600)) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for (i, ready) in ready.into_iter().enumerate() {
            let Some(input) = inputs[i].as_mut().filter(|_| ready) else {
                continue;
            };
            match input.read(&mut buf) {
                Ok(0) => {
                    streams[i].finish(&mut out);
                    inputs[i] = None;
                }
                Ok(n) => streams[i].feed(&buf[..n], &mut out),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) => {}
                Err(e) => {
                    streams[i].finish(&mut out);
                    inputs[i] = None;
                    result = Err(e);
                }
            }
        }
    }
    result
}

/// A stop signal sent to the app's process group must not kill the writer
/// before it has drained what the app wrote; EOF is what ends the writer.
fn ignore_signals() -> io::Result<()> {
    use oxidepm_sys::signal::{ignore, Signal::*};
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] {
        ignore(sig)?;
    }
    Ok(())
}

/// The writer's inputs are fds 0 and 1 as the daemon set them up; in the
/// writer process nothing else owns them.
fn take_fd(fd: RawFd) -> io::Result<File> {
    match oxidepm_sys::fd::take_inherited(fd) {
        Ok(fd) => Ok(File::from(fd)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("log writer input fd {fd}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests;
