//! Prometheus metrics, off by default: what the daemon counts of its
//! requests (here), what a scrape reads from the state it already holds
//! ([`scrape`]), the text format ([`text`]) and the small bounded HTTP
//! server that answers `GET /metrics` ([`http`]).

pub mod http;
pub mod scrape;
pub mod text;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Upper bounds of the request latency histogram, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Where `metrics` in daemon.toml says to serve `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address (`127.0.0.1:9464`).
    Tcp(std::net::SocketAddr),
    /// A unix socket path (absolute).
    Unix(std::path::PathBuf),
}

impl Listen {
    /// Reads the `metrics` key: an absolute path is a unix socket, anything
    /// else must be `address:port`.
    pub fn parse(s: &str) -> Result<Listen, &'static str> {
        if s.starts_with('/') {
            return Ok(Listen::Unix(s.into()));
        }
        s.parse().map(Listen::Tcp).map_err(|_| {
            "must be an address and port (\"127.0.0.1:9464\") or an absolute unix socket path"
        })
    }
}

/// Counts are keyed by names from fixed sets (classes, operation names,
/// error codes), so their number is bounded whatever clients send.
type RequestKey = (&'static str, &'static str, &'static str);

/// What the daemon counts of the requests it answers.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Counts>,
    /// The last scrape and when it was written.
    last: Mutex<Option<(Instant, Arc<str>)>>,
}

#[derive(Debug, Default)]
struct Counts {
    requests: BTreeMap<RequestKey, u64>,
    refusals: BTreeMap<&'static str, u64>,
    latency: Histogram,
}

/// A fixed-bucket histogram of seconds.
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    /// Observations at or under each bound of [`LATENCY_BUCKETS`] (not
    /// cumulative; the scrape adds them up).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    /// All observations.
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }
}

/// A copy of the counts, taken for one scrape.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// `(class, op, result)` → requests.
    pub requests: Vec<(RequestKey, u64)>,
    /// class → refusals.
    pub refusals: Vec<(&'static str, u64)>,
    /// Request latency.
    pub latency: Histogram,
}

impl Metrics {
    /// Counts one answered request of an actor of `class`: `result` is `ok`
    /// or the error code; a refusal (policy, protected) is counted apart too.
    /// `took` is `None` for a stream (`logs`), whose length is the client's.
    pub fn request(
        &self,
        class: &'static str,
        op: &'static str,
        result: &'static str,
        refused: bool,
        took: Option<Duration>,
    ) {
        let mut c = self.counts();
        *c.requests.entry((class, op, result)).or_default() += 1;
        if refused {
            *c.refusals.entry(class).or_default() += 1;
        }
        if let Some(took) = took {
            c.latency.observe(took.as_secs_f64());
        }
    }

    /// The counts as they are now.
    pub fn snapshot(&self) -> Snapshot {
        let c = self.counts();
        Snapshot {
            requests: c.requests.iter().map(|(k, v)| (*k, *v)).collect(),
            refusals: c.refusals.iter().map(|(k, v)| (*k, *v)).collect(),
            latency: c.latency.clone(),
        }
    }

    /// The last scrape, if it is younger than `fresh`.
    pub fn recent(&self, fresh: Duration) -> Option<Arc<str>> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*last {
            Some((at, text)) if at.elapsed() < fresh => Some(text.clone()),
            _ => None,
        }
    }

    /// Keeps `text` as the last scrape.
    pub fn keep(&self, text: Arc<str>) {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = Some((Instant::now(), text));
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Only counters: a panic elsewhere cannot leave them half-changed.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_or_an_absolute_path_and_nothing_else() {
        assert_eq!(
            Listen::parse("127.0.0.1:9464"),
            Ok(Listen::Tcp("127.0.0.1:9464".parse().unwrap()))
        );
        assert_eq!(
            Listen::parse("/run/oxidepm/metrics.sock"),
            Ok(Listen::Unix("/run/oxidepm/metrics.sock".into()))
        );
        assert!(Listen::parse("localhost").is_err());
        assert!(Listen::parse("metrics.sock").is_err());
    }

    #[test]
    fn requests_and_refusals_are_counted_by_their_labels() {
        let m = Metrics::default();
        let ms = Some(Duration::from_micros(300));
        m.request("human", "status", "ok", false, ms);
        m.request("human", "status", "ok", false, ms);
        m.request(
            "ai",
            "stop",
            "E_POLICY_DENIED",
            true,
            Some(Duration::from_secs(60)),
        );
        m.request("human", "logs", "ok", false, None);
        let s = m.snapshot();
        assert_eq!(
            s.requests,
            vec![
                (("ai", "stop", "E_POLICY_DENIED"), 1),
                (("human", "logs", "ok"), 1),
                (("human", "status", "ok"), 2)
            ]
        );
        assert_eq!(s.refusals, vec![("ai", 1)]);
        assert_eq!(s.latency.count, 3);
        // 60 s is past the last bucket: only +Inf holds it.
        assert_eq!(s.latency.buckets.iter().sum::<u64>(), 2);
    }
}
