//! The Prometheus text exposition format (version 0.0.4), written straight
//! into one buffer: a scrape allocates a string and nothing per sample.

use std::fmt::Write;

/// The `Content-Type` of what [`Text`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Kind of a metric family, as its `# TYPE` line says.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Only goes up (reset when the process behind it restarts).
    Counter,
    /// Any value.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
    /// Sum and count (no quantiles).
    Summary,
}

/// A scrape being written.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// An empty scrape with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Text {
        Text {
            out: String::with_capacity(capacity),
        }
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of `name` with `labels` (names are ours, values escaped).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_into(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
    }

    /// The finished scrape.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Label values may hold anything an app name or agent name holds; the
/// format needs backslash, double quote and newline escaped.
fn escape_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes a value as the format spells it (`+Inf`, `-Inf`, `NaN`).
pub fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_values_spelled_as_the_format_wants() {
        let mut t = Text::default();
        t.family("x_total", Kind::Counter, "Things.");
        t.sample("x_total", &[("app", "a\"b\\c\nd")], 2.0);
        t.sample("x_total", &[], f64::INFINITY);
        assert_eq!(
            t.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{app=\"a\\\"b\\\\c\\nd\"} 2\nx_total +Inf\n"
        );
    }
}
