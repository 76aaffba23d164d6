//! What a `logs` request reads: which files (the plan) and which time
//! window of their lines. Shared by the tail, the follow and the search.

use crate::daemon::errors::OpError;
use oxidepm_proto::LogStream;
use std::path::PathBuf;

/// The log files a `logs` request reads: app, stream, path, files kept.
pub(in crate::daemon) type LogPlan = Vec<(String, LogStream, PathBuf, u32)>;

/// The time window of a `logs` request, as log stamps
/// (`2026-11-30T10:00:00.000Z`, which compare as bytes).
#[derive(Default)]
pub(in crate::daemon) struct Window {
    /// Lines stamped at or after this.
    pub since: Option<String>,
    /// Lines stamped at or before this.
    pub until: Option<String>,
}

impl Window {
    /// The window of a request's RFC 3339 times, refused when one does
    /// not parse.
    pub fn parse(since: Option<&str>, until: Option<&str>) -> Result<Window, OpError> {
        let stamp = |t: Option<&str>| match t {
            None => Ok(None),
            Some(t) => crate::timefmt::parse_rfc3339_ms(t)
                .map(|ms| Some(crate::timefmt::rfc3339_ms(ms)))
                .ok_or_else(|| OpError::BadSince {
                    since: t.to_string(),
                }),
        };
        Ok(Window {
            since: stamp(since)?,
            until: stamp(until)?,
        })
    }

    /// Whether it is every line (neither bound given).
    pub fn is_open(&self) -> bool {
        self.since.is_none() && self.until.is_none()
    }
}
