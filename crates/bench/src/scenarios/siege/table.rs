//! One attack's figures: memory of the shared processes against their
//! budgets, and the bystanders' latency against their idle latency;
//! printed as two small tables and turned into summary rows.

use super::probe::Samples;
use crate::report::{median, mib, percentile, Row};

/// A bystander's latency may grow to this multiple of its idle median.
pub const LATENCY_FACTOR: f64 = 2.0;

/// A shared process's memory during one attack.
pub struct Mem {
    /// Which process (`daemon`, `bridge`).
    pub process: &'static str,
    /// VmRSS just before the attack, bytes.
    pub idle: u64,
    /// VmHWM after the attack (the peak since it started), bytes.
    pub peak: u64,
    /// The budget the peak must stay under, bytes.
    pub budget: u64,
}

impl Mem {
    fn pass(&self) -> bool {
        self.peak <= self.budget
    }
}

/// A bystander's round trips, idle and under the attack.
pub struct Lat {
    /// Who (`person status on daemon.sock`).
    pub client: &'static str,
    /// Before the attack.
    pub idle: Samples,
    /// While it runs.
    pub under: Samples,
}

impl Lat {
    fn ratio(&self, p: f64) -> f64 {
        percentile(&self.under.ms, p) / percentile(&self.idle.ms, p)
    }

    fn median_ratio(&self) -> f64 {
        median(&self.under.ms) / median(&self.idle.ms)
    }

    /// The median under attack within the factor of the idle median, and
    /// every round trip under attack answered.
    fn pass(&self) -> bool {
        self.median_ratio() <= LATENCY_FACTOR && self.under.failed == 0 && !self.under.ms.is_empty()
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn p50_p99(s: &Samples) -> String {
    if s.ms.is_empty() {
        return "-".into();
    }
    format!("{:.3} / {:.3} ms", median(&s.ms), percentile(&s.ms, 99.0))
}

fn answered(s: &Samples) -> String {
    format!("{}/{} ({:.1} %)", s.ms.len(), s.tried(), s.success_pct())
}

/// Prints the attack's tables (and the first failures); returns its rows.
pub fn report(attack: &str, mems: &[Mem], lats: &[Lat]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut t = vec![[
        "process".to_string(),
        "idle RSS".into(),
        "peak RSS (attack)".into(),
        "budget".into(),
        "".into(),
    ]];
    for m in mems {
        t.push([
            m.process.to_string(),
            mib(m.idle),
            mib(m.peak),
            mib(m.budget),
            verdict(m.pass()).into(),
        ]);
        rows.push(Row::check(
            format!("siege {attack}: {} peak RSS", m.process),
            format!("{} (idle {})", mib(m.peak), mib(m.idle)),
            &format!("<= {}", mib(m.budget)),
            m.pass(),
        ));
    }
    print_cells(&t);
    let mut t = vec![[
        "bystander".to_string(),
        "idle p50 / p99".into(),
        "attack p50 / p99".into(),
        "ratio p50 (p99)".into(),
        "answered (attack)".into(),
        format!("<= {LATENCY_FACTOR}x"),
    ]];
    for l in lats {
        t.push([
            l.client.to_string(),
            p50_p99(&l.idle),
            p50_p99(&l.under),
            format!("{:.2}x ({:.2}x)", l.median_ratio(), l.ratio(99.0)),
            answered(&l.under),
            verdict(l.pass()).into(),
        ]);
        rows.push(Row::check(
            format!("siege {attack}: {} (median)", l.client),
            format!(
                "{:.3} ms = {:.2}x idle, {} answered",
                median(&l.under.ms),
                l.median_ratio(),
                answered(&l.under)
            ),
            &format!("<= {LATENCY_FACTOR}x idle, all answered"),
            l.pass(),
        ));
    }
    print_cells(&t);
    for l in lats {
        for (when, s) in [("idle", &l.idle), ("under attack", &l.under)] {
            if let Some(e) = &s.first_error {
                say!(
                    "  {} {when}: {} of {} failed, first: {e}",
                    l.client,
                    s.failed,
                    s.tried()
                );
            }
        }
    }
    rows
}

/// Prints rows of cells aligned, the first one as a header.
fn print_cells<const N: usize>(rows: &[[String; N]]) {
    let mut w = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for (k, r) in rows.iter().enumerate() {
        let mut line = String::from("   ");
        for (i, c) in r.iter().enumerate() {
            line.push_str(&format!(" {c:<width$} |", width = w[i]));
        }
        say!("{}", line.trim_end_matches('|').trim_end());
        if k == 0 {
            let rule: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
            say!("    {}", rule.join(" | "));
        }
    }
}
