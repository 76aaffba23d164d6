//! Figures, statistics and the summary table.

use std::time::Duration;

/// One line of the summary: a figure and, when DESIGN.md names one, its target.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub what: String,
    /// The figure.
    pub measured: String,
    /// The target, or `-`.
    pub target: String,
    /// Whether the target is met; None when there is no target.
    pub ok: Option<bool>,
}

impl Row {
    /// A figure with a target.
    pub fn check(what: impl Into<String>, measured: String, target: &str, ok: bool) -> Row {
        Row {
            what: what.into(),
            measured,
            target: target.into(),
            ok: Some(ok),
        }
    }

    /// A figure reported for information.
    pub fn info(what: impl Into<String>, measured: String) -> Row {
        Row {
            what: what.into(),
            measured,
            target: "-".into(),
            ok: None,
        }
    }

    /// A scenario that could not be measured.
    pub fn failed(what: impl Into<String>, error: &str) -> Row {
        Row {
            what: what.into(),
            measured: format!("ERROR: {}", error.lines().next().unwrap_or("")),
            target: "-".into(),
            ok: Some(false),
        }
    }
}

/// Prints the rows as an aligned table.
pub fn print_table(rows: &[Row]) {
    let header = ["what", "measured", "target", "ok?"];
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            [
                r.what.clone(),
                r.measured.clone(),
                r.target.clone(),
                match r.ok {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    let mut w = header.map(|h| h.chars().count());
    for c in &cells {
        for i in 0..4 {
            w[i] = w[i].max(c[i].chars().count());
        }
    }
    let line = |c: [&str; 4]| {
        let mut l = String::from("|");
        for i in 0..4 {
            let pad = w[i] - c[i].chars().count();
            l.push_str(&format!(" {}{} |", c[i], " ".repeat(pad)));
        }
        say!("{l}");
    };
    line(header);
    let rule: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
    line([&rule[0], &rule[1], &rule[2], &rule[3]]);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3]]);
    }
}

/// Sorted copy of samples.
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v
}

/// Median (mean of the two middle values for an even count).
pub fn median(xs: &[f64]) -> f64 {
    let v = sorted(xs);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile, `p` in 0..=100.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let v = sorted(xs);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// Smallest sample.
pub fn min(xs: &[f64]) -> f64 {
    xs.iter().cloned().fold(f64::INFINITY, f64::min)
}

/// Largest sample.
pub fn max(xs: &[f64]) -> f64 {
    xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
}

/// A duration in milliseconds, as f64.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes as MiB with two decimals.
pub fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}
