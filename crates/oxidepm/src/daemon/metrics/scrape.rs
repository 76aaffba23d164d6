//! One scrape: the apps from the supervisor's memory (the sampler's last
//! CPU and memory figures, so a scrape never walks /proc), the request
//! counts, and, when lanes are on, the lanes as `oxidepm lanes` reads them.

use super::text::{Kind, Text};
use super::{Snapshot, LATENCY_BUCKETS};
use crate::daemon::Daemon;
use crate::lanes::settings::Backend;
use crate::supervise::lock;
use oxidepm_proto::{Counters, HealthState, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a scrape waits for the private Redis before it leaves the
/// lanes out (a scrape of the apps is still worth having).
const LANES_WAIT: Duration = Duration::from_secs(2);

/// How long a scrape is served again to the next scrapers.
pub const FRESH: Duration = Duration::from_millis(100);

/// Bytes a scrape reserves for each app (its samples are about that long).
const BYTES_PER_APP: usize = 640;

/// One app's figures, copied out under the supervisor's lock.
struct AppRow {
    name: String,
    status: Status,
    restarts: u64,
    by_reason: Vec<(String, u64)>,
    cpu_ticks: u64,
    memory: u64,
    health: Option<HealthState>,
    uptime: f64,
}

/// A scrape at most [`FRESH`] old: scrapes closer together than that get
/// the same text, so a client scraping in a loop cannot take the daemon's
/// one thread (a scraper asks every few seconds).
pub async fn current(d: &Daemon) -> Arc<str> {
    if let Some(text) = d.metrics.recent(FRESH) {
        return text;
    }
    let text: Arc<str> = render(d).await.into();
    d.metrics.keep(text.clone());
    text
}

/// Writes the whole scrape.
pub async fn render(d: &Daemon) -> String {
    crate::supervise::sampler::refresh(&d.sup).await;
    let rows = app_rows(d);
    let mut t = Text::with_capacity(4096 + rows.len() * BYTES_PER_APP);
    apps(&mut t, &rows);
    requests(&mut t, &d.metrics.snapshot());
    if d.lanes.settings.backend == Backend::Redis {
        lanes(&mut t, d).await;
    }
    t.finish()
}

fn app_rows(d: &Daemon) -> Vec<AppRow> {
    let now = Instant::now();
    let now_ms = crate::timefmt::now_ms();
    let s = lock(&d.sup);
    s.apps()
        .map(|a| {
            let online = a.rt.status == Status::Online;
            // As `status` reports them: an app re-adopted from an earlier
            // daemon has only its recorded start time.
            let uptime = match (online, a.started, a.rt.started_at_ms) {
                (true, Some(at), _) => now.duration_since(at).as_secs_f64(),
                (true, None, Some(ms)) => (now_ms - ms).max(0) as f64 / 1000.0,
                _ => 0.0,
            };
            AppRow {
                name: a.spec.name.to_string(),
                status: a.rt.status,
                restarts: a.rt.restarts,
                by_reason: a.restart_reasons.clone(),
                cpu_ticks: a.sample.cpu_ticks,
                // A stopped app's last sample is not what it holds now.
                memory: if online { a.sample.memory_bytes } else { 0 },
                health: a.health,
                uptime,
            }
        })
        .collect()
}

fn apps(t: &mut Text, rows: &[AppRow]) {
    let tick = oxidepm_sys::procfs::ticks_per_second().max(1) as f64;
    t.family(
        "oxidepm_app_up",
        Kind::Gauge,
        "1 when the app is online, else 0.",
    );
    for r in rows {
        let up = if r.status == Status::Online { 1.0 } else { 0.0 };
        t.sample("oxidepm_app_up", &[("app", &r.name)], up);
    }
    t.family(
        "oxidepm_app_status",
        Kind::Gauge,
        "1 for the app's current status (online, stopped, errored, ...).",
    );
    for r in rows {
        let labels = [("app", r.name.as_str()), ("status", r.status.as_str())];
        t.sample("oxidepm_app_status", &labels, 1.0);
    }
    t.family(
        "oxidepm_app_restarts_total",
        Kind::Counter,
        "Restarts of the app, by what asked for them (crash, retry, health, memory, cron, or the class of the requester); earlier: before this daemon started.",
    );
    for r in rows {
        let counted: u64 = r.by_reason.iter().map(|(_, n)| n).sum();
        for (reason, n) in &r.by_reason {
            let labels = [("app", r.name.as_str()), ("reason", reason.as_str())];
            t.sample("oxidepm_app_restarts_total", &labels, *n as f64);
        }
        if r.restarts > counted || r.by_reason.is_empty() {
            let labels = [("app", r.name.as_str()), ("reason", "earlier")];
            let earlier = r.restarts.saturating_sub(counted);
            t.sample("oxidepm_app_restarts_total", &labels, earlier as f64);
        }
    }
    t.family(
        "oxidepm_app_cpu_seconds_total",
        Kind::Counter,
        "CPU time of the app's current run (its whole process tree), at the last sample.",
    );
    for r in rows {
        let secs = r.cpu_ticks as f64 / tick;
        t.sample("oxidepm_app_cpu_seconds_total", &[("app", &r.name)], secs);
    }
    t.family(
        "oxidepm_app_memory_bytes",
        Kind::Gauge,
        "Resident memory of the app's process tree, at the last sample.",
    );
    for r in rows {
        let m = r.memory as f64;
        t.sample("oxidepm_app_memory_bytes", &[("app", &r.name)], m);
    }
    t.family(
        "oxidepm_app_health",
        Kind::Gauge,
        "1 when the app's last health check passed, 0 when it failed; absent for apps without a check or before the first.",
    );
    for r in rows {
        let v = match r.health {
            Some(HealthState::Healthy) => 1.0,
            Some(HealthState::Unhealthy) => 0.0,
            _ => continue,
        };
        t.sample("oxidepm_app_health", &[("app", &r.name)], v);
    }
    t.family(
        "oxidepm_app_uptime_seconds",
        Kind::Gauge,
        "Seconds since the app's current run started; 0 when it is not online.",
    );
    for r in rows {
        t.sample("oxidepm_app_uptime_seconds", &[("app", &r.name)], r.uptime);
    }
}

fn requests(t: &mut Text, s: &Snapshot) {
    t.family(
        "oxidepm_requests_total",
        Kind::Counter,
        "Requests answered, by the class of the actor, the operation and the result (ok or the error code).",
    );
    for ((class, op, result), n) in &s.requests {
        let labels = [("class", *class), ("op", *op), ("result", *result)];
        t.sample("oxidepm_requests_total", &labels, *n as f64);
    }
    t.family(
        "oxidepm_refusals_total",
        Kind::Counter,
        "Requests refused by policy (tier, scope, protected app), by the class of the actor.",
    );
    for (class, n) in &s.refusals {
        t.sample("oxidepm_refusals_total", &[("class", class)], *n as f64);
    }
    let name = "oxidepm_request_duration_seconds";
    t.family(
        name,
        Kind::Histogram,
        "Time from a request being read to its answer being ready.",
    );
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0u64;
    let mut le = String::new();
    for (bound, n) in LATENCY_BUCKETS.iter().zip(s.latency.buckets.iter()) {
        cumulative += n;
        le.clear();
        super::text::push_value(&mut le, *bound);
        t.sample(&bucket, &[("le", &le)], cumulative as f64);
    }
    t.sample(&bucket, &[("le", "+Inf")], s.latency.count as f64);
    t.sample(&format!("{name}_sum"), &[], s.latency.sum);
    t.sample(&format!("{name}_count"), &[], s.latency.count as f64);
}

async fn lanes(t: &mut Text, d: &Daemon) {
    // Without agents the private Redis does not run: nothing to show, and
    // nothing that should look down.
    if d.lanes.agents(&d.sup).is_empty() {
        return;
    }
    let agents = tokio::time::timeout(LANES_WAIT, d.lanes.report(&d.sup)).await;
    if let Ok(Ok(m)) = tokio::time::timeout(LANES_WAIT, d.lanes.memory_report(&d.sup)).await {
        memory(t, &m);
    }
    let routes = tokio::time::timeout(LANES_WAIT, d.lanes.routes_report(&d.sup)).await;
    let (counters, sources) = match routes {
        Ok(Ok(r)) => match r.counters {
            Some(Counters::Read(c)) => (Some(c), r.sources),
            _ => (None, Vec::new()),
        },
        _ => (None, Vec::new()),
    };
    let up = matches!(agents, Ok(Ok(_))) && counters.is_some();
    t.family(
        "oxidepm_lanes_up",
        Kind::Gauge,
        "1 when the private Redis answered this scrape.",
    );
    t.sample("oxidepm_lanes_up", &[], if up { 1.0 } else { 0.0 });
    if let Ok(Ok(agents)) = agents {
        t.family(
            "oxidepm_lane_inbox_length",
            Kind::Gauge,
            "Entries in an agent's inbox, by source.",
        );
        for a in &agents {
            for s in a.streams.iter().filter(|s| s.key.ends_with(":inbox")) {
                let labels = [("agent", a.agent.as_str()), ("source", source_of(&s.key))];
                t.sample("oxidepm_lane_inbox_length", &labels, s.length as f64);
            }
        }
        t.family(
            "oxidepm_lane_pending",
            Kind::Gauge,
            "Entries delivered to a stream's reader and not acknowledged yet, by agent, source and box (inbox or outbox).",
        );
        for a in &agents {
            for s in &a.streams {
                let kind = if s.key.ends_with(":inbox") {
                    "inbox"
                } else {
                    "outbox"
                };
                let labels = [
                    ("agent", a.agent.as_str()),
                    ("source", source_of(&s.key)),
                    ("box", kind),
                ];
                t.sample("oxidepm_lane_pending", &labels, s.pending as f64);
            }
        }
    }
    if let Some(c) = counters {
        for (name, v) in c.entries() {
            bridge_counter(t, name, v);
        }
        let name = "oxidepm_bridge_delivery_seconds";
        t.family(
            name,
            Kind::Summary,
            "Time from an outbox entry's XADD to its delivery (rate of _sum over rate of _count: the mean).",
        );
        t.sample(&format!("{name}_sum"), &[], c.delivery_ms as f64 / 1000.0);
        t.sample(&format!("{name}_count"), &[], c.delivered as f64);
    }
    if !sources.is_empty() {
        let name = "oxidepm_bridge_source_up";
        t.family(
            name,
            Kind::Gauge,
            "1 when a source's inbound side runs in the bridge; 0 when a failure stopped it (`oxidepm lanes` says why).",
        );
        for s in &sources {
            t.sample(
                name,
                &[("source", s.name.as_str())],
                if s.up { 1.0 } else { 0.0 },
            );
        }
    }
}

/// How close the lanes' Redis is to its bound.
fn memory(t: &mut Text, m: &oxidepm_proto::LanesMemory) {
    for (name, help, v) in [
        (
            "oxidepm_lanes_redis_used_bytes",
            "Bytes the lanes' Redis uses (used_memory).",
            Some(m.used),
        ),
        (
            "oxidepm_lanes_redis_maxmemory_bytes",
            "The lanes' Redis's bound (maxmemory; 0: none): at it, writes fail with OOM.",
            Some(m.maxmemory),
        ),
        (
            "oxidepm_lanes_outbox_budget_bytes",
            "Bytes every agent's outboxes may hold together (half of lanes.maxmemory).",
            Some(m.outbox_budget),
        ),
        (
            "oxidepm_lane_agent_quota_bytes",
            "Bytes each agent's outboxes may hold now (its share of the outbox budget).",
            m.agent_quota,
        ),
    ] {
        if let Some(v) = v {
            t.family(name, Kind::Gauge, help);
            t.sample(name, &[], v as f64);
        }
    }
}

/// The bridge's counters: totals, except what it holds now.
fn bridge_counter(t: &mut Text, name: &str, v: i64) {
    if matches!(name, "pending" | "unrouted_stream") {
        let metric = format!("oxidepm_bridge_{name}");
        t.family(
            &metric,
            Kind::Gauge,
            "What the bridge holds now (bridge:stats).",
        );
        t.sample(&metric, &[], v as f64);
    } else {
        let metric = format!("oxidepm_bridge_{name}_total");
        t.family(&metric, Kind::Counter, "The bridge's count (bridge:stats).");
        t.sample(&metric, &[], v as f64);
    }
}

/// `alice:discord:inbox` → `discord` (the agent's name has no colon).
fn source_of(key: &str) -> &str {
    let mut parts = key.splitn(3, ':');
    let _agent = parts.next();
    parts.next().unwrap_or("")
}
