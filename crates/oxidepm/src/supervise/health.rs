//! Health probes (HTTP, TCP, command) and the per-app check loop.

use super::policy::Exit;
use super::spawn::SpawnError;
use super::supervisor::{lock, Shared};
use oxidepm_proto::{Actor, EventKind, HealthProbe, HealthSpec, HealthState, Status};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Why a health check failed; the restart it causes is recorded with this.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The check's URL is not `http://…`.
    #[error("{url}: only http:// URLs can be probed")]
    NotHttpUrl {
        /// The URL.
        url: String,
    },
    /// The check's URL has no host.
    #[error("{url}: no host")]
    NoHost {
        /// The URL.
        url: String,
    },
    /// The HTTP request could not be made or its answer read.
    #[error("GET {url}: {source}")]
    Http {
        /// The URL.
        url: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The answer does not start with an HTTP status line.
    #[error("GET {url}: not an HTTP answer")]
    NotHttp {
        /// The URL.
        url: String,
    },
    /// The status is not the one expected.
    #[error("GET {url}: status {code}")]
    Status {
        /// The URL.
        url: String,
        /// The status received.
        code: u16,
    },
    /// No HTTP answer within the check's timeout.
    #[error("GET {url}: no answer within {timeout:?}")]
    HttpTimeout {
        /// The URL.
        url: String,
        /// The check's timeout.
        timeout: Duration,
    },
    /// The TCP connection was refused or failed.
    #[error("connect {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The failure.
        source: std::io::Error,
    },
    /// No TCP connection within the check's timeout.
    #[error("connect {addr}: no answer within {timeout:?}")]
    ConnectTimeout {
        /// The address.
        addr: String,
        /// The check's timeout.
        timeout: Duration,
    },
    /// The check command could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The check command failed.
    #[error("{command}: {}", .exit.describe())]
    Exit {
        /// The command line.
        command: String,
        /// How it ended.
        exit: Exit,
    },
    /// The check command's exit was never reported.
    #[error("{command}: lost track of the probe")]
    Lost {
        /// The command line.
        command: String,
    },
    /// The check command did not finish within the check's timeout.
    #[error("{command}: no answer within {timeout:?}")]
    CommandTimeout {
        /// The command line.
        command: String,
        /// The check's timeout.
        timeout: Duration,
    },
}

/// Runs one probe; `Err` says why it failed.
pub async fn probe(shared: &Shared, id: u64, h: &HealthSpec) -> Result<(), ProbeError> {
    let t = Duration::from_millis(h.timeout_ms.max(1));
    match &h.probe {
        HealthProbe::Http(url) => {
            timeout(t, http(url, h.expect_status))
                .await
                .unwrap_or_else(|_| {
                    Err(ProbeError::HttpTimeout {
                        url: url.clone(),
                        timeout: t,
                    })
                })
        }
        HealthProbe::Tcp(addr) => match timeout(t, TcpStream::connect(addr.as_str())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(ProbeError::Connect {
                addr: addr.clone(),
                source,
            }),
            Err(_) => Err(ProbeError::ConnectTimeout {
                addr: addr.clone(),
                timeout: t,
            }),
        },
        HealthProbe::Command(cmd) => command(shared, id, cmd, t).await,
    }
}

/// Splits `http://host[:port][/path]`.
fn parse_http_url(url: &str) -> Result<(String, String), ProbeError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ProbeError::NotHttpUrl {
            url: url.to_string(),
        })?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if hostport.is_empty() {
        return Err(ProbeError::NoHost {
            url: url.to_string(),
        });
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
async fn http(url: &str, expect: Option<u16>) -> Result<(), ProbeError> {
    let failed = |source| ProbeError::Http {
        url: url.to_string(),
        source,
    };
    let (hostport, path) = parse_http_url(url)?;
    let mut s = TcpStream::connect(&hostport).await.map_err(failed)?;
    let host = hostport
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&hostport);
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: oxidepm-health\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.map_err(failed)?;
    let mut buf = vec![0u8; 256];
    let mut n = 0;
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        let m = s.read(&mut buf[n..]).await.map_err(failed)?;
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
        .ok_or_else(|| ProbeError::NotHttp {
            url: url.to_string(),
        })?;
    let ok = match expect {
        Some(e) => code == e,
        None => (200..300).contains(&code),
    };
    if ok {
        Ok(())
    } else {
        Err(ProbeError::Status {
            url: url.to_string(),
            code,
        })
    }
}

async fn command(shared: &Shared, id: u64, cmd: &[String], t: Duration) -> Result<(), ProbeError> {
    let (pid, rx) = {
        let mut s = lock(shared);
        s.spawn_probe(id, cmd)?
    };
    let command = || cmd.join(" ");
    match timeout(t, rx).await {
        Ok(Ok(exit)) if exit.success() => Ok(()),
        Ok(Ok(exit)) => Err(ProbeError::Exit {
            command: command(),
            exit,
        }),
        Ok(Err(_)) => Err(ProbeError::Lost { command: command() }),
        Err(_) => {
            super::spawn::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            Err(ProbeError::CommandTimeout {
                command: command(),
                timeout: t,
            })
        }
    }
}

/// The kind of the event recorded when an app's health changes.
pub const HEALTH_KIND: &str = "health";

/// What one check's result does to an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Failed checks in a row, this one included.
    pub failures: u32,
    /// The app's health now; `None`: as it was.
    pub health: Option<HealthState>,
    /// Restart the app (`system:health`).
    pub restart: bool,
}

