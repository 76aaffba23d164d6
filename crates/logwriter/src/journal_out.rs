//! An app's lines sent to the journal (`log_target = "journald"` or
//! `"both"`), and the log files as the fallback: a line the journal did
//! not take is written to the file even when files are off, so output is
//! never lost to a missing or stopped journald.

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use crate::config::JournalTarget;
use crate::file::LogFile;
use crate::journal::{push_field, Journal, PRIORITY_STDERR, PRIORITY_STDOUT};

/// The journal connection both of an app's streams share.
pub(crate) struct JournalOut {
    journal: Option<Journal>,
    target: JournalTarget,
    entry: Vec<u8>,
    /// A failure was reported and not yet followed by a success (one
    /// message per outage, not per line).
    failing: bool,
}

impl JournalOut {
    /// A sender for `target`; a socket that cannot even be created is
    /// reported at the first line and the files take the output.
    pub(crate) fn new(target: &JournalTarget) -> Rc<RefCell<JournalOut>> {
        Rc::new(RefCell::new(JournalOut {
            journal: Journal::new(&target.socket).ok(),
            target: target.clone(),
            entry: Vec::new(),
            failing: false,
        }))
    }

    /// Sends one line; false when the journal did not take it.
    fn send(&mut self, stderr: bool, line: &[u8]) -> bool {
        let (priority, stream) = if stderr {
            (PRIORITY_STDERR, "stderr")
        } else {
            (PRIORITY_STDOUT, "stdout")
        };
        let e = &mut self.entry;
        e.clear();
        push_field(e, "MESSAGE", line);
        push_field(e, "PRIORITY", &[b'0' + priority]);
        push_field(e, "SYSLOG_IDENTIFIER", self.target.identifier.as_bytes());
        push_field(e, "OXIDEPM_APP", self.target.identifier.as_bytes());
        push_field(e, "OXIDEPM_STREAM", stream.as_bytes());
        let result = match &self.journal {
            Some(j) => j.send(e),
            None => Err(io::Error::other("cannot create a datagram socket")),
        };
        if e.capacity() > 64 * 1024 + 4096 {
            *e = Vec::new();
        }
        match result {
            Ok(()) => {
                if self.failing {
                    self.failing = false;
                    self.say("the journal takes its output again");
                }
                true
            }
            Err(err) => {
                if !self.failing {
                    self.failing = true;
                    self.say(&format!(
                        "cannot send its output to the journal at {} ({err}); it goes to its log files \
                         until the journal is back (is systemd-journald running? check log_target)",
                        self.target.socket.display()
                    ));
                }
                false
            }
        }
    }

    /// A warning on the writer's stderr: the daemon's log.
    fn say(&self, msg: &str) {
        let _ = writeln!(
            io::stderr(),
            "{}: app {}: {msg}",
            crate::PROGRAM,
            self.target.identifier
        );
    }
}

/// Where one stream's lines go: the file, the journal, or both.
pub(crate) struct Sink {
    pub(crate) log: LogFile,
    journal: Option<Rc<RefCell<JournalOut>>>,
    stderr: bool,
    files: bool,
}

impl Sink {
    /// A sink writing `log` when `files`, sending to `journal` when set.
    pub(crate) fn new(
        log: LogFile,
        journal: Option<Rc<RefCell<JournalOut>>>,
        stderr: bool,
        files: bool,
    ) -> Sink {
        Sink {
            log,
            journal,
            stderr,
            files,
        }
    }

    /// One complete line (without its newline).
    pub(crate) fn push_line(&mut self, out: &mut Vec<u8>, stamp: &[u8], line: &[u8]) {
        let sent = match &self.journal {
            Some(j) => j.borrow_mut().send(self.stderr, line),
            None => false,
        };
        if self.files || !sent {
            self.log.push_line(out, stamp, line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::recv_entry;
    use std::os::unix::net::UnixDatagram;

    fn field<'a>(entry: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
        entry
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    fn sink(dir: &std::path::Path, stderr: bool, files: bool) -> Sink {
        let target = JournalTarget {
            identifier: "web".into(),
            socket: dir.join("journal.sock"),
        };
        let log = LogFile::new(&dir.join("web-out.log"), false, 0, 0);
        Sink::new(log, Some(JournalOut::new(&target)), stderr, files)
    }

    #[test]
    fn lines_become_entries_with_identifier_and_priority() {
        let dir = tempfile::tempdir().unwrap();
        let rx = UnixDatagram::bind(dir.path().join("journal.sock")).unwrap();
        let mut out = Vec::new();
        let mut err_sink = sink(dir.path(), true, false);
        err_sink.push_line(&mut out, b"", b"boom");
        err_sink.log.write_out(&mut out);
        let mut out_sink = sink(dir.path(), false, false);
        out_sink.push_line(&mut out, b"", b"\x01bin\xff");
        out_sink.log.write_out(&mut out);

        let e = recv_entry(&rx).unwrap();
        assert_eq!(field(&e, "MESSAGE"), Some(&b"boom"[..]));
        assert_eq!(field(&e, "PRIORITY"), Some(&b"3"[..]));
        assert_eq!(field(&e, "SYSLOG_IDENTIFIER"), Some(&b"web"[..]));
        assert_eq!(field(&e, "OXIDEPM_APP"), Some(&b"web"[..]));
        let e = recv_entry(&rx).unwrap();
        assert_eq!(field(&e, "MESSAGE"), Some(&b"\x01bin\xff"[..]));
        assert_eq!(field(&e, "PRIORITY"), Some(&b"6"[..]));
        // Journal only: no file was created.
        assert!(!dir.path().join("web-out.log").exists());
    }

    #[test]
    fn with_the_journal_gone_lines_still_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        let mut s = sink(dir.path(), false, false);
        s.push_line(&mut out, b"", b"kept");
        s.log.write_out(&mut out);
        let text = std::fs::read_to_string(dir.path().join("web-out.log")).unwrap();
        assert_eq!(text, "kept\n");
    }

    #[test]
    fn both_targets_get_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let rx = UnixDatagram::bind(dir.path().join("journal.sock")).unwrap();
        let mut out = Vec::new();
        let mut s = sink(dir.path(), false, true);
        s.push_line(&mut out, b"", b"twice");
        s.log.write_out(&mut out);
        let e = recv_entry(&rx).unwrap();
        assert_eq!(field(&e, "MESSAGE"), Some(&b"twice"[..]));
        let text = std::fs::read_to_string(dir.path().join("web-out.log")).unwrap();
        assert_eq!(text, "twice\n");
    }
}
