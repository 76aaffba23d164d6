//! systemd-journald's native protocol: an entry is a set of `NAME=value`
//! fields sent as one datagram to the journal's socket; a value holding a
//! newline (or other binary) is written as `NAME\n`, its length as 64-bit
//! little-endian, the bytes, `\n`. An entry too large for one datagram is
//! sent as a sealed memory file (`oxidepm_sys::memfd`).
//!
//! Kept here, beside the writer that sends app output, and used by the
//! daemon for its own log too: one encoder, one place to get it right.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// Where journald listens for native-protocol entries.
pub const DEFAULT_SOCKET: &str = "/run/systemd/journal/socket";

/// Environment variable that moves the journal socket (tests use a private one).
pub const SOCKET_ENV: &str = "OXIDEPM_JOURNAL_SOCKET";

/// Syslog priority of an app's stderr lines (`err`).
pub const PRIORITY_STDERR: u8 = 3;

/// Syslog priority of an app's stdout lines (`info`).
pub const PRIORITY_STDOUT: u8 = 6;

/// The journal socket this process should use: `OXIDEPM_JOURNAL_SOCKET`, else journald's.
pub fn socket_path() -> PathBuf {
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// Whether `name` is a valid journal field name: journald silently drops
/// fields that are not upper-case letters, digits and `_`, not starting
/// with a digit or `_` (the leading `_` is for journald's trusted fields).
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && !b[0].is_ascii_digit()
        && b[0] != b'_'
        && b.iter()
            .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// Appends one field to an entry being built in `out`.
pub fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    debug_assert!(valid_name(name), "journal field name {name:?}");
    out.extend_from_slice(name.as_bytes());
    if value.contains(&b'\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// A connection to the journal: an unbound datagram socket and the path
/// each entry is sent to (sent per entry, so a journald restarted under
/// us is found again).
pub struct Journal {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Journal {
    /// A sender to the socket at `path`; nothing is sent yet.
    pub fn new(path: &Path) -> io::Result<Journal> {
        Ok(Journal {
            socket: UnixDatagram::unbound()?,
            path: path.to_path_buf(),
        })
    }

    /// Makes sends fail with `WouldBlock` instead of waiting for a busy
    /// journald (the daemon must never stall on its own log).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket.set_nonblocking(on)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one encoded entry: as one datagram, or when that is too large
    /// for the socket, as a sealed memory file.
    pub fn send(&self, entry: &[u8]) -> io::Result<()> {
        match self.socket.send_to(entry, &self.path) {
            Ok(_) => Ok(()),
            Err(e) if oxidepm_sys::memfd::too_large(&e) => {
                oxidepm_sys::memfd::send_sealed(&self.socket, &self.path, entry)
            }
            Err(e) => Err(e),
        }
    }
}

/// Receives one entry on `socket` (a datagram or a memory file) and
/// decodes it: what a test's private journal reads.
pub fn recv_entry(socket: &UnixDatagram) -> io::Result<Vec<(String, Vec<u8>)>> {
    let data = oxidepm_sys::memfd::recv_payload(socket)?;
    decode(&data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decodes one entry as journald reads it.
pub fn decode(mut data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut fields = Vec::new();
    while !data.is_empty() {
        let end = data
            .iter()
            .position(|&b| b == b'=' || b == b'\n')
            .ok_or("field without '=' or newline")?;
        let name = String::from_utf8(data[..end].to_vec()).map_err(|_| "name not UTF-8")?;
        if data[end] == b'=' {
            let rest = &data[end + 1..];
            let nl = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or("value without newline")?;
            fields.push((name, rest[..nl].to_vec()));
            data = &rest[nl + 1..];
        } else {
            let rest = &data[end + 1..];
            if rest.len() < 8 {
                return Err("binary field without its length".into());
            }
            let len = u64::from_le_bytes(rest[..8].try_into().map_err(|_| "length")?) as usize;
            let rest = &rest[8..];
            if rest.len() < len + 1 || rest[len] != b'\n' {
                return Err("binary field shorter than its length".into());
            }
            fields.push((name, rest[..len].to_vec()));
            data = &rest[len + 1..];
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_value_is_name_equals_value() {
        let mut out = Vec::new();
        push_field(&mut out, "MESSAGE", b"hello world");
        push_field(&mut out, "PRIORITY", b"6");
        assert_eq!(out, b"MESSAGE=hello world\nPRIORITY=6\n");
    }

    #[test]
    fn a_value_with_a_newline_carries_its_length() {
        let mut out = Vec::new();
        push_field(&mut out, "MESSAGE", b"two\nlines");
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(b"two\nlines\n");
        assert_eq!(out, want);
    }

    #[test]
    fn binary_values_round_trip_byte_for_byte() {
        let binary: Vec<u8> = (0..=255u8).collect();
        let mut out = Vec::new();
        push_field(&mut out, "MESSAGE", &binary);
        push_field(&mut out, "EMPTY", b"");
        push_field(&mut out, "EQ", b"a=b");
        let got = decode(&out).unwrap();
        assert_eq!(
            got,
            vec![
                ("MESSAGE".to_string(), binary),
                ("EMPTY".to_string(), vec![]),
                ("EQ".to_string(), b"a=b".to_vec()),
            ]
        );
    }

    #[test]
    fn field_names_journald_would_drop_are_refused() {
        assert!(valid_name("OXIDEPM_APP"));
        assert!(valid_name("SYSLOG_IDENTIFIER"));
        for bad in ["", "_PID", "1X", "lower", "A-B", &"A".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_entry_larger_than_a_datagram_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        let j = Journal::new(&path).unwrap();
        // Larger than any default datagram limit (net.core.wmem_default).
        let big = vec![b'y'; 1 << 20];
        let mut out = Vec::new();
        push_field(&mut out, "MESSAGE", &big);
        j.send(&out).unwrap();
        let fields = recv_entry(&rx).unwrap();
        assert_eq!(fields, vec![("MESSAGE".to_string(), big)]);
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("absent.sock")).unwrap();
        assert!(j.send(b"MESSAGE=x\n").is_err());
    }
}
