//! The version of the Redis behind the proxy, for the proxy's own `INFO`
//! (`crate::filter::handshake`): asked once per proxy process, on a connection
//! of the proxy's own, the first time a client asks; a connection that
//! never sends INFO costs nothing.

use crate::upstream::connection::Upstream;
use crate::upstream::reply::Reply;
use crate::upstream::route::Route;
use oxidepm_lanes::{AclUser, Secret};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// How long asking may take.
const TIMEOUT: Duration = Duration::from_secs(5);

static VERSION: OnceCell<String> = OnceCell::const_new();

/// Redis's version (`HELLO`'s `version`), asked as `user` the first time;
/// a failure is not kept, the next INFO asks again.
pub async fn redis_version(
    route: &Arc<Route>,
    user: &AclUser,
    password: &Secret,
) -> io::Result<&'static str> {
    let v = VERSION
        .get_or_try_init(|| async {
            tokio::time::timeout(TIMEOUT, ask(route, user, password))
                .await
                .unwrap_or_else(|_| Err(io::Error::other("Redis did not answer in time")))
        })
        .await?;
    Ok(v.as_str())
}

async fn ask(route: &Arc<Route>, user: &AclUser, password: &Secret) -> io::Result<String> {
    let mut up = Upstream::open_as(route, user, password).await?;
    let replies = up.call(&[vec![b"HELLO".to_vec()]]).await?;
    version_of(&replies[0]).ok_or_else(|| {
        io::Error::other(format!(
            "no version in Redis's answer to HELLO: {:?}",
            replies[0]
        ))
    })
}

/// The `version` of a RESP2 `HELLO` answer (a flat name/value list), if
/// it is printable and short.
fn version_of(r: &Reply) -> Option<String> {
    let v = r
        .items()
        .chunks(2)
        .find(|kv| kv[0].bytes() == Some(b"version"))
        .and_then(|kv| kv.get(1))
        .and_then(Reply::bytes)?;
    (v.len() <= 32 && v.iter().all(|b| b.is_ascii_graphic()))
        .then(|| String::from_utf8_lossy(v).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_hello() {
        let bulk = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
        let hello = Reply::Array(Some(vec![
            bulk("server"),
            bulk("redis"),
            bulk("version"),
            bulk("7.2.4"),
            bulk("proto"),
            Reply::Int(2),
        ]));
        assert_eq!(version_of(&hello).as_deref(), Some("7.2.4"));
        let odd = Reply::Array(Some(vec![bulk("version"), bulk("7 2\r\n")]));
        assert_eq!(version_of(&odd), None);
        assert_eq!(version_of(&Reply::Error("NOPERM".into())), None);
    }
}
