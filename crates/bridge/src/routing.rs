//! The routing table: which agent an inbound message goes to.
//!
//! Pure: no I/O. For a message of source `s`, a route of `s` for its
//! channel beats one for its guild, which beats one for its address
//! (compared without regard to case); then the default agent; else the
//! message is unrouted (and goes to `bridge:unrouted`). A parked route
//! (its agent is gone) still catches its messages, which go to
//! `bridge:unrouted` with the reason, never to the default agent: they were
//! meant for someone else.

use oxidepm_lanes::bridge_config::RoutePlan;
pub use oxidepm_lanes::bridge_config::{RouteSelector, RouteSpec};
use oxidepm_lanes::AgentName;
use std::collections::HashMap;
use std::sync::Arc;

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

/// Where a route sends its messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// To this agent's inbox.
    Agent(AgentName),
    /// To `bridge:unrouted`: the route is parked, for this reason.
    Parked(Arc<str>),
}

/// source → selector value → target.
type Table = HashMap<String, HashMap<String, Target>>;

/// The table, indexed for lookups.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    channel: Table,
    guild: Table,
    address: Table,
    /// Where messages no route matches go.
    default: Option<Target>,
    active: usize,
}

impl Routes {
    /// Builds the table; of two routes with the same key the first wins.
    pub fn new(routes: &[RouteSpec], default_agent: Option<AgentName>) -> Routes {
        let plan = RoutePlan {
            active: routes.to_vec(),
            default_agent,
            ..RoutePlan::default()
        };
        Routes::from_plan(&plan)
    }

    /// Builds the table of a configuration's routes: those in force, and
    /// the parked ones that still catch their messages.
    pub fn from_plan(plan: &RoutePlan) -> Routes {
        let default = match (&plan.default_agent, &plan.default_parked) {
            (Some(a), _) => Some(Target::Agent(a.clone())),
            (None, Some(why)) => Some(Target::Parked(
                format!("default_agent parked: {why}").into(),
            )),
            (None, None) => None,
        };
        let mut t = Routes {
            default,
            ..Routes::default()
        };
        for r in &plan.active {
            if t.insert(r, Target::Agent(r.agent.clone())) {
                t.active += 1;
            }
        }
        for p in &plan.parked {
            if let Some(spec) = &p.spec {
                let why = format!("route parked: {}", p.why);
                t.insert(spec, Target::Parked(why.into()));
            }
        }
        t
    }

