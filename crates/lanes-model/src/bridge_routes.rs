//! The bridge's routes as its configuration file gives them, and how a
//! configuration's routes are sorted into those in force and those parked.
//!
//! A route that cannot be in force (its agent is not one of the bridge's
//! agents, its source is not served, it is malformed, or an earlier route
//! already takes its messages) is **parked**, never a reason to refuse the
//! whole configuration: one bad name must not stop the bridge for every
//! agent. Messages a parked route matches go to `bridge:unrouted` with the
//! reason; `oxidepm route list` shows it.

use crate::name::AgentName;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One route: messages of `source` from a channel, a guild or an address
/// go to `agent`; exactly one of `channel`, `guild`, `address` is set. The
/// same type serves a request and daemon.toml (`A` = `String`, the agent a
/// name not yet checked) and the bridge's file ([`RouteConfig`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Route<A = AgentName> {
    /// The source family it applies to (`webhook`, `email`, `discord`, ...).
    pub source: String,
    /// A channel id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// A guild (server, workspace) id: a group of channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild: Option<String>,
    /// A mail address (an email recipient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The agent it routes to.
    pub agent: A,
}

/// A route of the bridge's file: its agent is an agent name.
pub type RouteConfig = Route<AgentName>;

impl<A> Route<A> {
    /// Checks that exactly one matcher is set and that it is not empty.
    pub fn check(&self) -> Result<(), RouteError> {
        let set = [&self.channel, &self.guild, &self.address]
            .iter()
            .filter(|m| m.is_some())
            .count();
        if set != 1 {
            return Err(RouteError::Matchers {
                source: self.source.clone(),
            });
        }
        if [&self.channel, &self.guild, &self.address]
            .iter()
            .any(|m| m.as_ref().is_some_and(|v| v.is_empty()))
        {
            return Err(RouteError::EmptyMatcher);
        }
        Ok(())
    }

    /// The same route with its agent turned by `f` (a name given back as
    /// text).
    pub fn map_agent<B>(self, f: impl FnOnce(A) -> B) -> Route<B> {
        Route {
            source: self.source,
            channel: self.channel,
            guild: self.guild,
            address: self.address,
            agent: f(self.agent),
        }
    }

    /// The same route with its agent turned by `f`, or why it cannot be
    /// (a name checked).
    pub fn try_map_agent<B, E>(&self, f: impl FnOnce(&A) -> Result<B, E>) -> Result<Route<B>, E> {
        Ok(Route {
            source: self.source.clone(),
            channel: self.channel.clone(),
            guild: self.guild.clone(),
            address: self.address.clone(),
            agent: f(&self.agent)?,
        })
    }
}

impl<A: fmt::Display> Route<A> {
    /// `source channel=x -> agent`, for messages.
    pub fn describe(&self) -> String {
        let (k, v) = if let Some(c) = &self.channel {
            ("channel", c.as_str())
        } else if let Some(g) = &self.guild {
            ("guild", g.as_str())
        } else {
            // A route that is not checked may have none (a `route rm` of
            // nothing): it reads as an empty address, it does not panic.
            ("address", self.address.as_deref().unwrap_or_default())
        };
        format!("{} {k}={v} -> {}", self.source, self.agent)
    }
}

/// Why a route of a request or of daemon.toml is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// None or more than one of channel, guild and address is set.
    Matchers {
        /// The route's source family.
        source: String,
    },
    /// The matcher is set but empty.
    EmptyMatcher,
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Matchers { source } => write!(
                f,
                "a route of {source:?} needs exactly one of channel, guild or address"
            ),
            RouteError::EmptyMatcher => {
                f.write_str("a route's channel, guild or address cannot be empty")
            }
        }
    }
}

impl std::error::Error for RouteError {}

