//! Times on the command line: `10m` ago, a date, or an RFC 3339 time,
//! turned into the RFC 3339 UTC form the daemon takes.

use crate::timefmt::{now_ms, rfc3339_ms};
use chrono::{NaiveDate, NaiveDateTime};

/// The RFC 3339 UTC time (`2026-11-30T10:00:00.000Z`) that `value`
/// names, relative to `now` (Unix ms): a duration ago (`90s`, `10m`, `1h`,
/// `2d`, `1h 30m`), a date (`2026-11-30`, midnight UTC), a date and time
/// without zone (`2026-11-30T10:00:00` or with a space, UTC), RFC 3339, or
/// journalctl's words `now`, `today` and `yesterday` (midnight, local time).
pub fn parse_at(value: &str, now: i64) -> Option<String> {
    parse_at_in(value, now, &chrono::Local)
}

/// [`parse_at`] with `today` and `yesterday` in the time zone `tz`.
fn parse_at_in<Tz: chrono::TimeZone>(value: &str, now: i64, tz: &Tz) -> Option<String> {
    let v = value.trim();
    let days_back = match v {
        "now" => return Some(rfc3339_ms(now)),
        "today" => Some(0),
        "yesterday" => Some(1),
        _ => None,
    };
    if let Some(back) = days_back {
        let local = tz.timestamp_millis_opt(now).single()?;
        let day = local
            .date_naive()
            .checked_sub_days(chrono::Days::new(back))?;
        let midnight = tz
            .from_local_datetime(&day.and_hms_opt(0, 0, 0)?)
            .earliest()?;
        return Some(rfc3339_ms(midnight.timestamp_millis()));
    }
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
        for bad in ["", "tomorrow", "10", "2026-13-01", "10 parsecs"] {
            assert!(parse_at(bad, now).is_none(), "{bad}");
        }
    }

    #[test]
    fn journalctls_words_are_midnights_of_the_local_day() {
        let now = 1_764_496_800_000; // 2025-11-30T10:00:00Z
        assert_eq!(parse_at("now", now).unwrap(), "2025-11-30T10:00:00.000Z");
        let utc = chrono::Utc;
        assert_eq!(
            parse_at_in("today", now, &utc).unwrap(),
            "2025-11-30T00:00:00.000Z"
        );
        assert_eq!(
            parse_at_in("yesterday", now, &utc).unwrap(),
            "2025-11-29T00:00:00.000Z"
        );
        // At UTC+11 it is already 21:00 on the 30th; at UTC-11, 23:00 on
        // the 29th.
        let east = chrono::FixedOffset::east_opt(11 * 3600).unwrap();
        assert_eq!(
            parse_at_in("today", now, &east).unwrap(),
            "2025-11-29T13:00:00.000Z"
        );
        let west = chrono::FixedOffset::west_opt(11 * 3600).unwrap();
        assert_eq!(
            parse_at_in("today", now, &west).unwrap(),
            "2025-11-29T11:00:00.000Z"
        );
    }
}
