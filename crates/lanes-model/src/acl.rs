//! The Redis ACL: who may run which commands on which keys. Every rule is
//! an explicit allowlist that starts from `reset`; never `+@all -@dangerous`,
//! which still allows SCAN, RANDOMKEY, DBSIZE, PUBSUB, CLIENT TRACKING,
//! EVAL, FUNCTION FLUSH, SELECT and more.
//!
//! An agent's outboxes are granted per family (source or responder), never
//! as `<agent>:*:outbox`: an agent must not be able to make keys that no
//! consumer drains. So the rules depend on the families, and change (live,
//! through `ACL SETUSER`) when the sources or responders do.

use crate::lane_commands::{acl_rules, Scope};
use crate::name::{AgentName, NameError};
use crate::secret::Secret;
use crate::stream_key::{dead_letter, glob, Dir, BRIDGE_KEYS};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// The daemon's own administrative user (provisions the others).
pub const ADMIN_USER: &str = "sys";
/// The bridge's user.
pub const BRIDGE_USER: &str = "bridge";
/// What an agent's user name starts with; users with it belong to agents.
pub const AGENT_PREFIX: &str = "agent_";
/// What a responder's user name starts with.
pub const RESPONDER_PREFIX: &str = "resp_";

/// An ACL user of the private Redis: its name (`Display`, `FromStr`) and
/// its rules.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AclUser {
    /// `sys`, the daemon's administrative user.
    Admin,
    /// `bridge`, the bridge.
    Bridge,
    /// `agent_<name>`, an agent (through its proxy socket).
    Agent(AgentName),
    /// `resp_<name>`, a responder.
    Responder(String),
}

impl AclUser {
    /// The rules of the user, to follow `reset on <hash>`; `families` are
    /// the sources and responders, whose outboxes an agent may append to.
    pub fn rules(&self, families: &[String]) -> Vec<String> {
        match self {
            AclUser::Admin => admin_rules(),
            AclUser::Bridge => bridge_rules(),
            AclUser::Agent(a) => agent_rules(a, families),
            AclUser::Responder(r) => responder_rules(r),
        }
    }

    /// Whether `user` is the name of a user made per agent or responder
    /// (valid or not), which the daemon removes when they are gone.
    pub fn is_per_lane(user: &str) -> bool {
        user.starts_with(AGENT_PREFIX) || user.starts_with(RESPONDER_PREFIX)
    }
}

impl fmt::Display for AclUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclUser::Admin => f.write_str(ADMIN_USER),
            AclUser::Bridge => f.write_str(BRIDGE_USER),
            AclUser::Agent(a) => write!(f, "{AGENT_PREFIX}{a}"),
            AclUser::Responder(r) => write!(f, "{RESPONDER_PREFIX}{r}"),
        }
    }
}

/// Why a string is not the name of one of the lanes' ACL users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    /// An agent's user whose agent name is not one.
    #[error("ACL user {user:?}: {source}")]
    Agent {
        /// The user as given.
        user: String,
        /// Why the agent part is not a name.
        source: NameError,
    },
    /// None of the lanes' users.
    #[error(
        "{user:?} is not an ACL user of the lanes ({ADMIN_USER}, {BRIDGE_USER}, {AGENT_PREFIX}<agent> or {RESPONDER_PREFIX}<responder>)"
    )]
    Unknown {
        /// The user as given.
        user: String,
    },
}

impl FromStr for AclUser {
    type Err = UserError;

