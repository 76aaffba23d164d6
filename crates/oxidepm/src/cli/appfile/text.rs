//! Small text formats found inside app files: sizes, durations, shell-like
//! argument strings and env files.

use std::collections::BTreeMap;

/// Parses "200M", "1G", "512K", "1024" (bytes) -> bytes.
///
/// Units are binary (K = 1024), as in pm2's `max_memory_restart`, and are
/// case-insensitive; "MB" and "MiB" mean the same as "M".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let hint = "use a number of bytes or a number with a unit, like \"512K\", \"200M\", \"1G\"";
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("invalid size {s:?}; {hint}")),
    };
    if number.is_empty() {
        return Err(format!("invalid size {s:?}; {hint}"));
    }
    let too_large = || format!("size {s:?} is too large");
    if number.contains('.') {
        let value: f64 = number
            .parse()
            .map_err(|_| format!("invalid size {s:?}; {hint}"))?;
        let bytes = value * multiplier as f64;
        if bytes.fract() != 0.0 && multiplier == 1 {
            return Err(format!(
                "invalid size {s:?}: a number of bytes must be whole"
            ));
        }
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(too_large());
        }
        Ok(bytes as u64)
    } else {
        let value: u64 = number.parse().map_err(|_| too_large())?;
        value.checked_mul(multiplier).ok_or_else(too_large)
    }
}

/// Parses "5s", "500ms", "2m" (humantime) or a bare number of milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map_err(|_| format!("duration {s:?} is too large"));
    }
    let duration = humantime::parse_duration(t).map_err(|_| {
        format!(
            "invalid duration {s:?}; use a number of milliseconds or a number with a unit, \
             like \"500ms\", \"5s\", \"2m\", \"1h\""
        )
    })?;
    if duration.is_zero() {
        return Ok(0);
    }
    match u64::try_from(duration.as_millis()) {
        Ok(0) => Err(format!(
            "duration {s:?} is shorter than a millisecond, the smallest unit here"
        )),
        Ok(ms) => Ok(ms),
        Err(_) => Err(format!("duration {s:?} is too large")),
    }
}

/// Splits a command-line string into words the way a POSIX shell does, minus
/// expansions: quotes and backslashes group, a `#` starting a word starts a
/// comment, nothing else is interpreted (`shell-words`).
pub(super) fn split_words(s: &str) -> Result<Vec<String>, String> {
    shell_words::split(s).map_err(|_| format!("{s:?} has an unclosed ' or \" quote; close it"))
}

/// Parses the text of an env file; an error carries its 1-based line number.
pub(super) fn parse_env(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut vars = BTreeMap::new();
    let mut next = 0;
    while next < lines.len() {
        let number = next + 1;
        let line = lines[next].trim();
        next += 1;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = match line.strip_prefix("export") {
            Some(rest) if rest.starts_with(char::is_whitespace) => rest.trim_start(),
            _ => line,
        };
        let Some((key, rest)) = line.split_once('=') else {
            return Err((number, format!("expected KEY=VALUE, found {line:?}")));
        };
        let key = key.trim_end();
        check_env_key(key).map_err(|e| (number, e))?;
        let rest = rest.trim_start();
        let value = match rest.chars().next() {
            Some(quote @ ('"' | '\'')) => {
                // A quoted value may go on over the following lines.
                let mut body = rest[1..].to_string();
                loop {
                    if let Some((value, after)) = unquote(&body, quote) {
                        let after = after.trim_start();
                        if !(after.is_empty() || after.starts_with('#')) {
                            return Err((
                                number,
                                format!("unexpected {after:?} after the closing quote of {key}"),
                            ));
                        }
                        break value;
                    }
                    let Some(more) = lines.get(next) else {
                        return Err((number, format!("the value of {key} has no closing {quote}")));
                    };
                    body.push('\n');
                    body.push_str(more);
                    next += 1;
                }
            }
            _ => strip_comment(rest).trim_end().to_string(),
        };
        vars.insert(key.to_string(), value);
    }
    Ok(vars)
}

