//! The one list of what an agent may send through its lane.
//!
//! Three things are made from [`LANE_COMMANDS`] and nothing else: the agent's
//! ACL rules (`crate::acl`), the documentation of the proxy's filter and
//! the list in `docs/lanes.md` (both the Markdown of [`markdown`], which
//! `docs/lane-commands.md` holds and `docs/lanes.md` repeats). The proxy's filter
//! is tested against the table: every command Redis knows is refused unless
//! it is here, and each entry's example passes it (and Redis's ACL).
//!
//! The proxy sees a command's arguments, the ACL only key patterns: so the
//! ACL grants a command on the agent's keys (`<agent>:*:inbox`, and its
//! outboxes of configured families), and the proxy narrows it to what the
//! [`Scope`] says (inboxes of configured families, the agent's own group).

use std::fmt::Write as _;

/// Where a command may act on an agent's lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// No key: the connection, identity, introspection, transactions.
    Connection,
    /// The agent's own inboxes (`<agent>:<family>:inbox` of a configured
    /// family); the ACL refuses any other key.
    OwnInboxes,
    /// The agent's own inboxes and its own consumer group (its name) only;
    /// the proxy refuses another group, an outbox or another agent's key.
    OwnGroup,
    /// The agent's own inboxes and outboxes (WATCH).
    OwnStreams,
    /// The agent's own outboxes of configured families, append only.
    OwnOutboxes,
    /// Answered by the proxy itself; never reaches Redis.
    Proxy,
}

impl Scope {
    /// How the documentation names it.
    pub fn describe(self) -> &'static str {
        match self {
            Scope::Connection => "no key",
            Scope::OwnInboxes => "own inboxes",
            Scope::OwnGroup => "own inboxes, own group",
            Scope::OwnStreams => "own inboxes and outboxes",
            Scope::OwnOutboxes => "own outboxes (write only)",
            Scope::Proxy => "answered by the proxy",
        }
    }
}

/// One command (or subcommand) an agent may send.
#[derive(Clone, Copy, Debug)]
pub struct LaneCommand {
    /// As a client sends it, upper case: `XGROUP CREATE`.
    pub name: &'static str,
    /// Where it may act.
    pub scope: Scope,
    /// Why an agent needs it, and what the proxy adds.
    pub why: &'static str,
    /// A use of it on an agent's lane, with `{inbox}`, `{outbox}`,
    /// `{group}` and `{consumer}` standing for the agent's own: the tests
    /// send it through the filter and, as the agent, to Redis.
    pub example: &'static [&'static str],
}

impl LaneCommand {
    /// The ACL rule that grants it (`+xgroup|create`); none for a command
    /// the proxy answers.
    pub fn acl_rule(&self) -> Option<String> {
        if self.scope == Scope::Proxy {
            return None;
        }
        Some(format!(
            "+{}",
            self.name.to_ascii_lowercase().replace(' ', "|")
        ))
    }

    /// The example with the placeholders filled in.
    pub fn example_with(&self, inbox: &str, outbox: &str, group: &str) -> Vec<String> {
        self.example
            .iter()
            .map(|a| match *a {
                "{inbox}" => inbox.to_string(),
                "{outbox}" => outbox.to_string(),
                "{group}" => group.to_string(),
                "{consumer}" => format!("{group}-1"),
                other => other.to_string(),
            })
            .collect()
    }
}

const fn c(
    name: &'static str,
    scope: Scope,
    why: &'static str,
    example: &'static [&'static str],
) -> LaneCommand {
    LaneCommand {
        name,
        scope,
        why,
        example,
    }
}

use Scope::*;

