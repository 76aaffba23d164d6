//! The routing table: which agent an inbound message goes to.
//!
//! Pure: no I/O. For a message of source `s`, a route of `s` for its
//! channel beats one for its guild, which beats one for its address
//! (compared without regard to case); then the default agent; else the
//! message is unrouted (and goes to `bridge:unrouted`).

use std::collections::HashMap;
use std::fmt;

/// What a route matches on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteSelector {
    /// A channel id, exactly.
    Channel(String),
    /// A guild id, exactly.
    Guild(String),
    /// A mail address, without regard to case.
    Address(String),
}

impl RouteSelector {
    /// The value matched on.
    pub fn value(&self) -> &str {
        match self {
            RouteSelector::Channel(v) | RouteSelector::Guild(v) | RouteSelector::Address(v) => v,
        }
    }
}

impl fmt::Display for RouteSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteSelector::Channel(v) => write!(f, "channel {v:?}"),
            RouteSelector::Guild(v) => write!(f, "guild {v:?}"),
            RouteSelector::Address(v) => write!(f, "address {v:?}"),
        }
    }
}

/// One route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    /// The source it applies to.
    pub source: String,
    /// What it matches.
    pub selector: RouteSelector,
    /// Where it sends.
    pub agent: String,
}

impl RouteSpec {
    /// Whether both match the same messages.
    pub fn same_key(&self, other: &RouteSpec) -> bool {
        self.source == other.source
            && match (&self.selector, &other.selector) {
                (RouteSelector::Channel(a), RouteSelector::Channel(b))
                | (RouteSelector::Guild(a), RouteSelector::Guild(b)) => a == b,
                (RouteSelector::Address(a), RouteSelector::Address(b)) => {
                    a.to_lowercase() == b.to_lowercase()
                }
                _ => false,
            }
    }
}

/// What routing looks at in a message.
#[derive(Clone, Copy, Debug, Default)]
pub struct RouteKey<'a> {
    /// The source.
    pub source: &'a str,
    /// The channel, if any.
    pub channel: Option<&'a str>,
    /// The guild, if any.
    pub guild: Option<&'a str>,
    /// The address, if any.
    pub address: Option<&'a str>,
}

/// Why a message went where it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteBy {
    /// A channel route.
    Channel,
    /// A guild route.
    Guild,
    /// An address route.
    Address,
    /// The default agent.
    Default,
}

/// source → selector value → agent.
type Table = HashMap<String, HashMap<String, String>>;

/// The table, indexed for lookups.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    channel: Table,
    guild: Table,
    address: Table,
    default_agent: Option<String>,
}

impl Routes {
    /// Builds the table; of two routes with the same key the first wins
    /// (the configuration check refuses conflicting ones).
    pub fn new(routes: &[RouteSpec], default_agent: Option<String>) -> Routes {
        let mut t = Routes {
            default_agent,
            ..Routes::default()
        };
        for r in routes {
            let (map, value) = match &r.selector {
                RouteSelector::Channel(v) => (&mut t.channel, v.clone()),
                RouteSelector::Guild(v) => (&mut t.guild, v.clone()),
                RouteSelector::Address(v) => (&mut t.address, v.to_lowercase()),
            };
            map.entry(r.source.clone())
                .or_default()
                .entry(value)
                .or_insert_with(|| r.agent.clone());
        }
        t
    }