impl RouteConfig {
    /// The route in the routing table's terms, or why it is not one.
    pub fn spec(&self) -> Result<RouteSpec, RouteConfigError> {
        let selector = match (&self.channel, &self.guild, &self.address) {
            (Some(c), None, None) => RouteSelector::Channel(c.clone()),
            (None, Some(g), None) => RouteSelector::Guild(g.clone()),
            (None, None, Some(a)) => RouteSelector::Address(a.clone()),
            _ => {
                return Err(RouteConfigError::Selectors {
                    agent: self.agent.clone(),
                    family: self.source.clone(),
                })
            }
        };
        if selector.value().is_empty() {
            return Err(RouteConfigError::EmptySelector {
                agent: self.agent.clone(),
                family: self.source.clone(),
            });
        }
        Ok(RouteSpec {
            source: self.source.clone(),
            selector,
            agent: self.agent.clone(),
        })
    }
}

/// Why a route of the file is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteConfigError {
    /// None or more than one of channel, guild and address.
    #[error(
        "route to {agent:?} for source {family:?} must have exactly one of channel, guild or address"
    )]
    Selectors {
        /// The route's agent.
        agent: AgentName,
        /// The route's source.
        family: String,
    },
    /// The selector is empty.
    #[error("route to {agent:?} for source {family:?} has an empty selector")]
    EmptySelector {
        /// The route's agent.
        agent: AgentName,
        /// The route's source.
        family: String,
    },
}

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

/// One route, as the routing table takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    /// The source it applies to.
    pub source: String,
    /// What it matches.
    pub selector: RouteSelector,
    /// Where it sends.
    pub agent: AgentName,
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

/// Why a route (or the default agent) is not in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parked {
    /// It names an agent the bridge does not have (never defined, or
    /// deleted since).
    UnknownAgent(AgentName),
    /// Its source is not one the bridge serves.
    UnknownSource(String),
    /// It is not a route (no selector, several, or an empty one).
    Invalid(RouteConfigError),
    /// An earlier route matches the same messages and gets them.
    Shadowed {
        /// What both match.
        selector: RouteSelector,
        /// The agent of the earlier route.
        first: AgentName,
    },
}

impl fmt::Display for Parked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parked::UnknownAgent(a) => write!(
                f,
                "agent {a:?} is not defined; its messages go to bridge:unrouted until it is"
            ),
            Parked::UnknownSource(s) => write!(f, "the bridge does not serve source {s:?}"),
            Parked::Invalid(e) => write!(f, "{e}"),
            Parked::Shadowed { selector, first } => write!(
                f,
                "an earlier route for {selector} goes to {first:?}, which gets these messages"
            ),
        }
    }
}

/// A route that is not in force, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedRoute {
    /// The route as configured.
    pub route: RouteConfig,
    /// The route in the table's terms when it is one: it still catches its
    /// messages, which go to `bridge:unrouted` instead of an agent.
    pub spec: Option<RouteSpec>,
    /// Why it is parked.
    pub why: Parked,
}

/// The routes of a configuration, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutePlan {
    /// Routes in force, in the configuration's order.
    pub active: Vec<RouteSpec>,
    /// Routes parked, in the configuration's order.
    pub parked: Vec<ParkedRoute>,
    /// The default agent, when it is one of the agents.
    pub default_agent: Option<AgentName>,
    /// Why the configured default agent is not in force, if it is not.
    pub default_parked: Option<Parked>,
}

