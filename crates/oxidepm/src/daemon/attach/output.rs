//! Container mode's output: every attached app's lines on the daemon's own
//! stdout and stderr, prefixed with the app's name (`web | listening`).
//!
//! Nothing here can stop the daemon or an app: the apps write to their log
//! files as always, one thread follows those files, and each of stdout and
//! stderr has a writer thread fed through a queue bounded in lines and
//! bytes. A stream nobody reads blocks only its writer thread; what does
//! not fit in its queue meanwhile is dropped and counted, and the count is
//! written on that stream as soon as it moves again. The daemon's own log
//! goes through the stderr queue too.

use crate::supervise::logfile::Follower;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines a stream's queue holds at most.
const QUEUE_LINES: usize = 4096;
/// Bytes a stream's queue holds at most.
const QUEUE_BYTES: usize = 4 << 20;
/// How often the log files are looked at for new lines.
const FOLLOW_EVERY: Duration = Duration::from_millis(50);
/// At the end, the files are read until they have been quiet this long
/// (the log writers write an app's last lines just after it exits)…
const QUIET: Duration = Duration::from_millis(300);
/// …or for this long at most.
const LAST_LINES_WAIT: Duration = Duration::from_secs(3);

/// One of the daemon's output streams, with its bounded queue.
pub struct Out {
    tx: SyncSender<Vec<u8>>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    /// Lines dropped because the queue was full.
    dropped: Arc<AtomicU64>,
}

