//! Sentinel: which server is the primary now, asked of each sentinel in
//! turn (`SENTINEL get-master-addr-by-name`).

use crate::upstream::dial::{self, CONNECT_TIMEOUT};
use crate::upstream::exchange::Exchange;
use crate::upstream::reply::Reply;
use oxidepm_lanes::redis_url::HostPort;
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;

/// Asks each sentinel in turn for the primary `master`.
pub async fn primary(
    sentinels: &[HostPort],
    master: &str,
    tls: Option<&Arc<ClientConfig>>,
) -> io::Result<HostPort> {
    let mut why = Vec::new();
    for s in sentinels {
        let asked = async {
            let mut up = Exchange::new(dial::open(s, tls).await?);
            let cmd = vec![
                b"SENTINEL".to_vec(),
                b"get-master-addr-by-name".to_vec(),
                master.as_bytes().to_vec(),
            ];
            let r = up.call(&[cmd]).await?;
            primary_of(&r[0], master)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, asked).await {
            Ok(Ok(p)) => return Ok(p),
            Ok(Err(e)) => why.push(format!("{s}: {e}")),
            Err(_) => why.push(format!("{s}: no answer within {CONNECT_TIMEOUT:?}")),
        }
    }
    Err(io::Error::other(format!(
        "no sentinel named the primary '{master}' ({}); check the sentinels' addresses \
         and the master name in redis_url",
        why.join("; ")
    )))
}

/// The address of a `SENTINEL get-master-addr-by-name` answer.
fn primary_of(r: &Reply, master: &str) -> io::Result<HostPort> {
    let items = r.items();
    let host = items.first().and_then(Reply::bytes);
    let port = items
        .get(1)
        .and_then(Reply::bytes)
        .and_then(|p| std::str::from_utf8(p).ok()?.parse().ok());
    match (host, port) {
        (Some(h), Some(port)) => Ok(HostPort {
            host: String::from_utf8_lossy(h).into_owned(),
            port,
        }),
        _ => Err(io::Error::other(match r {
            Reply::Error(e) => format!("the sentinel refused: {e}"),
            _ => format!("the sentinel does not know a primary named '{master}'"),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sentinels_answer() {
        let ok = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"10.0.0.1".to_vec())),
            Reply::Bulk(Some(b"6379".to_vec())),
        ]));
        assert_eq!(primary_of(&ok, "m").unwrap().port, 6379);
        assert!(primary_of(&Reply::Array(None), "m").is_err());
        let bad_port = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"h".to_vec())),
            Reply::Bulk(Some(b"99999".to_vec())),
        ]));
        assert!(primary_of(&bad_port, "m").is_err());
    }
}
