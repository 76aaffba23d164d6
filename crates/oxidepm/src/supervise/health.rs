//! Health probes (HTTP, TCP, command) and the per-app check loop.

use super::supervisor::{lock, Shared};
use oxidepm_proto::{Actor, EventKind, HealthProbe, HealthSpec, HealthState, Status};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Runs one probe; `Err` says why it failed.
pub async fn probe(shared: &Shared, id: u64, h: &HealthSpec) -> Result<(), String> {
    let t = Duration::from_millis(h.timeout_ms.max(1));
    match &h.probe {
        HealthProbe::Http(url) => timeout(t, http(url, h.expect_status))
            .await
            .unwrap_or_else(|_| Err(format!("GET {url}: no answer within {t:?}"))),
        HealthProbe::Tcp(addr) => match timeout(t, TcpStream::connect(addr.as_str())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("connect {addr}: {e}")),
            Err(_) => Err(format!("connect {addr}: no answer within {t:?}")),
        },
        HealthProbe::Command(cmd) => command(shared, id, cmd, t).await,
    }
}

/// Splits `http://host[:port][/path]`.
fn parse_http_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs can be probed"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if hostport.is_empty() {
        return Err(format!("{url}: no host"));
    }
    let hostport = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Ok((hostport, path.to_string()))
}

/// Sends a GET and checks the status line. The probe needs nothing but the
/// status code, so one request with `Connection: close` is enough.
async fn http(url: &str, expect: Option<u16>) -> Result<(), String> {
    let (hostport, path) = parse_http_url(url)?;
    let mut s = TcpStream::connect(&hostport)
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let host = hostport
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&hostport);
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: oxidepm-health\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let mut buf = vec![0u8; 256];
    let mut n = 0;
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        let m = s
            .read(&mut buf[n..])
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if m == 0 {
            break;
        }
        n += m;
    }
    let line = String::from_utf8_lossy(&buf[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("GET {url}: not an HTTP answer"))?;
    let ok = match expect {
        Some(e) => code == e,
        None => (200..300).contains(&code),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("GET {url}: status {code}"))
    }
}

async fn command(shared: &Shared, id: u64, cmd: &[String], t: Duration) -> Result<(), String> {
    let (pid, rx) = {
        let mut s = lock(shared);
        s.spawn_probe(id, cmd)?
    };
    match timeout(t, rx).await {
        Ok(Ok(exit)) if exit.success() => Ok(()),
        Ok(Ok(exit)) => Err(format!("{}: {}", cmd.join(" "), exit.describe())),
        Ok(Err(_)) => Err(format!("{}: lost track of the probe", cmd.join(" "))),
        Err(_) => {
            super::spawn::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            Err(format!("{}: no answer within {t:?}", cmd.join(" ")))
        }
    }
}

/// Checks app `id` every `interval` while its spec keeps the same check
/// (`epoch` changes when the spec does); after `retries` failures in a row
/// the app is restarted by `system:health`.
pub async fn run(shared: Shared, id: u64, epoch: u64, h: HealthSpec) {
    let mut failures = 0u32;
    loop {
        tokio::time::sleep(Duration::from_millis(h.interval_ms.max(10))).await;
        let in_grace = {
            let s = lock(&shared);
            let Some(a) = s.app(id).filter(|a| a.auto_epoch == epoch) else {
                return;
            };
            if a.rt.status != Status::Online {
                failures = 0;
                continue;
            }
            a.started
                .is_some_and(|st| st.elapsed() < Duration::from_millis(h.start_period_ms))
        };
        let result = probe(&shared, id, &h).await;
        let restart = {
            let mut s = lock(&shared);
            let Some(a) = s.app_mut(id).filter(|a| a.auto_epoch == epoch) else {
                return;
            };
            if a.rt.status != Status::Online {
                continue;
            }
            match &result {
                Ok(()) => {
                    failures = 0;
                    a.health = Some(HealthState::Healthy);
                    None
                }
                Err(_) if in_grace => None,
                Err(why) => {
                    failures += 1;
                    a.health = Some(HealthState::Unhealthy);
                    (failures >= h.retries.max(1)).then(|| why.clone())
                }
            }
        };
        if let Some(why) = restart {
            failures = 0;
            let detail = format!("{} failed checks in a row, last: {why}", h.retries.max(1));
            super::control::restart_by_daemon(
                &shared,
                id,
                Actor::system("health"),
                EventKind::Unhealthy,
                &detail,
                false,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_http_url("http://127.0.0.1:8080/health").unwrap(),
            ("127.0.0.1:8080".into(), "/health".into())
        );
        assert_eq!(
            parse_http_url("http://localhost").unwrap(),
            ("localhost:80".into(), "/".into())
        );
        assert!(parse_http_url("https://x").is_err());
    }
}