impl Out {
    /// Starts the writer thread of `fd` (1 or 2).
    fn start(fd: i32) -> Arc<Out> {
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let out = Arc::new(Out {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
        });
        let (queued, dropped) = (out.queued.clone(), out.dropped.clone());
        let name = if fd == 1 {
            "attach-stdout"
        } else {
            "attach-stderr"
        };
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || write_loop(fd, rx, queued, dropped));
        if let Err(e) = spawned {
            // Lines are then only dropped (and counted): the apps run on.
            eprintln!("oxidepmd: cannot start the {name} writer: {e}");
        }
        out
    }

    /// Queues one whole line (with its newline); never waits. False when
    /// it was dropped.
    pub fn line(&self, line: Vec<u8>) -> bool {
        let n = line.len();
        if self.queued.load(Ordering::Relaxed) + n > QUEUE_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.queued.fetch_add(n, Ordering::Relaxed);
        match self.tx.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(n, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether everything queued has been written.
    fn empty(&self) -> bool {
        self.queued.load(Ordering::Relaxed) == 0
    }
}

/// Writes queued lines to `fd`; after a stall, says how many were dropped.
/// A closed stream (EPIPE) is drained without writing, so the queue keeps
/// moving and nobody waits on it.
fn write_loop(fd: i32, rx: Receiver<Vec<u8>>, queued: Arc<AtomicUsize>, dropped: Arc<AtomicU64>) {
    let mut said = 0u64;
    let mut closed = false;
    let write = |bytes: &[u8]| -> bool {
        let r = if fd == 1 {
            std::io::stdout().lock().write_all(bytes)
        } else {
            std::io::stderr().lock().write_all(bytes)
        };
        r.is_ok()
    };
    while let Ok(line) = rx.recv() {
        if !closed {
            closed = !write(&line);
        }
        queued.fetch_sub(line.len(), Ordering::Relaxed);
        let now = dropped.load(Ordering::Relaxed);
        if now > said && !closed {
            let note = format!(
                "oxidepmd | {} lines dropped: this output was not read fast enough (the log files have them)\n",
                now - said
            );
            closed = !write(note.as_bytes());
            said = now;
        }
    }
}

/// The daemon's stdout and stderr in container mode.
pub struct Outputs {
    /// Apps' stdout lines.
    pub stdout: Arc<Out>,
    /// Apps' stderr lines and the daemon's own log.
    pub stderr: Arc<Out>,
}

impl Outputs {
    /// Starts both writers.
    pub fn start() -> Outputs {
        Outputs {
            stdout: Out::start(1),
            stderr: Out::start(2),
        }
    }

    /// A writer for the daemon's log (env_logger) that queues whole lines
    /// on stderr instead of blocking on it.
    pub fn log_writer(&self) -> LogWriter {
        LogWriter {
            out: self.stderr.clone(),
            held: Vec::new(),
        }
    }

    /// Waits until both queues are written, at most `limit` (a stream
    /// nobody reads is not waited for longer).
    pub async fn drain(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !(self.stdout.empty() && self.stderr.empty()) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The daemon's log lines, queued on stderr.
pub struct LogWriter {
    out: Arc<Out>,
    held: Vec<u8>,
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(buf);
        while let Some(i) = self.held.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.held.drain(..=i).collect();
            self.out.line(line);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One followed log file: whose, which stream, and whether its lines
/// carry the log writer's timestamp (left off the stream: a container's
/// log collector stamps lines itself).
pub struct Source {
    /// The app's name (the prefix).
    pub app: String,
    /// The file.
    pub path: PathBuf,
    /// Stderr rather than stdout.
    pub err: bool,
    /// Lines start with `YYYY-MM-DDTHH:MM:SS.mmmZ `.
    pub stamped: bool,
    /// Rotated files its writer keeps.
    pub keep: u32,
}

/// Follows the sources' files from their current end, on a thread of its
/// own, until `stop` is set; then reads what is left once more.
pub struct Tail {
    stop: Arc<Mutex<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tail {
    /// Opens every file at its end now (lines written from here on are
    /// streamed) and starts following.
    // The follower runs on a thread of its own.
    #[allow(clippy::disallowed_methods)]
    pub fn start(sources: Vec<Source>, outputs: &Outputs) -> Tail {
        let mut followed: Vec<(Source, Follower)> = sources
            .into_iter()
            .map(|s| {
                let f = Follower::open_at_end(&s.path, s.keep);
                (s, f)
            })
            .collect();
        let (stdout, stderr) = (outputs.stdout.clone(), outputs.stderr.clone());
        let stop = Arc::new(Mutex::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("attach-tail".into())
            .spawn(move || {
                let mut ending: Option<(Instant, Instant)> = None;
                loop {
                    let mut any = false;
                    for (s, f) in followed.iter_mut() {
                        let out = if s.err { &stderr } else { &stdout };
                        for line in f.poll().unwrap_or_default() {
                            any = true;
                            out.line(prefixed(&s.app, &line, s.stamped));
                        }
                    }
                    let now = Instant::now();
                    if ending.is_none() && *stopping.lock().unwrap_or_else(|p| p.into_inner()) {
                        ending = Some((now, now));
                    }
                    if let Some((began, quiet_since)) = ending.as_mut() {
                        if any {
                            *quiet_since = now;
                        }
                        if now.duration_since(*quiet_since) >= QUIET
                            || now.duration_since(*began) >= LAST_LINES_WAIT
                        {
                            return;
                        }
                    }
                    std::thread::sleep(FOLLOW_EVERY);
                }
            })
            .map_err(|e| log::error!("cannot follow the apps' output: {e}"))
            .ok();
        Tail { stop, thread }
    }

    /// Reads the files until they are quiet (their last lines), then stops
    /// following.
    pub fn finish(mut self) {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `app | line\n`, without the log writer's timestamp.
fn prefixed(app: &str, line: &str, stamped: bool) -> Vec<u8> {
    let text = if stamped { unstamped(line) } else { line };
    let mut v = Vec::with_capacity(app.len() + text.len() + 4);
    v.extend_from_slice(app.as_bytes());
    v.extend_from_slice(b" | ");
    v.extend_from_slice(text.as_bytes());
    v.push(b'\n');
    v
}

/// The line without a leading `YYYY-MM-DDTHH:MM:SS.mmmZ ` (as the log
/// writer puts it); any other line as it is.
fn unstamped(line: &str) -> &str {
    let b = line.as_bytes();
    let stamp = b.len() >= 25
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
        && b[24] == b' ';
    if stamp {
        &line[25..]
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_lose_the_writers_stamp_and_gain_the_apps_name() {
        assert_eq!(
            prefixed("web", "2026-11-30T19:40:00.123Z listening on 80", true),
            b"web | listening on 80\n"
        );
        assert_eq!(
            prefixed("web", "2026 is near", true),
            b"web | 2026 is near\n"
        );
        assert_eq!(
            prefixed("w", "2026-11-30T19:40:00.123Z x", false),
            b"w | 2026-11-30T19:40:00.123Z x\n"
        );
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        // No writer thread: nothing is taken from the queue.
        let (tx, _rx) = sync_channel(2);
        let out = Out {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        assert!(out.line(b"a\n".to_vec()));
        assert!(out.line(b"b\n".to_vec()));
        assert!(!out.line(b"c\n".to_vec()));
        assert!(!out.line(vec![b'x'; QUEUE_BYTES]));
        assert_eq!(out.dropped(), 2);
    }
}
