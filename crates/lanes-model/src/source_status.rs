//! How each of the bridge's sources is, as the bridge writes it in
//! `bridge:status` ([`STATUS_KEY`](crate::bridge_config::STATUS_KEY)) and
//! the daemon reads it: `source:<name>` is [`UP`] or [`FAILED`]; a failed
//! source's reason (with what to do) and time are in `source:<name>:error`
//! and `source:<name>:failed_at`.

/// The prefix of every source field.
pub const PREFIX: &str = "source:";
/// A source whose inbound side runs.
pub const UP: &str = "up";
/// A source stopped by a failure (not started again until a reload).
pub const FAILED: &str = "failed";

/// The state field of source `name`.
pub fn state(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The reason field of source `name`.
pub fn error(name: &str) -> String {
    format!("{PREFIX}{name}:error")
}

/// The failure time field of source `name` (RFC 3339).
pub fn failed_at(name: &str) -> String {
    format!("{PREFIX}{name}:failed_at")
}

/// The source whose state field `field` is; `None` for any other field.
pub fn of(field: &str) -> Option<&str> {
    field
        .strip_prefix(PREFIX)
        .filter(|n| !n.is_empty() && !n.contains(':'))
}

/// One source as `bridge:status` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceState {
    /// The source's name.
    pub name: String,
    /// Whether its inbound side runs.
    pub up: bool,
    /// Why it stopped, and what to do (a failed source).
    pub error: Option<String>,
    /// When it stopped (RFC 3339; a failed source).
    pub failed_at: Option<String>,
}

/// Every source `bridge:status` (all its fields) has, by name.
pub fn read(fields: &std::collections::HashMap<String, String>) -> Vec<SourceState> {
    let mut all: Vec<SourceState> = fields
        .iter()
        .filter_map(|(k, v)| {
            let name = of(k)?;
            let failed = v != UP;
            Some(SourceState {
                name: name.to_string(),
                up: !failed,
                error: failed.then(|| fields.get(&error(name)).cloned()).flatten(),
                failed_at: failed
                    .then(|| fields.get(&failed_at(name)).cloned())
                    .flatten(),
            })
        })
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_are_read_by_name_with_a_failed_ones_reason() {
        let fields: std::collections::HashMap<String, String> = [
            ("reload_error", "x"),
            ("source:webhook", "up"),
            ("source:discord", "failed"),
            ("source:discord:error", "Discord refused the bot token"),
            ("source:discord:failed_at", "2026-01-01T00:00:00.000Z"),
            // Left by a failure before the source came up again.
            ("source:email:error", "old"),
            ("source:email", "up"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let got = read(&fields);
        let names: Vec<&str> = got.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["discord", "email", "webhook"]);
        assert!(!got[0].up);
        assert_eq!(
            got[0].error.as_deref(),
            Some("Discord refused the bot token")
        );
        assert!(got[0].failed_at.is_some());
        assert!(got[1].up);
        assert_eq!(got[1].error, None);
    }

    #[test]
    fn only_a_state_field_names_a_source() {
        assert_eq!(of(&state("discord")), Some("discord"));
        assert_eq!(of(&error("discord")), None);
        assert_eq!(of(&failed_at("discord")), None);
        assert_eq!(of("reload_error"), None);
        assert_eq!(of("source:"), None);
    }
}
