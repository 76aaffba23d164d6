//! Searching a log: which lines match a pattern, with the lines around
//! them, keeping only the newest matches that fit a bound.
//!
//! The lines come in oldest first (from a [`super::TailReader`] over the
//! current and rotated files); what is held is at most about `max_bytes`
//! plus the few context lines before the next match, however large the
//! log, so a search of a 1 GiB log costs the daemon the bound, not the
//! log. When older matches are dropped to stay within it, the result says
//! it is truncated.

use regex::bytes::{Regex, RegexBuilder};
use std::collections::VecDeque;

/// The longest pattern taken, in bytes.
pub const MAX_PATTERN: usize = 4096;
/// The most context lines asked for on each side of a match.
pub const MAX_CONTEXT: u32 = 10;
/// What a compiled pattern may take (regex's own bound on its automata):
/// a pattern an agent writes cannot make the daemon build a huge one.
const COMPILED_MAX: usize = 1 << 20;

/// A compiled search pattern: plain text or a regular expression (linear
/// time in the line's length, whatever the pattern: no backtracking).
#[derive(Debug, Clone)]
pub struct Pattern(Regex);

impl Pattern {
    /// `text` as a pattern: a regular expression when `regex`, plain text
    /// otherwise; the error says what is wrong with it.
    pub fn new(text: &str, regex: bool) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err("the search pattern is empty: give the text to look for".into());
        }
        if text.len() > MAX_PATTERN {
            return Err(format!(
                "the search pattern is {} bytes; at most {MAX_PATTERN} are taken",
                text.len()
            ));
        }
        let source = if regex {
            text.to_string()
        } else {
            regex::escape(text)
        };
        RegexBuilder::new(&source)
            .size_limit(COMPILED_MAX)
            .dfa_size_limit(COMPILED_MAX)
            .build()
            .map(Pattern)
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => {
                    "the regular expression is too large to search with: make it simpler".into()
                }
                e => format!("not a regular expression: {e}"),
            })
    }

    /// Whether the text of a log line, after its time stamp if it has
    /// one, holds a match: searching for `2026` finds what was said.
    pub fn is_match_text(&self, line: &[u8]) -> bool {
        let text = crate::timefmt::split_stamp(line).map_or(line, |(_, text)| text);
        self.0.is_match(text)
    }
}

/// One line of a search's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The line, without its newline.
    pub line: Vec<u8>,
    /// Whether it matched (false: a context line).
    pub matched: bool,
}

/// A search under way: feed it lines oldest first, then take the result.
pub struct Search<'p> {
    pattern: &'p Pattern,
    context: usize,
    max_matches: usize,
    max_bytes: usize,
    held: VecDeque<Found>,
    held_bytes: usize,
    matches: usize,
    /// Lines not held, kept for the context before the next match.
    before: VecDeque<Vec<u8>>,
    before_bytes: usize,
    /// Context lines still to take after the last match.
    after: usize,
    truncated: bool,
}

impl<'p> Search<'p> {
    /// A search for the newest `max_matches` matches of `pattern`, with
    /// `context` lines before and after each, in about `max_bytes`.
    pub fn new(pattern: &'p Pattern, context: u32, max_matches: usize, max_bytes: usize) -> Self {
        Search {
            pattern,
            context: context.min(MAX_CONTEXT) as usize,
            max_matches: max_matches.max(1),
            max_bytes: max_bytes.max(1),
            held: VecDeque::new(),
            held_bytes: 0,
            matches: 0,
            before: VecDeque::new(),
            before_bytes: 0,
            after: 0,
            truncated: false,
        }
    }

    /// Takes the next line; its text is searched, not its time stamp.
    pub fn push(&mut self, line: &[u8]) {
        if self.pattern.is_match_text(line) {
            while let Some(l) = self.before.pop_front() {
                self.hold(l, false);
            }
            self.before_bytes = 0;
            self.hold(line.to_vec(), true);
            self.matches += 1;
            self.after = self.context;
            self.trim();
        } else if self.after > 0 {
            self.after -= 1;
            self.hold(line.to_vec(), false);
            self.trim();
        } else if self.context > 0 {
            self.before.push_back(line.to_vec());
            self.before_bytes += line.len();
            while self.before.len() > self.context || self.before_bytes > self.max_bytes {
                match self.before.pop_front() {
                    Some(l) => self.before_bytes -= l.len(),
                    None => break,
                }
            }
        }
    }

