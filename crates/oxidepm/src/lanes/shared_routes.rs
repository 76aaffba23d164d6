//! `oxidepm route add/remove/list` on a shared Redis (`[lanes]
//! redis_url`): routes go to the hash every host's bridge reads
//! (`oxidepm:routes`, see [`oxidepm_lanes::shared_routes`]), so a route
//! added on one host takes effect on all. On one host routes stay in the
//! store (SQLite) and the bridge's file, as before.

// Called by `route_add`/`route_rm`/`lanes` once `[lanes] redis_url` is in
// the daemon's settings; until then only the tests use it.
#![allow(dead_code)]

use oxidepm_lanes::bridge_config::RouteConfig;
use oxidepm_lanes::shared_routes::{decode, encode, field, MAX_SHARED_ROUTES, SHARED_ROUTES_KEY};

/// Adds `route`; false if a route of the same source and selector exists
/// (it is left as it is: remove it first).
pub fn add(con: &mut impl redis::ConnectionLike, route: &RouteConfig) -> redis::RedisResult<bool> {
    redis::cmd("HSETNX")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(route))
        .arg(encode(route))
        .query(con)
}

/// Removes the route of `route`'s source and selector; false if there was
/// none.
pub fn remove(
    con: &mut impl redis::ConnectionLike,
    route: &RouteConfig,
) -> redis::RedisResult<bool> {
    redis::cmd("HDEL")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(route))
        .query(con)
}

/// The shared routes, sorted by field, and what could not be read (each
/// with why and what to do).
pub fn list(
    con: &mut impl redis::ConnectionLike,
) -> redis::RedisResult<(Vec<RouteConfig>, Vec<String>)> {
    let n: usize = redis::cmd("HLEN").arg(SHARED_ROUTES_KEY).query(con)?;
    if n > MAX_SHARED_ROUTES {
        return Ok((
            Vec::new(),
            vec![format!(
                "{SHARED_ROUTES_KEY} holds {n} routes, more than the {MAX_SHARED_ROUTES} a bridge takes; \
                 remove some with `oxidepm route remove`"
            )],
        ));
    }
    let mut raw: Vec<(Vec<u8>, Vec<u8>)> =
        redis::cmd("HGETALL").arg(SHARED_ROUTES_KEY).query(con)?;
    raw.sort();
    let mut routes = Vec::with_capacity(raw.len());
    let mut bad = Vec::new();
    for (f, v) in raw {
        match decode(&f, &v) {
            Ok(r) => routes.push(r),
            Err(e) => bad.push(e.to_string()),
        }
    }
    Ok((routes, bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_testkit::shared::{SharedRedis, OXIDEPM_PASSWORD, OXIDEPM_USER};

    #[test]
    fn routes_added_on_one_host_are_listed_on_another_and_removed_once() {
        let server = SharedRedis::start(false);
        // Two hosts' daemons, as the admin user a person creates.
        let mut host_a = server.connect(OXIDEPM_USER, OXIDEPM_PASSWORD).unwrap();
        let mut host_b = server.connect(OXIDEPM_USER, OXIDEPM_PASSWORD).unwrap();
        let route = RouteConfig {
            source: "webhook".into(),
            channel: Some("ops".into()),
            guild: None,
            address: None,
            agent: "alice".parse().unwrap(),
        };
        assert!(add(&mut host_a, &route).unwrap());
        let other = RouteConfig {
            agent: "bob".parse().unwrap(),
            ..route.clone()
        };
        // The same selector from another host: refused, the first stays.
        assert!(!add(&mut host_b, &other).unwrap());
        assert_eq!(list(&mut host_b).unwrap(), (vec![route.clone()], vec![]));
        assert!(remove(&mut host_b, &route).unwrap());
        assert!(!remove(&mut host_a, &route).unwrap());
        assert_eq!(list(&mut host_a).unwrap(), (vec![], vec![]));
    }
}
