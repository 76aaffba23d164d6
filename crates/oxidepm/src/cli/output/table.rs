//! Tables and cells: columns as wide as their widest cell, a status cell
//! coloured when the reader is a terminal that wants colour.

use anstyle::{AnsiColor, Style};
use std::fmt::Display;
use std::io::{self, Write};

/// A value, or `-` when there is none.
pub(crate) fn or_dash<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// `512b`, `3.1mb`: the compact form of the status table and monit.
pub(crate) fn bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if f < K {
        format!("{n}b")
    } else if f < K * K {
        format!("{:.1}kb", f / K)
    } else if f < K * K * K {
        format!("{:.1}mb", f / K / K)
    } else {
        format!("{:.2}gb", f / K / K / K)
    }
}

/// The style of a status name (`online`, `errored`, … and `waiting`,
/// `stopped`), keyed by name so that statuses added later still print.
pub(crate) fn status_style(status: &str) -> Style {
    let color = match status {
        "online" => AnsiColor::Green,
        "errored" => AnsiColor::Red,
        "stopped" | "stopping" | "starting" | "waiting" => AnsiColor::Yellow,
        _ => return Style::new(),
    };
    Style::new().fg_color(Some(color.into()))
}

/// Whether text written to stdout may carry colour: stdout is a terminal,
/// `NO_COLOR` is unset or empty (no-color.org), `TERM` is not `dumb` (as
/// `anstream` decides, which also honours `CLICOLOR_FORCE`), and
/// `--no-color` was not given.
pub(crate) fn stdout_wants_color(no_color_flag: bool) -> bool {
    if no_color_flag {
        return false;
    }
    anstream::AutoStream::choice(&io::stdout()) != anstream::ColorChoice::Never
}

/// A table cell: its text, and the style it is shown in when colour is on.
pub(crate) struct Cell {
    /// What is shown.
    pub text: String,
    /// The style (none for most cells).
    pub style: Style,
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell {
            text,
            style: Style::new(),
        }
    }
}

/// Writes rows under a header, each column as wide as its widest cell;
/// styles only with `color` (widths are those of the plain text).
pub(crate) fn table(
    out: &mut impl Write,
    header: &[&str],
    rows: Vec<Vec<Cell>>,
    color: bool,
) -> io::Result<()> {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.text.chars().count());
        }
    }
    let header: Vec<Cell> = header.iter().map(|h| Cell::from(h.to_string())).collect();
    for cells in std::iter::once(header).chain(rows) {
        let mut l = String::new();
        let last = cells.len();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.text.chars().count();
            if color && c.style != Style::new() {
                l.push_str(&format!(
                    "{}{}{}",
                    c.style.render(),
                    c.text,
                    c.style.render_reset()
                ));
            } else {
                l.push_str(&c.text);
            }
            if i + 1 < last {
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        writeln!(out, "{}", l.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(rows: Vec<Vec<&str>>) -> Vec<Vec<Cell>> {
        rows.into_iter()
            .map(|r| r.into_iter().map(|c| Cell::from(c.to_string())).collect())
            .collect()
    }

    #[test]
    fn columns_line_up_and_colour_does_not_shift_them() {
        let mut out = Vec::new();
        let rows = vec![vec![
            Cell::from("web".to_string()),
            Cell {
                text: "online".into(),
                style: status_style("online"),
            },
            Cell::from("1".to_string()),
        ]];
        table(&mut out, &["name", "status", "n"], rows, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\x1b["), "{text:?}");
        let mut out = Vec::new();
        let rows = plain(vec![vec!["web", "online", "1"]]);
        table(&mut out, &["name", "status", "n"], rows, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "name  status  n\nweb   online  1\n"
        );
        // Stripped of its escapes, the coloured table is the plain one.
        let stripped: String = anstream::adapter::strip_str(&text).to_string();
        assert_eq!(stripped, "name  status  n\nweb   online  1\n");
    }

    #[test]
    fn statuses_have_colours_and_unknown_ones_none() {
        assert_ne!(status_style("online"), status_style("errored"));
        assert_eq!(status_style("stopped"), status_style("waiting"));
        assert_eq!(status_style("something-new"), Style::new());
    }
}