    fn hold(&mut self, line: Vec<u8>, matched: bool) {
        self.held_bytes += line.len();
        self.held.push_back(Found { line, matched });
    }

    /// Drops the oldest lines while over a bound, then the context lines
    /// left before the first match beyond `context`.
    fn trim(&mut self) {
        while (self.matches > self.max_matches || self.held_bytes > self.max_bytes)
            && self.held.len() > 1
        {
            let Some(f) = self.held.pop_front() else {
                break;
            };
            self.held_bytes -= f.line.len();
            self.matches -= usize::from(f.matched);
            self.truncated = true;
        }
        let lead = self.held.iter().take_while(|f| !f.matched).count();
        if self.matches > 0 && lead > self.context {
            for _ in 0..lead - self.context {
                if let Some(f) = self.held.pop_front() {
                    self.held_bytes -= f.line.len();
                }
            }
        }
    }

    /// The matches held with their context, oldest first, and whether
    /// older matches were left out.
    pub fn finish(self) -> (Vec<Found>, bool) {
        (self.held.into(), self.truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        p: &Pattern,
        context: u32,
        max: usize,
        bytes: usize,
        lines: &[&str],
    ) -> (Vec<String>, bool) {
        let mut s = Search::new(p, context, max, bytes);
        for l in lines {
            s.push(l.as_bytes());
        }
        let (found, cut) = s.finish();
        let shown = found
            .iter()
            .map(|f| {
                format!(
                    "{}{}",
                    if f.matched { "*" } else { " " },
                    String::from_utf8_lossy(&f.line)
                )
            })
            .collect();
        (shown, cut)
    }

    #[test]
    fn plain_text_is_not_a_regex() {
        let p = Pattern::new("a.c", false).unwrap();
        assert!(p.is_match_text(b"xa.cx"));
        assert!(!p.is_match_text(b"abc"));
        let r = Pattern::new("a.c", true).unwrap();
        assert!(r.is_match_text(b"abc"));
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        assert!(Pattern::new("", false).unwrap_err().contains("empty"));
        assert!(Pattern::new("(", true)
            .unwrap_err()
            .contains("not a regular expression"));
        let long = "x".repeat(MAX_PATTERN + 1);
        assert!(Pattern::new(&long, false).unwrap_err().contains("at most"));
        // Counted repetitions that would compile to a huge automaton.
        let huge = Pattern::new(r"(\w{100}){100}", true).unwrap_err();
        assert!(huge.contains("too large"), "{huge}");
    }

    #[test]
    fn context_around_matches_without_repeating_lines() {
        let p = Pattern::new("ERR", false).unwrap();
        let lines = ["a", "b", "ERR 1", "c", "ERR 2", "d", "e", "f", "g", "ERR 3"];
        let (shown, cut) = run(&p, 1, 10, 1 << 20, &lines);
        assert_eq!(
            shown,
            [" b", "*ERR 1", " c", "*ERR 2", " d", " g", "*ERR 3"]
        );
        assert!(!cut);
    }

    #[test]
    fn only_the_newest_matches_are_kept_and_the_cut_is_said() {
        let p = Pattern::new("m", false).unwrap();
        let lines: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let (shown, cut) = run(&p, 0, 3, 1 << 20, &refs);
        assert_eq!(shown, ["*m997", "*m998", "*m999"]);
        assert!(cut);
        // The byte bound holds as well as the count.
        let (shown, cut) = run(&p, 0, 1000, 10, &refs);
        assert_eq!(shown, ["*m998", "*m999"]);
        assert!(cut);
    }

    #[test]
    fn a_dropped_match_takes_its_leading_context_with_it() {
        let p = Pattern::new("M", false).unwrap();
        let lines = ["x1", "M1", "x2", "x3", "x4", "M2", "x5"];
        let (shown, cut) = run(&p, 1, 1, 1 << 20, &lines);
        assert_eq!(shown, [" x4", "*M2", " x5"]);
        assert!(cut);
    }

    #[test]
    fn no_match_holds_nothing() {
        let p = Pattern::new("zzz", false).unwrap();
        let lines: Vec<String> = (0..10_000).map(|i| format!("line {i}")).collect();
        let mut s = Search::new(&p, 10, 100, 1 << 20);
        for l in &lines {
            s.push(l.as_bytes());
        }
        assert!(s.before.len() <= 10);
        let (found, cut) = s.finish();
        assert!(found.is_empty() && !cut);
    }
}