/// Every command an agent may send; anything else is refused by the proxy
/// with `-NOPERM` and never reaches Redis.
pub const LANE_COMMANDS: &[LaneCommand] = &[
    c(
        "XADD",
        OwnOutboxes,
        "send; `<family>:outbox` is mapped to the agent's own; `LIMIT` refused; within the outbox bounds",
        &["XADD", "{outbox}", "*", "text", "hi"],
    ),
    c(
        "XREADGROUP",
        OwnGroup,
        "receive (blocking reads too); one GROUP clause; consumer names bounded",
        &["XREADGROUP", "GROUP", "{group}", "{consumer}", "COUNT", "1", "STREAMS", "{inbox}", ">"],
    ),
    c(
        "XACK",
        OwnGroup,
        "acknowledge what was handled",
        &["XACK", "{inbox}", "{group}", "0-1"],
    ),
    c(
        "XPENDING",
        OwnGroup,
        "what was read and not acknowledged",
        &["XPENDING", "{inbox}", "{group}"],
    ),
    c(
        "XCLAIM",
        OwnGroup,
        "take over a dead consumer's entries",
        &["XCLAIM", "{inbox}", "{group}", "{consumer}", "0", "0-1"],
    ),
    c(
        "XAUTOCLAIM",
        OwnGroup,
        "take over pending entries when consumer names change between runs",
        &["XAUTOCLAIM", "{inbox}", "{group}", "{consumer}", "0", "0-0"],
    ),
    c(
        "XGROUP CREATE",
        OwnGroup,
        "the usual start-up idiom (`MKSTREAM`); the group exists already, so Redis answers `BUSYGROUP`",
        &["XGROUP", "CREATE", "{inbox}", "{group}", "$", "MKSTREAM"],
    ),
    c(
        "XGROUP CREATECONSUMER",
        OwnGroup,
        "name a consumer ahead of reading; names bounded",
        &["XGROUP", "CREATECONSUMER", "{inbox}", "{group}", "{consumer}"],
    ),
    c(
        "XGROUP DELCONSUMER",
        OwnGroup,
        "forget a consumer, which frees its name in the bound",
        &["XGROUP", "DELCONSUMER", "{inbox}", "{group}", "{consumer}"],
    ),
    c(
        "XGROUP SETID",
        OwnGroup,
        "re-read or skip entries",
        &["XGROUP", "SETID", "{inbox}", "{group}", "$"],
    ),
    c(
        "XREAD",
        OwnInboxes,
        "read without a group",
        &["XREAD", "COUNT", "1", "STREAMS", "{inbox}", "0-0"],
    ),
    c(
        "XRANGE",
        OwnInboxes,
        "read a range",
        &["XRANGE", "{inbox}", "-", "+", "COUNT", "1"],
    ),
    c(
        "XREVRANGE",
        OwnInboxes,
        "read a range backwards",
        &["XREVRANGE", "{inbox}", "+", "-", "COUNT", "1"],
    ),
    c("XLEN", OwnInboxes, "an inbox's length", &["XLEN", "{inbox}"]),
    c(
        "XINFO STREAM",
        OwnInboxes,
        "inspect an inbox",
        &["XINFO", "STREAM", "{inbox}"],
    ),
    c(
        "XINFO GROUPS",
        OwnInboxes,
        "inspect an inbox's group",
        &["XINFO", "GROUPS", "{inbox}"],
    ),
    c(
        "XINFO CONSUMERS",
        OwnInboxes,
        "inspect the group's consumers",
        &["XINFO", "CONSUMERS", "{inbox}", "{group}"],
    ),
    c(
        "WATCH",
        OwnStreams,
        "optimistic locking for a transaction",
        &["WATCH", "{inbox}"],
    ),
    c("UNWATCH", Connection, "forget the watched keys", &["UNWATCH"]),
    c(
        "MULTI",
        Connection,
        "start a transaction; every queued command is filtered as outside one, and a refused one makes `EXEC` answer `EXECABORT`",
        &["MULTI"],
    ),
    c("EXEC", Connection, "run the transaction", &["EXEC"]),
    c("DISCARD", Connection, "drop the transaction", &["DISCARD"]),
    c("PING", Connection, "connection check", &["PING"]),
    c("ECHO", Connection, "connection check", &["ECHO", "x"]),
    c(
        "HELLO",
        Connection,
        "protocol negotiation (`HELLO 3`); `SETNAME` is kept by the proxy, `AUTH` refused",
        &["HELLO", "2"],
    ),
    c(
        "COMMAND",
        Connection,
        "client libraries' introspection (`COMMAND DOCS`, `INFO`, `COUNT`)",
        &["COMMAND", "COUNT"],
    ),
    c(
        "ACL WHOAMI",
        Connection,
        "the lane's identity (`agent_<agent>`)",
        &["ACL", "WHOAMI"],
    ),
    c(
        "CLIENT SETNAME",
        Proxy,
        "a client name, kept for the connection (libraries set one at connect)",
        &["CLIENT", "SETNAME", "worker"],
    ),
    c(
        "CLIENT GETNAME",
        Proxy,
        "the connection's own name",
        &["CLIENT", "GETNAME"],
    ),
    c(
        "CLIENT SETINFO",
        Proxy,
        "library name and version, accepted and ignored",
        &["CLIENT", "SETINFO", "LIB-NAME", "x"],
    ),
    c(
        "INFO",
        Proxy,
        "a minimal answer for ready checks: `redis_version`, `loading:0`; no server state",
        &["INFO"],
    ),
    c(
        "QUIT",
        Proxy,
        "`+OK`, then the connection is closed",
        &["QUIT"],
    ),
];