    fn from_str(user: &str) -> Result<AclUser, UserError> {
        if user == ADMIN_USER {
            return Ok(AclUser::Admin);
        }
        if user == BRIDGE_USER {
            return Ok(AclUser::Bridge);
        }
        if let Some(a) = user.strip_prefix(AGENT_PREFIX) {
            return a
                .parse()
                .map(AclUser::Agent)
                .map_err(|source| UserError::Agent {
                    user: user.to_string(),
                    source,
                });
        }
        if let Some(r) = user.strip_prefix(RESPONDER_PREFIX) {
            if crate::stream_key::is_family_name(r) {
                return Ok(AclUser::Responder(r.to_string()));
            }
        }
        Err(UserError::Unknown {
            user: user.to_string(),
        })
    }
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

/// The rules of an agent, made from [`LANE_COMMANDS`]: the commands of its
/// inboxes and of no key on `<agent>:*:inbox`; on its outboxes of
/// `families` only XADD, through a write-only selector, and what the lane
/// proxy needs to keep them within their bounds (lengths, memory, consumer
/// groups' progress, removing acknowledged entries), through a third
/// selector; WATCH of its inboxes and outboxes through a second. The proxy refuses the meter's commands from the agent
/// itself: to the agent its outboxes stay write-only.
///
/// [`LANE_COMMANDS`]: crate::lane_commands::LANE_COMMANDS
fn agent_rules(agent: &AgentName, families: &[String]) -> Vec<String> {
    let mut r: Vec<String> = vec!["resetchannels".into(), "-@all".into()];
    r.extend(acl_rules(&[
        Scope::Connection,
        Scope::OwnInboxes,
        Scope::OwnGroup,
    ]));
    r.push(format!("~{}", glob(Some(agent), None, Dir::Inbox)));
    if families.is_empty() {
        // No family, no outbox: a selector without keys would be useless.
        return r;
    }
    let outboxes: Vec<String> = families
        .iter()
        .map(|f| glob(Some(agent), Some(f), Dir::Outbox))
        .collect();
    let keys = |prefix: &str| {
        outboxes
            .iter()
            .map(|k| format!("{prefix}{k}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    r.push(format!(
        "({} {})",
        acl_rules(&[Scope::OwnOutboxes]).join(" "),
        keys("%W~")
    ));
    // A selector must match every key of a command: WATCH of an inbox and
    // an outbox together needs one selector with both.
    r.push(format!(
        "({} ~{} {})",
        acl_rules(&[Scope::OwnStreams]).join(" "),
        glob(Some(agent), None, Dir::Inbox),
        keys("~")
    ));
    r.push(format!("({} {})", METER_COMMANDS.join(" "), keys("~")));
    r
}

/// What the lane proxy's meter sends about an agent's outboxes, as the
/// agent: no command that returns an entry's content.
const METER_COMMANDS: &[&str] = &[
    "+xlen",
    "+xinfo|groups",
    "+xpending",
    "+xtrim",
    "+memory|usage",
];

/// The bridge: reads, acknowledges and trims every outbox, writes every inbox,
/// the dead-letter streams and its own `bridge:*` keys.
fn bridge_rules() -> Vec<String> {
    let mut r = vec!["resetchannels".to_string(), "-@all".to_string()];
    r.extend(HOST_STREAM_COMMANDS.iter().map(|s| s.to_string()));
    r.push("+scan".into());
    r.push("+type".into());
    r.push("+hincrby".into());
    r.push("+hgetall".into());
    r.push("+hset".into());
    r.push("+hdel".into());
    // Delivered entries are trimmed from the outboxes (XTRIM MINID).
    r.push("+xtrim".into());
    // The consult router's open questions (`bridge:consult:open:*`, sorted
    // sets that expire, answered ones kept apart by the sign of their score:
    // counted with ZCOUNT), each written with its inbox entry in one MULTI.
    for c in [
        "+zadd",
        "+zrem",
        "+zscore",
        "+zcard",
        "+zcount",
        "+zremrangebyscore",
        "+pexpire",
        "+multi",
        "+exec",
    ] {
        r.push(c.into());
    }
    // The discord source's message ids taken (`bridge:discord:seen`, a
    // sorted set kept to its last N): read back at start, trimmed by rank.
    r.push("+zrange".into());
    r.push("+zremrangebyrank".into());
    if crate::stream_key::key_form() == crate::stream_key::KeyForm::Tagged {
        // A server shared by several hosts may be a cluster: the bridge's
        // client learns which node serves which slot (read-only).
        r.push("+cluster|slots".into());
        // The routes every host's daemon writes (read only).
        r.push("+hlen".into());
        // The discord gateway's lease (`bridge:discord:gateway`): one
        // bridge of several runs the bot's session.
        // A selector of its own: SET nowhere else (not on an inbox).
        r.push("(+set +get ~bridge:discord:gateway)".into());
        r.push(format!("%R~{}", crate::shared_routes::SHARED_ROUTES_KEY));
    }
    let outboxes = glob(None, None, Dir::Outbox);
    r.push(format!("~{outboxes}"));
    r.push(format!("~{}", dead_letter(&outboxes)));
    r.push(format!("~{BRIDGE_KEYS}"));
    // Its records about each agent, in the agent's slot (tagged form only).
    for g in crate::stream_key::agent_record_grants() {
        r.push(format!("~{g}"));
    }
    r.push(format!("%W~{}", glob(None, None, Dir::Inbox)));
    r
}

/// A responder: reads and acknowledges its own outboxes of every agent
/// (no XADD there: it cannot forge a request), and only appends to the
/// matching inboxes, through a write-only selector (it cannot read an
/// answer back, its own or another's).
fn responder_rules(responder: &str) -> Vec<String> {
    let mut r = vec!["resetchannels".to_string(), "-@all".to_string()];
    // What a lane's connection itself needs (HELLO, MULTI/EXEC for a reply
    // and its XACK together, …), as an agent's has it.
    r.extend(acl_rules(&[Scope::Connection]));
    r.extend(
        HOST_STREAM_COMMANDS
            .iter()
            .filter(|c| c.starts_with("+x") && **c != "+xadd")
            .map(|s| s.to_string()),
    );
    // The lane proxy counts the consumer names of its group.
    r.push("+xinfo|consumers".into());
    r.push(format!("~{}", glob(None, Some(responder), Dir::Outbox)));
    r.push(format!(
        "(+xadd %W~{})",
        glob(None, Some(responder), Dir::Inbox)
    ));
    // The lane proxy sends each reply as one script that checks its
    // request is pending, appends it and acknowledges the request, so a
    // request has one reply. EVAL names both keys, so one selector must
    // hold both; the script's own commands are checked against the rules
    // above one by one, and the proxy never takes EVAL from the responder.
    r.push(format!(
        "(+eval ~{} ~{})",
        glob(None, Some(responder), Dir::Outbox),
        glob(None, Some(responder), Dir::Inbox)
    ));
    r
}

/// The daemon's administrative user: everything.
fn admin_rules() -> Vec<String> {
    ["resetchannels", "~*", "+@all"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The rules of the user a person creates on a shared server for oxidepm
/// (`[lanes] redis_url`): every key, because agents' names are not known in
/// advance, and every command but the dangerous ones, given back only
/// what provisioning needs — ACL (without LOAD, which would drop every
/// client of every tenant), INFO, ROLE and the cluster's layout. No
/// FLUSHALL, FLUSHDB, KEYS, CONFIG, SHUTDOWN, DEBUG, MIGRATE or MONITOR.
pub const SHARED_ADMIN_RULES: &[&str] = &[
    "~*",
    "&*",
    "+@all",
    "-@dangerous",
    "+acl",
    "-acl|load",
    "-acl|log",
    "+info",
    "+role",
    "+cluster|info",
    "+cluster|myid",
    "+cluster|nodes",
    "+cluster|shards",
    "+cluster|slots",
];

/// One `user` line of an ACL file.
pub fn user_line(user: &AclUser, password: &Secret, families: &[String]) -> String {
    format!(
        "user {user} reset on {} {}",
        hashed(password.expose()),
        user.rules(families).join(" ")
    )
}

/// The default user's line: always off and without a password, so no
/// connection can ever be it (without this line Redis would create a
/// default user that is on, with full access). It still holds the writes:
/// Redis 7.0 replays a MULTI/EXEC from its append-only file as `default`
/// and checks the ACL again at EXEC (redis/redis#14541), so without them
/// every transaction — and every group read of several entries, which
/// Redis records as one — would be dropped at a restart, and its messages
/// handed out again. Only writes reach the file.
pub const DEFAULT_USER_LINE: &str = "user default reset off resetchannels ~* +@write";

/// The whole ACL file: the default user first ([`DEFAULT_USER_LINE`]),
/// then every other user.
pub fn acl_file(users: &[(AclUser, Secret)], families: &[String]) -> String {
    let mut out = format!("{DEFAULT_USER_LINE}\n");
    for (user, password) in users {
        out.push_str(&user_line(user, password, families));
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

    fn families() -> Vec<String> {
        vec!["webhook".into(), "ops".into()]
    }

    #[test]
    fn agent_rules_are_an_allowlist() {
        let alice = AclUser::Agent("alice".parse().unwrap());
        let r = alice.rules(&families()).join(" ");
        assert!(r.contains("-@all"));
        assert!(!r.contains("+@all"));
        assert!(r.contains("~alice:*:inbox"));
        assert!(r.contains("(+xadd %W~alice:webhook:outbox %W~alice:ops:outbox)"));
        assert!(r.contains("(+watch ~alice:*:inbox ~alice:webhook:outbox ~alice:ops:outbox)"));
        assert!(r.ends_with(
            "(+xlen +xinfo|groups +xpending +xtrim +memory|usage \
             ~alice:webhook:outbox ~alice:ops:outbox)"
        ));
        for cmd in [
            "+multi",
            "+exec",
            "+xautoclaim",
            "+xgroup|create",
            "+command",
        ] {
            assert!(r.contains(&format!(" {cmd} ")), "{cmd} missing: {r}");
        }
        for cmd in ["+info", "+client", "+quit", "+xgroup|destroy", "+xdel"] {
            assert!(!r.contains(&format!(" {cmd} ")), "{cmd} granted: {r}");
        }
        assert!(!r.contains("~*"));
        assert!(!r.contains(":*:outbox"), "no outbox of any family: {r}");
        let f = acl_file(&[(alice.clone(), Secret::new("pw"))], &families());
        assert!(f.starts_with("user default reset off"));
        assert!(!f.contains(" pw"), "no clear password in the file");
        // Without families an agent has no outbox at all.
        assert!(!alice.rules(&[]).join(" ").contains("outbox"));
    }

    #[test]
    fn users_and_their_rules() {
        let ops = AclUser::Responder("ops".into());
        for (u, name) in [
            (AclUser::Admin, "sys"),
            (AclUser::Bridge, "bridge"),
            (AclUser::Agent("alice".parse().unwrap()), "agent_alice"),
            (ops.clone(), "resp_ops"),
        ] {
            assert_eq!(u.to_string(), name);
            assert_eq!(name.parse::<AclUser>().unwrap(), u);
        }
        for bad in ["default", "agent_A*", "resp_", "alice"] {
            assert!(bad.parse::<AclUser>().is_err(), "{bad} accepted");
        }
        assert!(AclUser::is_per_lane("agent_Old") && AclUser::is_per_lane("resp_x"));
        assert!(!AclUser::is_per_lane("bridge"));
        assert_eq!(
            AclUser::Bridge.rules(&families()).join(" "),
            "resetchannels -@all +xadd +xreadgroup +xack +xautoclaim +xclaim \
             +xpending +xlen +xrange +xinfo|stream +xinfo|groups +xgroup|create +xgroup|createconsumer \
             +ping +acl|whoami +scan +type +hincrby +hgetall +hset +hdel +xtrim \
             +zadd +zrem +zscore +zcard +zcount +zremrangebyscore +pexpire +multi +exec \
             +zrange +zremrangebyrank \
             ~*:*:outbox ~*:*:outbox:dead ~bridge:* %W~*:*:inbox"
        );
        let r = ops.rules(&families()).join(" ");
        assert!(
            r.starts_with("resetchannels -@all ")
                && r.ends_with(
                    "+xreadgroup +xack +xautoclaim +xclaim +xpending +xlen +xrange \
                     +xinfo|stream +xinfo|groups +xgroup|create +xgroup|createconsumer \
                     +xinfo|consumers ~*:ops:outbox (+xadd %W~*:ops:inbox) \
                     (+eval ~*:ops:outbox ~*:ops:inbox)"
                ),
            "{r}"
        );
        for cmd in ["+multi", "+exec", "+hello", "+ping", "+acl|whoami"] {
            assert!(r.contains(&format!(" {cmd} ")), "{cmd} missing: {r}");
        }
        // No XADD but to inboxes, no other key, no trimming or deleting.
        assert_eq!(r.matches("+xadd").count(), 1, "{r}");
        for no in [
            "~*",
            "%R~",
            "+xtrim",
            "+xdel",
            "+del",
            "+xgroup|destroy",
            "+scan",
        ] {
            assert!(!r.contains(&format!("{no} ")), "{no} granted: {r}");
        }
        assert_eq!(
            AclUser::Admin.rules(&families()).join(" "),
            "resetchannels ~* +@all"
        );
    }
}
