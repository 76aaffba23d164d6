//! Routes shared by every host of a shared Redis (`[lanes] redis_url`):
//! the hash [`SHARED_ROUTES_KEY`], one field per selector
//! (`<source>:channel|guild|address:<value>`), each value a route as JSON
//! ([`RouteConfig`]). The daemon's `oxidepm route add/remove` writes it
//! on whichever host it runs; every bridge reads it about once a second
//! and takes changes up without a restart. On one host (the private
//! Redis) routes stay in the daemon's database and the bridge's file.

use crate::bridge_routes::RouteConfig;

/// The hash of shared routes.
pub const SHARED_ROUTES_KEY: &str = "oxidepm:routes";
/// Most routes a bridge takes from the hash; more is refused whole (the
/// routes in force stay).
pub const MAX_SHARED_ROUTES: usize = 10_000;
/// Largest field or value taken, in bytes.
pub const MAX_SHARED_ROUTE_BYTES: usize = 4096;

/// Why a field of the hash is not a route.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharedRouteError {
    /// Too long.
    #[error("shared route {field:?}: longer than {MAX_SHARED_ROUTE_BYTES} bytes; remove it with `oxidepm route remove`")]
    TooLong {
        /// The field (cut).
        field: String,
    },
    /// Not a route's JSON, or not the route its field names.
    #[error(
        "shared route {field:?}: {why}; remove it with `oxidepm route remove` and add it again"
    )]
    Malformed {
        /// The field.
        field: String,
        /// What is wrong.
        why: String,
    },
}

/// The field of `route`: its source and selector (one route per selector;
/// adding another for the same selector replaces it).
pub fn field(route: &RouteConfig) -> String {
    let (kind, value) = match (&route.channel, &route.guild, &route.address) {
        (Some(c), _, _) => ("channel", c.as_str()),
        (None, Some(g), _) => ("guild", g.as_str()),
        (None, None, Some(a)) => ("address", a.as_str()),
        (None, None, None) => ("none", ""),
    };
    format!("{}:{kind}:{}", route.source, value.to_lowercase())
}

/// The value stored for `route`.
pub fn encode(route: &RouteConfig) -> String {
    // A RouteConfig is strings and a name: it always serializes.
    serde_json::to_string(route).unwrap_or_default()
}

/// The route stored under `field`.
pub fn decode(field_name: &[u8], value: &[u8]) -> Result<RouteConfig, SharedRouteError> {
    let f = String::from_utf8_lossy(field_name);
    if field_name.len() > MAX_SHARED_ROUTE_BYTES || value.len() > MAX_SHARED_ROUTE_BYTES {
        return Err(SharedRouteError::TooLong {
            field: f.chars().take(64).collect(),
        });
    }
    let bad = |why: String| SharedRouteError::Malformed {
        field: f.to_string(),
        why,
    };
    let route: RouteConfig = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
    if field(&route) != f {
        return Err(bad(format!(
            "its value is the route of {:?}",
            field(&route)
        )));
    }
    Ok(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_round_trip_and_bad_ones_are_errors() {
        let r = RouteConfig {
            source: "webhook".into(),
            channel: Some("C1".into()),
            guild: None,
            address: None,
            agent: "alice".parse().unwrap(),
        };
        assert_eq!(field(&r), "webhook:channel:c1");
        assert_eq!(
            decode(field(&r).as_bytes(), encode(&r).as_bytes()),
            Ok(r.clone())
        );
        assert!(decode(b"webhook:channel:c2", encode(&r).as_bytes()).is_err());
        assert!(decode(b"webhook:channel:c1", b"{not json").is_err());
        assert!(decode(b"x", &vec![b' '; MAX_SHARED_ROUTE_BYTES + 1]).is_err());
        let bad_agent = r#"{"source":"webhook","channel":"c1","agent":"Not A Name"}"#;
        assert!(decode(b"webhook:channel:c1", bad_agent.as_bytes()).is_err());
    }
}
