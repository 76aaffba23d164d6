//! Agent names. A name becomes part of key patterns (`<name>:*:inbox`), an
//! ACL user and a socket file, so only a narrow alphabet is allowed: a glob
//! character or a colon would widen a pattern (an agent named `a*` would
//! own `alice:*`).

/// Names no agent may take: Redis's own user, the host-side identities and
/// words the lanes use themselves.
pub const RESERVED: &[&str] = &[
    "default", "bridge", "sys", "resp", "agent", "lanes", "redis",
];

/// Checks an agent name against `[a-z][a-z0-9_-]{0,30}` and the reserved
/// words (`RESERVED`, and the configured sources and responders).
pub fn check_agent_name(name: &str, sources: &[String]) -> Result<(), String> {
    let b = name.as_bytes();
    let shape = !b.is_empty()
        && b.len() <= 31
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if !shape {
        return Err(format!(
            "agent name {name:?} is not allowed: it must start with a lowercase letter and have at most 31 of a-z, 0-9, '_' and '-' (no capitals, colons or glob characters, which would widen the agent's key patterns)"
        ));
    }
    if RESERVED.contains(&name) || sources.iter().any(|s| s == name) {
        return Err(format!(
            "agent name {name:?} is reserved (it names a built-in identity, a source or a responder); choose another"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let src = vec!["discord".to_string(), "ops".to_string()];
        assert!(check_agent_name("alice", &src).is_ok());
        assert!(check_agent_name("a", &src).is_ok());
        assert!(check_agent_name("bot-2_x", &src).is_ok());
        assert!(check_agent_name(&format!("a{}", "b".repeat(30)), &src).is_ok());
        for good in ["bob-2", "x_y"] {
            assert!(check_agent_name(good, &[]).is_ok(), "{good} refused");
        }
        for bad in [
            "a*",
            "x:y",
            "Alice",
            "bridge",
            "default",
            "discord",
            "ops",
            "",
            "1abc",
            "-a",
            "A",
            "a.b",
            &"a".repeat(32),
        ] {
            assert!(check_agent_name(bad, &src).is_err(), "{bad} accepted");
        }
    }
}
