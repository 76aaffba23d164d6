//! The Redis ACL: who may run which commands on which keys. Every rule is
//! an explicit allowlist that starts from `reset`; never `+@all -@dangerous`,
//! which still allows SCAN, RANDOMKEY, DBSIZE, PUBSUB, CLIENT TRACKING,
//! EVAL, FUNCTION FLUSH, SELECT and more.

use sha2::{Digest, Sha256};

/// The daemon's own administrative user (provisions the others).
pub const ADMIN_USER: &str = "sys";
/// The bridge's user.
pub const BRIDGE_USER: &str = "bridge";

/// ACL user of an agent.
pub fn agent_user(agent: &str) -> String {
    format!("agent_{agent}")
}

/// ACL user of a responder.
pub fn responder_user(responder: &str) -> String {
    format!("resp_{responder}")
}

/// `#<sha256 hex>`: the form in which a password is stored, so the ACL file
/// never holds a password in clear.
pub fn hashed(password: &str) -> String {
    let digest = Sha256::digest(password.as_bytes());
    let mut s = String::with_capacity(65);
    s.push('#');
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The stream commands every host-side identity uses to drain and fill lanes.
const HOST_STREAM_COMMANDS: &[&str] = &[
    "+xadd",
    "+xreadgroup",
    "+xack",
    "+xautoclaim",
    "+xclaim",
    "+xpending",
    "+xlen",
    "+xrange",
    "+xinfo|stream",
    "+xinfo|groups",
    "+xgroup|create",
    "+xgroup|createconsumer",
    "+ping",
    "+acl|whoami",
];

/// The rules of an agent (after `reset on <hash>`): reads and acks on its own
/// inboxes; on its outboxes only XADD, through a write-only selector.
pub fn agent_rules(agent: &str) -> Vec<String> {
    let mut r: Vec<String> = [
        "resetchannels",
        "-@all",
        "+xreadgroup",
        "+xack",
        "+xpending",
        "+xrange",
        "+xrevrange",
        "+xlen",
        "+xinfo|stream",
        "+xinfo|groups",
        "+xinfo|consumers",
        "+ping",
        "+echo",
        "+acl|whoami",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    r.push(format!("~{agent}:*:inbox"));
    r.push(format!("(+xadd %W~{agent}:*:outbox)"));
    r
}

/// The bridge: reads and acknowledges every outbox, writes every inbox,
/// the dead-letter streams and its own `bridge:*` keys.
pub fn bridge_rules() -> Vec<String> {
    let mut r = vec!["resetchannels".to_string(), "-@all".to_string()];
    r.extend(HOST_STREAM_COMMANDS.iter().map(|s| s.to_string()));
    r.push("+scan".into());
    r.push("+type".into());
    r.push("+hincrby".into());
    r.push("+hgetall".into());
    r.push("+hset".into());
    r.push("+hdel".into());
    r.push("~*:*:outbox".into());
    r.push("~*:*:outbox:dead".into());
    r.push("~bridge:*".into());
    r.push("%W~*:*:inbox".into());
    r
}

/// A responder: reads its own outboxes of every agent, writes the matching
/// inboxes.
pub fn responder_rules(responder: &str) -> Vec<String> {
    let mut r = vec!["resetchannels".to_string(), "-@all".to_string()];
    r.extend(HOST_STREAM_COMMANDS.iter().map(|s| s.to_string()));
    r.push(format!("~*:{responder}:outbox"));
    r.push(format!("%W~*:{responder}:inbox"));
    r
}

/// The daemon's administrative user.
pub fn admin_rules() -> Vec<String> {
    ["resetchannels", "~*", "+@all"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// One `user` line of an ACL file.
pub fn user_line(user: &str, password: &str, rules: &[String]) -> String {
    format!(
        "user {user} reset on {} {}",
        hashed(password),
        rules.join(" ")
    )
}

/// The whole ACL file: the default user first and always off, with no
/// password, no commands and no keys (without this line Redis would create
/// a default user with full access), then every other user.
pub fn acl_file(users: &[(String, String, Vec<String>)]) -> String {
    let mut out = String::from("user default reset off resetchannels -@all\n");
    for (user, password, rules) in users {
        out.push_str(&user_line(user, password, rules));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_like_redis() {
        // sha256("foobar")
        assert_eq!(
            hashed("foobar"),
            "#c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"
        );
    }

    #[test]
    fn agent_rules_are_an_allowlist() {
        let r = agent_rules("alice").join(" ");
        assert!(r.contains("-@all"));
        assert!(!r.contains("+@all"));
        assert!(r.contains("~alice:*:inbox"));
        assert!(r.contains("(+xadd %W~alice:*:outbox)"));
        assert!(!r.contains("~*"));
        let f = acl_file(&[("agent_alice".into(), "pw".into(), agent_rules("alice"))]);
        assert!(f.starts_with("user default reset off"));
        assert!(!f.contains(" pw"), "no clear password in the file");
    }
}
