//! Time formatting shared by the daemon, logs and the CLI.

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// RFC 3339 (UTC, milliseconds) for a Unix time in milliseconds.
pub fn rfc3339_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses an RFC 3339 time to Unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Length of the stamp the log writer puts before each line when
/// `log_timestamps` is on: `2026-11-30T10:00:00.000Z`.
pub const STAMP_LEN: usize = 24;

/// A log line's stamp and the line after it (the space between dropped),
/// or None when the line does not start with one.
pub fn split_stamp(line: &[u8]) -> Option<(&[u8], &[u8])> {
    const SHAPE: &[u8; STAMP_LEN] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    if line.len() <= STAMP_LEN || line[STAMP_LEN] != b' ' {
        return None;
    }
    let stamp = &line[..STAMP_LEN];
    let fits = stamp.iter().zip(SHAPE).all(|(b, s)| match s {
        b'd' => b.is_ascii_digit(),
        s => b == s,
    });
    fits.then(|| (stamp, &line[STAMP_LEN + 1..]))
}

/// A short human duration: `45s`, `12m`, `3h`, `2D`.
pub fn short_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h", s / 3600),
        _ => format!("{}D", s / 86400),
    }
}
