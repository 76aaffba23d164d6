//! The daemon's own log in the journal when systemd runs it: each record
//! an entry with its priority and fields (`OXIDEPM_APP`, `OXIDEPM_ACTOR`,
//! … from the record's key-values), rather than a text line that journald
//! would stamp a second time.
//!
//! Systemd says so by `JOURNAL_STREAM=<dev>:<ino>`, the stream it connected
//! to stderr; the variable is inherited by children whose stderr is
//! elsewhere, so, as sd_journal does, it counts only when fd 2 is that very
//! stream. A record the journal does not take goes to stderr instead, with
//! a `<N>` priority prefix that journald's stream reader understands.

use std::io::Write;

use oxidepm_logwriter::journal::{push_field, valid_name, Journal};

/// The daemon's records, sent to the journal.
pub struct JournalLogger {
    /// The level and module filter (`log_level`, `OXIDEPM_LOG`).
    filter: env_logger::Logger,
    journal: Journal,
}

/// Whether stderr is the journal stream systemd set up (`JOURNAL_STREAM`).
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // dev_t and ino_t are narrower than u64 on some targets.
    #[allow(clippy::unnecessary_cast)]
    match nix::sys::stat::fstat(2) {
        Ok(st) => st.st_dev as u64 == dev && st.st_ino as u64 == ino,
        Err(_) => false,
    }
}

impl JournalLogger {
    /// The daemon's connection to the journal's socket
    /// (`OXIDEPM_JOURNAL_SOCKET`, else journald's).
    pub fn connect() -> std::io::Result<Journal> {
        let journal = Journal::new(&oxidepm_logwriter::journal::socket_path())?;
        // The daemon must never wait on its own log: a journald too busy
        // to take a record gets it on the stream instead.
        journal.set_nonblocking(true)?;
        Ok(journal)
    }

    /// A logger sending what `filter` lets through to `journal`.
    pub fn new(filter: env_logger::Logger, journal: Journal) -> JournalLogger {
        JournalLogger { filter, journal }
    }

    /// Installs this logger as the process's.
    pub fn install(self) -> Result<(), log::SetLoggerError> {
        log::set_max_level(self.filter.filter());
        log::set_boxed_logger(Box::new(self))
    }
}

/// The syslog priority of a log level.
pub fn priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Encodes `record` as one journal entry.
pub fn entry(record: &log::Record<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    push_field(&mut out, "MESSAGE", record.args().to_string().as_bytes());
    push_field(&mut out, "PRIORITY", &[b'0' + priority(record.level())]);
    push_field(&mut out, "SYSLOG_IDENTIFIER", b"oxidepmd");
    push_field(&mut out, "CODE_MODULE", record.target().as_bytes());
    if let Some(file) = record.file() {
        push_field(&mut out, "CODE_FILE", file.as_bytes());
    }
    if let Some(line) = record.line() {
        push_field(&mut out, "CODE_LINE", line.to_string().as_bytes());
    }
    let mut fields = Fields(&mut out);
    let _ = record.key_values().visit(&mut fields);
    out
}

/// Key-values of a record as `OXIDEPM_<KEY>` fields (`app` → `OXIDEPM_APP`).
struct Fields<'a>(&'a mut Vec<u8>);

impl<'kvs> log::kv::VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'kvs>,
        value: log::kv::Value<'kvs>,
    ) -> Result<(), log::kv::Error> {
        let name = format!("OXIDEPM_{}", key.as_str().to_ascii_uppercase());
        if valid_name(&name) {
            push_field(self.0, &name, value.to_string().as_bytes());
        }
        Ok(())
    }
}

impl log::Log for JournalLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        if self.journal.send(&entry(record)).is_err() {
            let _ = writeln!(
                std::io::stderr(),
                "<{}>{}",
                priority(record.level()),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_logwriter::journal::decode;

    #[test]
    fn a_record_carries_priority_and_its_key_values_as_fields() {
        let kvs: [(&str, log::kv::Value<'_>); 3] = [
            ("app", log::kv::Value::from("web")),
            ("actor", log::kv::Value::from("human:root")),
            ("not a name", log::kv::Value::from("dropped")),
        ];
        let args = format_args!("web: restarted\nby human:root");
        let record = log::Record::builder()
            .level(log::Level::Warn)
            .target("oxidepm::supervise")
            .args(args)
            .key_values(&kvs)
            .build();
        let fields = decode(&entry(&record)).unwrap();
        let get = |n: &str| {
            fields
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            get("MESSAGE").as_deref(),
            Some("web: restarted\nby human:root")
        );
        assert_eq!(get("PRIORITY").as_deref(), Some("4"));
        assert_eq!(get("SYSLOG_IDENTIFIER").as_deref(), Some("oxidepmd"));
        assert_eq!(get("OXIDEPM_APP").as_deref(), Some("web"));
        assert_eq!(get("OXIDEPM_ACTOR").as_deref(), Some("human:root"));
        assert!(fields.iter().all(|(k, _)| !k.contains(' ')), "{fields:?}");
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(log::Level::Error), 3);
        assert_eq!(priority(log::Level::Warn), 4);
        assert_eq!(priority(log::Level::Info), 6);
        assert_eq!(priority(log::Level::Debug), 7);
    }
}