/// Judges one check of an app that has been running for `since_start`
/// (`None`: unknown, no grace) after `failures` failed checks in a row:
/// a failure within `start_period` counts for nothing; `retries` failures
/// in a row (at least one) restart it, except during a reload, which
/// decides for itself (it keeps the old process and stops the new one).
pub fn judge(
    failures: u32,
    ok: bool,
    since_start: Option<Duration>,
    h: &HealthSpec,
    reloading: bool,
) -> Verdict {
    if ok {
        return Verdict {
            failures: 0,
            health: Some(HealthState::Healthy),
            restart: false,
        };
    }
    let in_grace = since_start.is_some_and(|d| d < Duration::from_millis(h.start_period_ms));
    if in_grace {
        return Verdict {
            failures,
            health: None,
            restart: false,
        };
    }
    let failures = failures + 1;
    Verdict {
        failures,
        health: Some(HealthState::Unhealthy),
        restart: failures >= h.retries.max(1) && !reloading,
    }
}

/// Checks app `id` every `interval` while its spec keeps the same check
/// (`epoch` changes when the spec does); after `retries` failures in a row
/// the app is restarted by `system:health`.
pub async fn run(shared: Shared, id: u64, epoch: u64, h: HealthSpec) {
    let mut failures = 0u32;
    loop {
        tokio::time::sleep(Duration::from_millis(h.interval_ms.max(10))).await;
        let (since_start, generation) = {
            let s = lock(&shared);
            let Some(a) = s.app(id).filter(|a| a.auto_epoch == epoch) else {
                return;
            };
            if a.rt.status != Status::Online {
                failures = 0;
                continue;
            }
            (a.started.map(|st| st.elapsed()), a.generation)
        };
        let result = probe(&shared, id, &h).await;
        let restart = {
            let mut s = lock(&shared);
            let Some(a) = s.app_mut(id).filter(|a| a.auto_epoch == epoch) else {
                return;
            };
            // A check that began before the app's process changed (a
            // restart, a reload's new process) says nothing of the new one.
            if a.rt.status != Status::Online || a.generation != generation {
                continue;
            }
            let before = a.health;
            let v = judge(failures, result.is_ok(), since_start, &h, a.reloading);
            failures = v.failures;
            if let Some(health) = v.health {
                a.health = Some(health);
            }
            let restart = match &result {
                Err(why) if v.restart => Some(why.to_string()),
                _ => None,
            };
            // A change of health is an event (each check is not): what a
            // watcher waits for, and what `events` shows after.
            if a.health != before {
                let detail = match &result {
                    Ok(()) => "healthy".to_string(),
                    Err(why) => format!("unhealthy: {why}"),
                };
                s.event(
                    id,
                    EventKind::Other(HEALTH_KIND.into()),
                    &Actor::system("health"),
                    &detail,
                );
            }
            restart
        };
        if let Some(why) = restart {
            failures = 0;
            let detail = format!("{} failed checks in a row, last: {why}", h.retries.max(1));
            let reason = super::lifecycle::DaemonRestart::Health { detail };
            super::control::restart_by_daemon(&shared, id, reason).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(retries: u32, start_period_ms: u64) -> HealthSpec {
        HealthSpec {
            probe: HealthProbe::Tcp("127.0.0.1:1".into()),
            expect_status: None,
            interval_ms: 1000,
            timeout_ms: 500,
            retries,
            start_period_ms,
        }
    }

    /// Runs checks with these results, one per `interval` from the start:
    /// the verdict of each.
    fn checks(h: &HealthSpec, results: &[bool], reloading: bool) -> Vec<Verdict> {
        let mut failures = 0;
        let mut out = Vec::new();
        for (i, ok) in results.iter().enumerate() {
            let since = Duration::from_millis(h.interval_ms * (i as u64 + 1));
            let v = judge(failures, *ok, Some(since), h, reloading);
            failures = if v.restart { 0 } else { v.failures };
            out.push(v);
        }
        out
    }

    #[test]
    fn retries_failures_in_a_row_restart_and_one_success_forgives_them() {
        let h = spec(3, 0);
        let v = checks(&h, &[false, false, true, false, false, false], false);
        let restarts: Vec<bool> = v.iter().map(|v| v.restart).collect();
        assert_eq!(restarts, [false, false, false, false, false, true]);
        assert_eq!(v[1].health, Some(HealthState::Unhealthy));
        assert_eq!(v[2].health, Some(HealthState::Healthy));
        assert_eq!(v[2].failures, 0);
        // After the restart the count starts again.
        let v = checks(&h, &[false; 7], false);
        let at: Vec<usize> = (0..7).filter(|i| v[*i].restart).collect();
        assert_eq!(at, [2, 5]);
    }

    #[test]
    fn failures_within_the_start_period_count_for_nothing() {
        // Checks at 1 s, 2 s, …; a grace of 2.5 s: the first two failures
        // are forgiven, the third to fifth count.
        let h = spec(3, 2500);
        let v = checks(&h, &[false; 5], false);
        assert_eq!(v[0].health, None, "unchanged during the grace");
        assert_eq!(v[1].failures, 0);
        let restarts: Vec<bool> = v.iter().map(|v| v.restart).collect();
        assert_eq!(restarts, [false, false, false, false, true]);
        // The grace ends exactly at the start period.
        let at_end = judge(0, false, Some(Duration::from_millis(2500)), &h, false);
        assert_eq!(at_end.failures, 1);
        // A start time unknown (an adopted process): no grace.
        let unknown = judge(0, false, None, &h, false);
        assert_eq!(unknown.failures, 1);
    }

    #[test]
    fn a_reload_decides_for_itself_and_zero_retries_means_one() {
        let v = checks(&spec(2, 0), &[false; 4], true);
        assert!(v.iter().all(|v| !v.restart), "{v:?}");
        assert_eq!(v[3].failures, 4);
        assert_eq!(v[3].health, Some(HealthState::Unhealthy));
        let v = checks(&spec(0, 0), &[false], false);
        assert!(v[0].restart);
    }

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
