//! Times on the command line: `10m` ago, a date, or an RFC 3339 time,
//! turned into the RFC 3339 UTC form the daemon takes.

use crate::timefmt::{now_ms, rfc3339_ms};
use chrono::{NaiveDate, NaiveDateTime};

/// The RFC 3339 UTC time (`2026-11-30T10:00:00.000Z`) that `value`
/// names, relative to `now` (Unix ms): a duration ago (`90s`, `10m`, `1h`,
/// `2d`, `1h 30m`), a date (`2026-11-30`, midnight UTC), a date and time
/// without zone (`2026-11-30T10:00:00` or with a space, UTC), or RFC 3339.
pub fn parse_at(value: &str, now: i64) -> Option<String> {
    let v = value.trim();
    if let Ok(d) = humantime::parse_duration(v) {
        let ms = i64::try_from(d.as_millis()).ok()?;
        return Some(rfc3339_ms(now.checked_sub(ms)?));
    }
    if let Some(ms) = crate::timefmt::parse_rfc3339_ms(v) {
        return Some(rfc3339_ms(ms));
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(v, f) {
            return Some(rfc3339_ms(t.and_utc().timestamp_millis()));
        }
    }
    let d = NaiveDate::parse_from_str(v, "%Y-%m-%d").ok()?;
    Some(rfc3339_ms(
        d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis(),
    ))
}

/// [`parse_at`] now, or the error that says which forms are taken.
pub fn resolve(
    option: &'static str,
    value: Option<String>,
) -> Result<Option<String>, super::LocalError> {
    value
        .map(|v| parse_at(&v, now_ms()).ok_or(super::LocalError::When { option, value: v }))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_ago_dates_and_times() {
        let now = 1_764_496_800_000; // 2025-11-30T10:00:00Z
        assert_eq!(parse_at("10m", now).unwrap(), "2025-11-30T09:50:00.000Z");
        assert_eq!(parse_at("1h 30m", now).unwrap(), "2025-11-30T08:30:00.000Z");
        assert_eq!(parse_at("2d", now).unwrap(), "2025-11-28T10:00:00.000Z");
        assert_eq!(
            parse_at("2026-11-30", now).unwrap(),
            "2026-11-30T00:00:00.000Z"
        );
        assert_eq!(
            parse_at("2026-11-30T10:00:00Z", now).unwrap(),
            "2026-11-30T10:00:00.000Z"
        );
        assert_eq!(
            parse_at("2026-11-30T12:00:00+02:00", now).unwrap(),
            "2026-11-30T10:00:00.000Z"
        );
        assert_eq!(
            parse_at("2026-11-30 10:00:00", now).unwrap(),
            "2026-11-30T10:00:00.000Z"
        );
        for bad in ["", "yesterday", "10", "2026-13-01", "10 parsecs"] {
            assert!(parse_at(bad, now).is_none(), "{bad}");
        }
    }
}
