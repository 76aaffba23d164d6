//! The routes every host's daemon writes to the shared Redis
//! (`oxidepm:routes`, see [`oxidepm_lanes::shared_routes`]): read about
//! once a second, and applied, after the file's routes, when they change;
//! `oxidepm route add` on one host reaches every bridge without a restart.
//! A route that cannot be read is left out (and said once); a hash with
//! more than [`MAX_SHARED_ROUTES`] fields is refused whole, the routes in
//! force staying.

use crate::conn::Con;
use crate::source::Shutdown;
use oxidepm_lanes::bridge_config::RouteConfig;
use oxidepm_lanes::shared_routes::{decode, MAX_SHARED_ROUTES, SHARED_ROUTES_KEY};
use std::time::Duration;

/// How often the hash is read.
const EVERY: Duration = Duration::from_secs(1);

/// The hash's fields and values, sorted by field; an error if it cannot be
/// read or is too large.
pub async fn fetch(con: &mut Con) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
    let n: usize = redis::cmd("HLEN")
        .arg(SHARED_ROUTES_KEY)
        .query_async(con)
        .await
        .map_err(|e| format!("cannot read {SHARED_ROUTES_KEY}: {e}"))?;
    if n > MAX_SHARED_ROUTES {
        return Err(format!(
            "{SHARED_ROUTES_KEY} holds {n} routes, more than {MAX_SHARED_ROUTES}; \
             remove some with `oxidepm route remove`"
        ));
    }
    let mut raw: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
        .arg(SHARED_ROUTES_KEY)
        .query_async(con)
        .await
        .map_err(|e| format!("cannot read {SHARED_ROUTES_KEY}: {e}"))?;
    raw.sort();
    Ok(raw)
}

/// The routes of `raw`, those that cannot be read left out and logged.
pub fn parse(raw: &[(Vec<u8>, Vec<u8>)]) -> Vec<RouteConfig> {
    raw.iter()
        .filter_map(|(f, v)| match decode(f, v) {
            Ok(r) => Some(r),
            Err(e) => {
                log::error!("{e}");
                None
            }
        })
        .collect()
}

/// Reads the hash every [`EVERY`] until the bridge stops and hands its
/// routes to `apply` when they change; `apply` answers false when there
/// is no bridge to apply them to any more (the watch ends then).
pub async fn watch(
    mut con: Con,
    mut last: Vec<(Vec<u8>, Vec<u8>)>,
    mut shutdown: Shutdown,
    mut apply: impl FnMut(Vec<RouteConfig>) -> bool,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.wait() => return,
        }
        let raw = match fetch(&mut con).await {
            Ok(r) => r,
            Err(e) => {
                // Said once per failing stretch, not every second.
                if !failing {
                    log::error!("{e}; the routes in force stay");
                }
                failing = true;
                continue;
            }
        };
        failing = false;
        if raw == last {
            continue;
        }
        if !apply(parse(&raw)) {
            return;
        }
        last = raw;
    }
}
