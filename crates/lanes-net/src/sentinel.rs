//! Finding the primary through Sentinel (`redis+sentinel://…/<master>`):
//! each sentinel is asked in turn, without a credential (a sentinel's is
//! not the lanes' one), over TLS when the URL says so, and the first that
//! names the primary is believed. The daemon, the bridge and the proxy
//! all ask here, so a failover is followed the same way by each.

use crate::tls;
use oxidepm_lanes::redis_url::HostPort;
use redis::aio::MultiplexedConnection;
use redis::{RedisConnectionInfo, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How long one sentinel may take to be reached and to answer, so that an
/// unreachable one leaves time to ask the next.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// No sentinel named the primary.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "no sentinel named the primary '{master}' ({}); check the sentinels' addresses \
     and the master name in redis_url",
    why.join("; ")
)]
pub struct SentinelError {
    /// The primary's name.
    pub master: String,
    /// Each sentinel's answer, or why it gave none.
    pub why: Vec<String>,
}

impl SentinelError {
    /// What the sentinels said, in one line.
    pub fn reasons(&self) -> String {
        self.why.join("; ")
    }
}

/// The primary the first answering sentinel of `sentinels` names `master`;
/// `tls` is the client configuration of a `rediss+sentinel` URL.
pub async fn primary(
    sentinels: &[HostPort],
    master: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<HostPort, SentinelError> {
    let mut why = Vec::new();
    for s in sentinels {
        match tokio::time::timeout(ASK_TIMEOUT, ask(s, master, tls)).await {
            Ok(Ok(p)) => return Ok(p),
            Ok(Err(e)) => why.push(format!("{s}: {e}")),
            Err(_) => why.push(format!("{s}: no answer within {ASK_TIMEOUT:?}")),
        }
    }
    if why.is_empty() {
        why.push("no sentinel listed".into());
    }
    Err(SentinelError {
        master: master.to_string(),
        why,
    })
}

async fn ask(
    s: &HostPort,
    master: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<HostPort, String> {
    let tcp = TcpStream::connect((s.host.as_str(), s.port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let answer = match tls {
        Some(cfg) => {
            let stream = tls::handshake(cfg, &s.host, tcp)
                .await
                .map_err(|e| e.to_string())?;
            query(stream, master).await
        }
        None => query(tcp, master).await,
    }?;
    primary_of(&answer, master)
}

/// `SENTINEL get-master-addr-by-name <master>` over `stream`.
async fn query<S>(stream: S, master: &str) -> Result<Value, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut con, driver): (MultiplexedConnection, _) =
        MultiplexedConnection::new(&RedisConnectionInfo::default(), stream)
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(driver);
    let asked = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async::<Value>(&mut con)
        .await;
    driver.abort();
    match asked {
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() => Err(format!("the sentinel refused: {e}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The address of a `SENTINEL get-master-addr-by-name` answer.
fn primary_of(v: &Value, master: &str) -> Result<HostPort, String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let items: &[Value] = match v {
        Value::Array(items) => items,
        _ => &[],
    };
    let host = items.first().and_then(text);
    let port = items.get(1).and_then(text).and_then(|p| p.parse().ok());
    match (host, port) {
        (Some(host), Some(port)) => Ok(HostPort { host, port }),
        _ => Err(format!(
            "the sentinel does not know a primary named '{master}'"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_testkit::shared::{acl_file, connect, free_port_pair, ROOT_PASSWORD, ROOT_USER};
    use std::process::{Child, Command, Stdio};

    #[test]
    fn reads_the_sentinels_answer() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ok = Value::Array(vec![bulk("10.0.0.1"), bulk("6379")]);
        assert_eq!(primary_of(&ok, "m").unwrap().port, 6379);
        assert!(primary_of(&Value::Nil, "m").is_err());
        let bad_port = Value::Array(vec![bulk("h"), bulk("99999")]);
        assert!(primary_of(&bad_port, "m").is_err());
    }

    /// A redis-server or sentinel process; killed on drop.
    struct Server(Child);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn spawn(dir: &std::path::Path, conf: &str, sentinel: bool) -> Server {
        let path = dir.join(if sentinel {
            "sentinel.conf"
        } else {
            "redis.conf"
        });
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new("redis-server");
        cmd.arg(&path);
        if sentinel {
            cmd.arg("--sentinel");
        }
        Server(
            cmd.current_dir(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (Debian: redis-server)"),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_primary_is_the_one_a_sentinel_names_past_one_that_does_not_answer() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let p = free_port_pair();
        std::fs::write(dir.path().join("users.acl"), acl_file()).unwrap();
        let _node = spawn(
            dir.path(),
            &format!(
                "port {p}\nbind 127.0.0.1\nprotected-mode no\naclfile {d}/users.acl\ndir {d}\n\
                 save \"\"\nappendonly no\nlogfile {d}/redis.log\n"
            ),
            false,
        );
        oxidepm_testkit::eventually(Duration::from_secs(20), "redis-server to start", || {
            connect(p, None, ROOT_USER, ROOT_PASSWORD).is_ok()
        });
        let ps = p + 1;
        let _sentinel = spawn(
            dir.path(),
            &format!(
                "port {ps}\nbind 127.0.0.1\nprotected-mode no\ndir {d}\nlogfile {d}/sentinel.log\n\
                 sentinel monitor lanes 127.0.0.1 {p} 1\n\
                 sentinel auth-user lanes {ROOT_USER}\nsentinel auth-pass lanes {ROOT_PASSWORD}\n"
            ),
            true,
        );
        let closed = HostPort {
            host: "127.0.0.1".into(),
            port: oxidepm_testkit::free_port(),
        };
        let sentinel = HostPort {
            host: "127.0.0.1".into(),
            port: ps,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let found = loop {
            match primary(&[closed.clone(), sentinel.clone()], "lanes", None).await {
                Ok(hp) => break hp,
                Err(e) if std::time::Instant::now() > deadline => panic!("{e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        assert_eq!((found.host.as_str(), found.port), ("127.0.0.1", p));
        let e = primary(&[closed.clone(), sentinel.clone()], "other", None)
            .await
            .unwrap_err();
        assert_eq!(e.why.len(), 2, "{e}");
        assert!(e.why[0].starts_with(&format!("{closed}: ")), "{e}");
        assert!(e.to_string().contains("'other'"), "{e}");
    }
}