impl RoutePlan {
    /// Sorts `routes` for a bridge with these agents and sources. Of two
    /// routes matching the same messages the first is kept.
    pub fn new(
        routes: &[RouteConfig],
        default_agent: Option<&AgentName>,
        agents: &[AgentName],
        sources: &[String],
    ) -> RoutePlan {
        let mut plan = RoutePlan::default();
        // Every route with a selector, in order, parked or not: the first
        // of two with the same key gets the messages either way.
        let mut seen: Vec<RouteSpec> = Vec::new();
        for r in routes {
            let spec = match r.spec() {
                Ok(s) => s,
                Err(e) => {
                    plan.park(r, None, Parked::Invalid(e));
                    continue;
                }
            };
            if let Some(first) = seen.iter().find(|o| o.same_key(&spec)) {
                let why = Parked::Shadowed {
                    selector: spec.selector.clone(),
                    first: first.agent.clone(),
                };
                if first.agent != spec.agent {
                    plan.park(r, None, why);
                }
                // The same route twice: nothing to say.
                continue;
            }
            seen.push(spec.clone());
            if !sources.contains(&r.source) {
                plan.park(r, None, Parked::UnknownSource(r.source.clone()));
            } else if !agents.contains(&r.agent) {
                plan.park(r, Some(spec), Parked::UnknownAgent(r.agent.clone()));
            } else {
                plan.active.push(spec);
            }
        }
        match default_agent {
            Some(d) if !agents.contains(d) => {
                plan.default_parked = Some(Parked::UnknownAgent(d.clone()));
            }
            d => plan.default_agent = d.cloned(),
        }
        plan
    }

    fn park(&mut self, route: &RouteConfig, spec: Option<RouteSpec>, why: Parked) {
        self.parked.push(ParkedRoute {
            route: route.clone(),
            spec,
            why,
        });
    }

    /// Why `route` is parked, if it is.
    pub fn why_parked(&self, route: &RouteConfig) -> Option<&Parked> {
        self.parked
            .iter()
            .find(|p| &p.route == route)
            .map(|p| &p.why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_without_a_matcher_is_described_not_panicked_on() {
        let r: Route<String> = Route {
            source: "webhook".into(),
            channel: None,
            guild: None,
            address: None,
            agent: "a".into(),
        };
        assert_eq!(
            r.check(),
            Err(RouteError::Matchers {
                source: "webhook".into()
            })
        );
        assert_eq!(r.describe(), "webhook address= -> a");
    }

    fn route(source: &str, channel: &str, agent: &str) -> RouteConfig {
        RouteConfig {
            source: source.into(),
            channel: Some(channel.into()),
            guild: None,
            address: None,
            agent: agent.parse().unwrap(),
        }
    }

    fn names(v: &[&str]) -> Vec<AgentName> {
        v.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn a_bad_route_is_parked_and_the_others_stay_in_force() {
        let agents = names(&["alice", "bob"]);
        let sources = vec!["webhook".to_string()];
        let mut no_selector = route("webhook", "x", "bob");
        no_selector.channel = None;
        let routes = [
            route("webhook", "c1", "alice"),
            route("webhook", "c2", "carol"),
            route("sms", "c3", "alice"),
            route("webhook", "c1", "bob"),
            route("webhook", "c1", "alice"),
            no_selector.clone(),
            route("webhook", "c4", "bob"),
        ];
        let zed: AgentName = "zed".parse().unwrap();
        let plan = RoutePlan::new(&routes, Some(&zed), &agents, &sources);
        let active: Vec<&str> = plan.active.iter().map(|s| s.agent.as_str()).collect();
        assert_eq!(active, ["alice", "bob"]);
        let why = |r: &RouteConfig| plan.why_parked(r).map(|w| w.to_string());
        assert!(why(&routes[1])
            .unwrap()
            .contains("\"carol\" is not defined"));
        assert!(why(&routes[2])
            .unwrap()
            .contains("does not serve source \"sms\""));
        assert!(why(&routes[3]).unwrap().contains("goes to \"alice\""));
        assert!(why(&routes[5]).unwrap().contains("exactly one of"));
        assert_eq!(why(&routes[6]), None);
        // The route to carol still catches channel c2; the shadowed one
        // catches nothing of its own.
        assert!(plan.parked[0].spec.is_some());
        assert!(plan.parked[2].spec.is_none());
        assert_eq!(plan.default_agent, None);
        assert_eq!(plan.default_parked, Some(Parked::UnknownAgent(zed)));
    }
}