/// The entry for `name` (upper case, subcommand after one space).
pub fn find(name: &str) -> Option<&'static LaneCommand> {
    LANE_COMMANDS.iter().find(|c| c.name == name)
}

/// The ACL rules of the commands of `scopes`, in the table's order.
pub fn acl_rules(scopes: &[Scope]) -> Vec<String> {
    LANE_COMMANDS
        .iter()
        .filter(|c| scopes.contains(&c.scope))
        .filter_map(LaneCommand::acl_rule)
        .collect()
}

/// The table as Markdown, for the filter's documentation and `docs/lanes.md`.
pub fn markdown() -> String {
    let mut s = String::from("| command | where | why |\n|---|---|---|\n");
    for c in LANE_COMMANDS {
        let _ = writeln!(s, "| `{}` | {} | {} |", c.name, c.scope.describe(), c.why);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn repo_file(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    /// `OXIDEPM_BLESS=1 cargo test -p oxidepm-lanes lane_commands` writes
    /// the generated list into the files that hold it.
    fn bless() -> bool {
        std::env::var_os("OXIDEPM_BLESS").is_some()
    }

    #[test]
    fn names_are_unique_upper_case_and_examples_name_them() {
        for (i, c) in LANE_COMMANDS.iter().enumerate() {
            assert_eq!(c.name, c.name.to_ascii_uppercase());
            assert!(
                LANE_COMMANDS[..i].iter().all(|d| d.name != c.name),
                "{} twice",
                c.name
            );
            let words: Vec<&str> = c.name.split(' ').collect();
            assert_eq!(&c.example[..words.len()], &words[..], "{}", c.name);
        }
        assert_eq!(
            find("XGROUP CREATE").unwrap().acl_rule().as_deref(),
            Some("+xgroup|create")
        );
        assert_eq!(find("INFO").unwrap().acl_rule(), None);
    }

    #[test]
    fn the_docs_file_is_the_table() {
        let path = repo_file("docs/lane-commands.md");
        let want = markdown();
        if bless() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            have, want,
            "docs/lane-commands.md differs from LANE_COMMANDS: \
             run OXIDEPM_BLESS=1 cargo test -p oxidepm-lanes lane_commands"
        );
    }

    const BEGIN: &str = "<!-- lane-commands: generated from LANE_COMMANDS -->\n";
    const END: &str = "<!-- lane-commands: end -->";

    #[test]
    fn the_lanes_page_lists_the_table() {
        let path = repo_file("docs/lanes.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (Some(b), Some(e)) = (readme.find(BEGIN), readme.find(END)) else {
            panic!("docs/lanes.md has no generated list of lane commands ({BEGIN:?} … {END:?})");
        };
        let start = b + BEGIN.len();
        let want = markdown();
        if bless() && readme[start..e] != want {
            let fixed = format!("{}{want}{}", &readme[..start], &readme[e..]);
            std::fs::write(&path, fixed).unwrap();
            return;
        }
        assert_eq!(
            &readme[start..e],
            want,
            "docs/lanes.md's list of lane commands differs from LANE_COMMANDS: \
             run OXIDEPM_BLESS=1 cargo test -p oxidepm-lanes lane_commands"
        );
    }
}