/// A glob as supervisord's (Python's) and systemd's (glob(3)) read it:
/// `**` is `*`, one directory level, so that matching never walks a whole
/// tree or around a symlink loop.
pub(super) fn one_level_glob(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        if !(c == '*' && out.ends_with('*')) {
            out.push(c);
        }
    }
    out
}

/// Checks the name of an environment variable.
pub(super) fn check_env_key(key: &str) -> Result<(), String> {
    let mut bytes = key.bytes();
    let valid_start = matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_');
    if !valid_start || !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.')) {
        return Err(format!(
            "invalid variable name {key:?}; use letters, digits, '_' and '.', not starting with a digit"
        ));
    }
    Ok(())
}

/// Reads a quoted value from just after its opening quote: the value and what
/// follows the closing quote, or None when the quote is not closed.
fn unquote(body: &str, quote: char) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            return Some((value, &body[i + 1..]));
        }
        if c == '\\' && quote == '"' {
            match chars.next()?.1 {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'r' => value.push('\r'),
                c @ ('"' | '\\' | '$' | '\'') => value.push(c),
                c => {
                    value.push('\\');
                    value.push(c);
                }
            }
        } else {
            value.push(c);
        }
    }
    None
}

/// Cuts a ` # comment` off an unquoted value; a `#` inside a word is kept.
fn strip_comment(value: &str) -> &str {
    cut_comment(value, &['#'], true)
}

/// Cuts a comment that starts with one of `marks` after a blank (or, with
/// `at_start`, at the very start); a mark inside a word is kept.
pub(super) fn cut_comment<'a>(value: &'a str, marks: &[char], at_start: bool) -> &'a str {
    let mut previous_blank = at_start;
    for (i, c) in value.char_indices() {
        if marks.contains(&c) && previous_blank {
            return &value[..i];
        }
        previous_blank = c.is_whitespace();
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("200M"), Ok(200 << 20));
        assert_eq!(parse_size("200mb"), Ok(200 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size(" 2 GiB "), Ok(2 << 30));
        for bad in [
            "",
            "M",
            "12Q",
            "1.5",
            "-1M",
            "1..2M",
            "99999999999999999999",
            "20000000000000T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration_ms("1500"), Ok(1500));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("5s"), Ok(5000));
        assert_eq!(parse_duration_ms("2m"), Ok(120_000));
        assert_eq!(parse_duration_ms("1h 30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("0s"), Ok(0));
        for bad in ["", "5x", "-5s", "1.5", "s", "10us", "99999999999999999999"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn args_split_like_a_shell() {
        let split = |s| split_words(s).unwrap();
        assert_eq!(split("  a  b "), ["a", "b"]);
        assert_eq!(
            split(r#"--title "a \"b\" c" 'd e' f\ g """#),
            ["--title", "a \"b\" c", "d e", "f g", ""]
        );
        assert_eq!(split("$HOME *"), ["$HOME", "*"]);
        assert!(split("").is_empty());
        // A lone backslash at the end stands for itself, as in sh.
        assert_eq!(split("a \\"), ["a", "\\"]);
        assert!(split("a # comment").len() == 1);
        assert!(split_words("\"a").is_err());
    }

    #[test]
    fn env_file_lines() {
        for (bad, expected) in [
            ("1A=x", "invalid variable name"),
            ("A=\"open", "no closing"),
            ("A='x' y", "after the closing quote"),
            ("\n\nA B=1", "invalid variable name"),
        ] {
            let (_, message) = parse_env(bad).unwrap_err();
            assert!(message.contains(expected), "{bad}: {message}");
        }
        assert_eq!(parse_env("\n\nA B=1").unwrap_err().0, 3);
        let vars = parse_env("A=\"x\\\"y\" # c\r\nexport  B=2\nexported=3\nC=a#b\n").unwrap();
        assert_eq!(vars["A"], "x\"y");
        assert_eq!(vars["B"], "2");
        assert_eq!(vars["exported"], "3");
        assert_eq!(vars["C"], "a#b");
    }
}