    /// Adds a route unless one with its key is there; true if added.
    fn insert(&mut self, r: &RouteSpec, target: Target) -> bool {
        let (map, value) = match &r.selector {
            RouteSelector::Channel(v) => (&mut self.channel, v.clone()),
            RouteSelector::Guild(v) => (&mut self.guild, v.clone()),
            RouteSelector::Address(v) => (&mut self.address, v.to_lowercase()),
        };
        let slot = map.entry(r.source.clone()).or_default().entry(value);
        match slot {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(target);
                true
            }
        }
    }

    /// Where a message goes and why, or `None`: unrouted.
    pub fn route(&self, key: &RouteKey<'_>) -> Option<(&Target, RouteBy)> {
        fn look<'t>(map: &'t Table, source: &str, v: Option<&str>) -> Option<&'t Target> {
            let v = v.filter(|v| !v.is_empty())?;
            map.get(source)?.get(v)
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
        self.default.as_ref().map(|t| (t, RouteBy::Default))
    }

    /// Number of routes in force.
    pub fn len(&self) -> usize {
        self.active
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
            agent: agent.parse().unwrap(),
        }
    }

    /// The table's answer, with the agent as text.
    fn route<'t>(t: &'t Routes, k: &RouteKey<'_>) -> Option<(&'t str, RouteBy)> {
        t.route(k).map(|(a, by)| match a {
            Target::Agent(a) => (a.as_str(), by),
            Target::Parked(_) => ("(parked)", by),
        })
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
            default.map(|d| d.parse().unwrap()),
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
        assert_eq!(route(&t, &k), Some(("alice", RouteBy::Channel)));
        let k = key("discord", Some("c2"), Some("g1"), None);
        assert_eq!(route(&t, &k), Some(("bob", RouteBy::Guild)));
        let t2 = Routes::new(
            &[
                spec("email", RouteSelector::Guild("g".into()), "bob"),
                spec("email", RouteSelector::Address("a@x".into()), "alice"),
            ],
            Some("zed".parse().unwrap()),
        );
        let k = key("email", Some("inbox"), Some("g"), Some("a@x"));
        assert_eq!(route(&t2, &k), Some(("bob", RouteBy::Guild)));
        let k = key("email", Some("inbox"), None, Some("a@x"));
        assert_eq!(route(&t2, &k), Some(("alice", RouteBy::Address)));
        let k = key("email", Some("inbox"), None, Some("b@x"));
        assert_eq!(route(&t2, &k), Some(("zed", RouteBy::Default)));
    }

    #[test]
    fn addresses_match_without_regard_to_case() {
        let t = table(None);
        let k = key("email", None, None, Some("ALICE@example.ORG"));
        assert_eq!(route(&t, &k), Some(("alice", RouteBy::Address)));
        let k = key("email", None, None, Some("ops@EXAMPLE.org"));
        assert_eq!(route(&t, &k), Some(("carol", RouteBy::Address)));
    }

    #[test]
    fn routes_belong_to_their_source() {
        let t = table(None);
        assert_eq!(
            route(&t, &key("webhook", Some("c1"), None, None)),
            Some(("dave", RouteBy::Channel))
        );
        assert_eq!(route(&t, &key("slack", Some("c1"), Some("g1"), None)), None);
        assert_eq!(
            route(&t, &key("webhook", None, None, Some("alice@example.org"))),
            None
        );
    }

    #[test]
    fn default_agent_then_unrouted() {
        let k = key("discord", Some("nope"), Some("nope"), Some("x@y"));
        assert_eq!(route(&table(None), &k), None);
        assert_eq!(
            route(&table(Some("zed")), &k),
            Some(("zed", RouteBy::Default))
        );
        // Empty values never match a route.
        let k = key("discord", Some(""), Some(""), Some(""));
        assert_eq!(route(&table(None), &k), None);
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
            route(&t, &key("webhook", None, None, Some("a@x"))),
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

    #[test]
    fn a_parked_route_keeps_its_messages_from_the_default_agent() {
        use oxidepm_lanes::bridge_config::RouteConfig;
        let r = |channel: &str, agent: &str| RouteConfig {
            source: "webhook".into(),
            channel: Some(channel.into()),
            guild: None,
            address: None,
            agent: agent.parse().unwrap(),
        };
        let agents: Vec<AgentName> = vec!["alice".parse().unwrap()];
        let zed: AgentName = "zed".parse().unwrap();
        let plan = RoutePlan::new(
            &[r("c1", "alice"), r("c2", "carol")],
            agents.first(),
            &agents,
            &["webhook".to_string()],
        );
        let orphan = RoutePlan::new(&[], Some(&zed), &agents, &["webhook".to_string()]);
        match Routes::from_plan(&orphan).route(&key("webhook", Some("c9"), None, None)) {
            Some((Target::Parked(why), RouteBy::Default)) => {
                assert!(why.starts_with("default_agent parked"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let t = Routes::from_plan(&plan);
        assert_eq!(t.len(), 1);
        let k = key("webhook", Some("c2"), None, None);
        match t.route(&k) {
            Some((Target::Parked(why), RouteBy::Channel)) => {
                assert!(why.contains("\"carol\" is not defined"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            route(&t, &key("webhook", Some("c9"), None, None)),
            Some(("alice", RouteBy::Default))
        );
    }
}
