//! UTC timestamps as RFC 3339 with milliseconds (`2024-05-01T12:00:00.123Z`),
//! without a date library: the writer formats one per chunk it reads.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now (0 for a clock before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends `ms` (milliseconds since the epoch) as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn push_rfc3339(out: &mut Vec<u8>, ms: u64) {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    );
    out.extend_from_slice(s.as_bytes());
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(ms: u64) -> String {
        let mut v = Vec::new();
        push_rfc3339(&mut v, ms);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn known_instants() {
        assert_eq!(fmt(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(fmt(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(fmt(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(fmt(4_102_444_800_123), "2100-01-01T00:00:00.123Z");
    }
}
