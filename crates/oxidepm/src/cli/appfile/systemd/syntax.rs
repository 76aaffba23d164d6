//! systemd's value syntax: words with its quoting and C escapes, `%`
//! specifiers, `$VAR` / `${VAR}` in command lines, time spans and sizes.

use std::collections::BTreeMap;

/// Splits a value into words as systemd does: blanks separate, double and
/// single quotes group, and C escapes (`\n`, `\t`, `\s`, `\x41`, `\101`,
/// `\\`, `\"`) are decoded in and out of quotes.
pub(super) fn words(value: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                in_word = true;
                word.push(escape(&mut chars, value)?);
            }
            '"' | '\'' if quote == Some(c) => quote = None,
            '"' | '\'' if quote.is_none() => {
                in_word = true;
                quote = Some(c);
            }
            c if c.is_whitespace() && quote.is_none() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("unclosed {q} in {value:?}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Decodes one C escape after its backslash.
fn escape(chars: &mut std::iter::Peekable<std::str::Chars>, value: &str) -> Result<char, String> {
    let bad = |what: &str| format!("invalid escape {what} in {value:?}");
    let digits = |chars: &mut std::iter::Peekable<std::str::Chars>, radix: u32, n: usize| {
        let text: String = (0..n).filter_map(|_| chars.next()).collect();
        u32::from_str_radix(&text, radix)
            .ok()
            .filter(|_| text.len() == n)
            .and_then(char::from_u32)
            .filter(|c| *c != '\0')
            .ok_or_else(|| bad(&format!("\\{text}")))
    };
    Ok(match chars.next() {
        Some('a') => '\u{7}',
        Some('b') => '\u{8}',
        Some('f') => '\u{c}',
        Some('n') => '\n',
        Some('r') => '\r',
        Some('t') => '\t',
        Some('v') => '\u{b}',
        Some('s') => ' ',
        Some(c @ ('\\' | '"' | '\'' | ' ' | '$' | ';')) => c,
        Some('x') => digits(chars, 16, 2)?,
        Some('u') => digits(chars, 16, 4)?,
        Some('U') => digits(chars, 16, 8)?,
        Some(c @ '0'..='7') => {
            let rest: String = (0..2).filter_map(|_| chars.next()).collect();
            let text = format!("{c}{rest}");
            u32::from_str_radix(&text, 8)
                .ok()
                .filter(|n| text.len() == 3 && *n != 0)
                .and_then(char::from_u32)
                .ok_or_else(|| bad(&format!("\\{text}")))?
        }
        Some(c) => return Err(bad(&format!("\\{c}"))),
        None => return Err(format!("{value:?} ends with a lone backslash")),
    })
}

/// What the `%` specifiers of a unit stand for.
pub(super) struct Specifiers {
    /// The unit's file name, `web@1.service` (`%n`).
    pub unit: String,
    /// The home directory of the user running oxidepm (`%h`).
    pub home: String,
    /// That user's name (`%u`).
    pub user: String,
    /// That user's uid (`%U`).
    pub uid: u32,
    /// The runtime directory (`%t`): `$XDG_RUNTIME_DIR`, else `/run`.
    pub runtime: String,
    /// The host name (`%H`).
    pub host: String,
}

impl Specifiers {
    /// Replaces every `%x` of `value`; an unknown one is an error.
    pub fn apply(&self, value: &str) -> Result<String, String> {
        let stem = self.unit.rsplit_once('.').map_or(&*self.unit, |(s, _)| s);
        let (prefix, instance) = match stem.split_once('@') {
            Some((p, i)) => (p, i),
            None => (stem, ""),
        };
        let mut out = String::with_capacity(value.len());
        let mut chars = value.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(s) = chars.next() else {
                return Err(format!(
                    "{value:?} ends with a lone %; write %% for a percent sign"
                ));
            };
            match s {
                '%' => out.push('%'),
                'n' => out.push_str(&self.unit),
                'N' => out.push_str(stem),
                'p' | 'P' => out.push_str(prefix),
                'i' | 'I' => out.push_str(instance),
                'j' | 'J' => out.push_str(prefix.rsplit('-').next().unwrap_or(prefix)),
                'h' => out.push_str(&self.home),
                'u' => out.push_str(&self.user),
                'U' => out.push_str(&self.uid.to_string()),
                't' => out.push_str(&self.runtime),
                'H' | 'l' => out.push_str(&self.host),
                'S' => out.push_str("/var/lib"),
                'C' => out.push_str("/var/cache"),
                'L' => out.push_str("/var/log"),
                'E' => out.push_str("/etc"),
                'T' => out.push_str("/tmp"),
                'V' => out.push_str("/var/tmp"),
                other => {
                    return Err(format!(
                        "specifier %{other} is not supported here; supported are %n %N %p %i %j \
                         %h %u %U %t %H %S %C %L %E %T %V and %%"
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// The longest command line an expansion may produce: a short line must not
/// make the CLI allocate gigabytes (a big variable named many times); the
/// kernel takes a few MiB of arguments at most anyway.
pub(super) const MAX_COMMAND_BYTES: usize = 1 << 20;

/// Expands `${NAME}` and `$NAME` in the words of a command line as systemd
/// does: a word that is exactly `$NAME` becomes the value's blank-separated
/// words, `${NAME}` is replaced inside a word, `$$` is a `$`. Names that
/// are not set expand to nothing and are returned, so that they can be said.
pub(super) fn expand_vars(
    words: Vec<String>,
    env: &BTreeMap<String, String>,
) -> Result<(Vec<String>, Vec<String>), String> {
    let too_long = || {
        format!(
            "the command would be longer than {} KiB once its variables are expanded;              name each variable fewer times or shorten it",
            MAX_COMMAND_BYTES >> 10
        )
    };
    let mut total = 0usize;
    let mut out = Vec::new();
    let mut unset = Vec::new();
    let mut lookup = |name: &str| -> String {
        match env.get(name) {
            Some(v) => v.clone(),
            None => {
                if !unset.iter().any(|u| u == name) {
                    unset.push(name.to_string());
                }
                String::new()
            }
        }
    };
    for word in words {
        if total > MAX_COMMAND_BYTES {
            return Err(too_long());
        }
        if let Some(name) = word.strip_prefix('$').filter(|n| is_name(n)) {
            let value = lookup(name);
            total += value.len();
            out.extend(value.split_whitespace().map(String::from));
            continue;
        }
        let mut expanded = String::new();
        let mut rest = word.as_str();
        while let Some(at) = rest.find('$') {
            if total + expanded.len() > MAX_COMMAND_BYTES {
                return Err(too_long());
            }
            expanded.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                expanded.push('$');
                rest = tail;
            } else if let Some((name, tail)) = after
                .strip_prefix('{')
                .and_then(|a| a.split_once('}'))
                .filter(|(n, _)| is_name(n))
            {
                expanded.push_str(&lookup(name));
                rest = tail;
            } else {
                expanded.push('$');
                rest = after;
            }
        }
        expanded.push_str(rest);
        total += expanded.len();
        out.push(expanded);
    }
    if total > MAX_COMMAND_BYTES {
        return Err(too_long());
    }
    Ok((out, unset))
}

fn is_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A time span in milliseconds: a bare number is seconds, as in systemd;
/// `infinity` is `None`.
pub(super) fn timespan_ms(value: &str) -> Result<Option<u64>, String> {
    let t = value.trim();
    if t == "infinity" {
        return Ok(None);
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .ok()
            .and_then(|s| s.checked_mul(1000))
            .map(Some)
            .ok_or_else(|| format!("time span {value:?} is too large"));
    }
    let duration = humantime::parse_duration(t).map_err(|_| {
        format!(
            "invalid time span {value:?}; use seconds or a number with a unit, like \
             \"90s\", \"500ms\", \"5min\", \"1h 30min\""
        )
    })?;
    u64::try_from(duration.as_millis())
        .map(Some)
        .map_err(|_| format!("time span {value:?} is too large"))
}

/// `MemoryMax=`: bytes with an optional K, M, G or T (base 1024);
/// `infinity` is `None`.
pub(super) fn memory(value: &str) -> Result<Option<u64>, String> {
    let t = value.trim();
    if t == "infinity" {
        return Ok(None);
    }
    if t.ends_with('%') || t.ends_with('‰') || t.ends_with('‱') {
        return Err(format!(
            "{t:?} is a share of the machine's memory; give a size instead, like \"512M\""
        ));
    }
    super::super::parse_size(t).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_split_as_systemd_does() {
        let w = |s| words(s).unwrap();
        assert_eq!(
            w(r#"/bin/app --title "a b" 'c "d"' e\sf \x41\101 "tab\there""#),
            [
                "/bin/app",
                "--title",
                "a b",
                "c \"d\"",
                "e f",
                "AA",
                "tab\there"
            ]
        );
        assert_eq!(w("  a   b  "), ["a", "b"]);
        assert_eq!(w(r#"--x="1 2""#), ["--x=1 2"]);
        for bad in [r#""open"#, r"a\q", r"a\x4", "a \\", r"\000"] {
            assert!(words(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specifiers() {
        let s = Specifiers {
            unit: "web@8080.service".into(),
            home: "/home/u".into(),
            user: "u".into(),
            uid: 1000,
            runtime: "/run/user/1000".into(),
            host: "box".into(),
        };
        assert_eq!(
            s.apply("%h/app %i %n %N %p %u %U %t/x 100%%").unwrap(),
            "/home/u/app 8080 web@8080.service web@8080 web u 1000 /run/user/1000/x 100%"
        );
        assert!(s.apply("%Z").unwrap_err().contains("%Z is not supported"));
        assert!(s.apply("50%").unwrap_err().contains("lone %"));
    }

    #[test]
    fn variables_expand_as_systemd_does() {
        let env = BTreeMap::from([
            ("OPTS".to_string(), "--a  --b=1".to_string()),
            ("PORT".to_string(), "8080".to_string()),
        ]);
        let words = [
            "/bin/app",
            "$OPTS",
            "--port=${PORT}",
            "$$HOME",
            "${NOPE}x",
            "$OPTS",
        ]
        .map(String::from)
        .to_vec();
        let (out, unset) = expand_vars(words, &env).unwrap();
        assert_eq!(
            out,
            [
                "/bin/app",
                "--a",
                "--b=1",
                "--port=8080",
                "$HOME",
                "x",
                "--a",
                "--b=1"
            ]
        );
        assert_eq!(unset, ["NOPE"]);
    }

    #[test]
    fn spans_and_sizes() {
        assert_eq!(timespan_ms("90"), Ok(Some(90_000)));
        assert_eq!(timespan_ms("500ms"), Ok(Some(500)));
        assert_eq!(timespan_ms("1min 30s"), Ok(Some(90_000)));
        assert_eq!(timespan_ms("infinity"), Ok(None));
        assert!(timespan_ms("soon").is_err());
        assert_eq!(memory("512M"), Ok(Some(512 << 20)));
        assert_eq!(memory("1G"), Ok(Some(1 << 30)));
        assert_eq!(memory("infinity"), Ok(None));
        assert!(memory("50%").unwrap_err().contains("share"));
    }
}