    /// The agent a message goes to and why, or `None`: unrouted.
    pub fn route(&self, key: &RouteKey<'_>) -> Option<(&str, RouteBy)> {
        fn look<'t>(map: &'t Table, source: &str, v: Option<&str>) -> Option<&'t str> {
            let v = v.filter(|v| !v.is_empty())?;
            map.get(source)?.get(v).map(String::as_str)
        }
        if let Some(a) = look(&self.channel, key.source, key.channel) {
            return Some((a, RouteBy::Channel));
        }
        if let Some(a) = look(&self.guild, key.source, key.guild) {
            return Some((a, RouteBy::Guild));
        }
        let lower = key.address.map(str::to_lowercase);
        if let Some(a) = look(&self.address, key.source, lower.as_deref()) {
            return Some((a, RouteBy::Address));
        }
        self.default_agent.as_deref().map(|a| (a, RouteBy::Default))
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        [&self.channel, &self.guild, &self.address]
            .iter()
            .flat_map(|t| t.values())
            .map(HashMap::len)
            .sum()
    }

    /// Whether there is no route.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: &str, sel: RouteSelector, agent: &str) -> RouteSpec {
        RouteSpec {
            source: source.into(),
            selector: sel,
            agent: agent.into(),
        }
    }

    fn table(default: Option<&str>) -> Routes {
        use RouteSelector::*;
        Routes::new(
            &[
                spec("discord", Channel("c1".into()), "alice"),
                spec("discord", Guild("g1".into()), "bob"),
                spec("email", Address("Alice@Example.org".into()), "alice"),
                spec("email", Address("ops@example.org".into()), "carol"),
                spec("webhook", Channel("c1".into()), "dave"),
            ],
            default.map(String::from),
        )
    }

    fn key<'a>(
        source: &'a str,
        channel: Option<&'a str>,
        guild: Option<&'a str>,
        address: Option<&'a str>,
    ) -> RouteKey<'a> {
        RouteKey {
            source,
            channel,
            guild,
            address,
        }
    }

    #[test]
    fn channel_beats_guild_beats_address() {
        let t = table(None);
        let k = key("discord", Some("c1"), Some("g1"), None);
        assert_eq!(t.route(&k), Some(("alice", RouteBy::Channel)));
        let k = key("discord", Some("c2"), Some("g1"), None);
        assert_eq!(t.route(&k), Some(("bob", RouteBy::Guild)));
        let t2 = Routes::new(
            &[
                spec("email", RouteSelector::Guild("g".into()), "bob"),
                spec("email", RouteSelector::Address("a@x".into()), "alice"),
            ],
            Some("zed".into()),
        );
        let k = key("email", Some("inbox"), Some("g"), Some("a@x"));
        assert_eq!(t2.route(&k), Some(("bob", RouteBy::Guild)));
        let k = key("email", Some("inbox"), None, Some("a@x"));
        assert_eq!(t2.route(&k), Some(("alice", RouteBy::Address)));
        let k = key("email", Some("inbox"), None, Some("b@x"));
        assert_eq!(t2.route(&k), Some(("zed", RouteBy::Default)));
    }

    #[test]
    fn addresses_match_without_regard_to_case() {
        let t = table(None);
        let k = key("email", None, None, Some("ALICE@example.ORG"));
        assert_eq!(t.route(&k), Some(("alice", RouteBy::Address)));
        let k = key("email", None, None, Some("ops@EXAMPLE.org"));
        assert_eq!(t.route(&k), Some(("carol", RouteBy::Address)));
    }

    #[test]
    fn routes_belong_to_their_source() {
        let t = table(None);
        assert_eq!(
            t.route(&key("webhook", Some("c1"), None, None)),
            Some(("dave", RouteBy::Channel))
        );
        assert_eq!(t.route(&key("slack", Some("c1"), Some("g1"), None)), None);
        assert_eq!(
            t.route(&key("webhook", None, None, Some("alice@example.org"))),
            None
        );
    }

    #[test]
    fn default_agent_then_unrouted() {
        let k = key("discord", Some("nope"), Some("nope"), Some("x@y"));
        assert_eq!(table(None).route(&k), None);
        assert_eq!(
            table(Some("zed")).route(&k),
            Some(("zed", RouteBy::Default))
        );
        // Empty values never match a route.
        let k = key("discord", Some(""), Some(""), Some(""));
        assert_eq!(table(None).route(&k), None);
    }

    #[test]
    fn the_first_of_two_equal_routes_wins() {
        let t = Routes::new(
            &[
                spec("webhook", RouteSelector::Address("A@x".into()), "alice"),
                spec("webhook", RouteSelector::Address("a@X".into()), "bob"),
            ],
            None,
        );
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.route(&key("webhook", None, None, Some("a@x"))),
            Some(("alice", RouteBy::Address))
        );
        assert!(
            spec("s", RouteSelector::Address("A@x".into()), "a").same_key(&spec(
                "s",
                RouteSelector::Address("a@X".into()),
                "b"
            ))
        );
    }
}
