//! supervisord's value syntax: `%(name)s` expansions (Python's `%`
//! formatting with a dictionary) and `environment=KEY="val",KEY2=val2`.

use std::collections::BTreeMap;

/// A value an expansion can take: `process_num` is a number, the rest text.
#[derive(Debug, Clone)]
pub(super) enum Var {
    /// Text (`%(program_name)s`).
    Text(String),
    /// A number (`%(process_num)02d`).
    Number(u64),
}

/// The names a value may expand, besides `ENV_X` from the environment.
pub(super) struct Vars<'a> {
    /// `here`, `program_name`, `process_num`, `group_name`, ...
    pub names: BTreeMap<&'static str, Var>,
    /// Where `%(ENV_X)s` is looked up (the CLI's environment).
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Result<Var, String> {
        if let Some(var) = self.names.get(name) {
            return Ok(var.clone());
        }
        if let Some(variable) = name.strip_prefix("ENV_") {
            return (self.env)(variable).map(Var::Text).ok_or_else(|| {
                format!(
                    "%({name})s: {variable} is not set in the environment; \
                     export {variable} before running oxidepm, or write the value instead"
                )
            });
        }
        let mut known: Vec<&str> = self.names.keys().copied().collect();
        known.push("ENV_<variable>");
        Err(format!(
            "%({name}): unknown name {name:?}; supervisord knows {}",
            known.join(", ")
        ))
    }
}

/// The longest value an expansion may produce: a short value must not make
/// the CLI allocate gigabytes (a width of `%(process_num)0999999999d`, a big
/// variable expanded many times).
pub(super) const MAX_EXPANDED: usize = 1 << 20;

/// Expands every `%(name)<format>` and `%%` of `value`.
pub(super) fn expand(value: &str, vars: &Vars) -> Result<String, String> {
    let too_long = || {
        format!(
            "the value would be longer than {} KiB once expanded; write a shorter width or value",
            MAX_EXPANDED >> 10
        )
    };
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('%') {
        if out.len() > MAX_EXPANDED {
            return Err(too_long());
        }
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('%') {
            out.push('%');
            rest = tail;
            continue;
        }
        let Some(inner) = after.strip_prefix('(') else {
            return Err(format!(
                "a lone % in {value:?}; write %% for a percent sign, or %(name)s for an expansion"
            ));
        };
        let Some(close) = inner.find(')') else {
            return Err(format!("%( without a closing ) in {value:?}"));
        };
        let name = &inner[..close];
        let spec = &inner[close + 1..];
        // Flags, width, precision, then the conversion letter.
        let flags_end = spec
            .find(|c: char| !matches!(c, '-' | '0' | '+' | ' ' | '#'))
            .unwrap_or(spec.len());
        let width_end = spec[flags_end..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(spec.len(), |i| flags_end + i);
        let Some(conversion) = spec[width_end..].chars().next() else {
            return Err(format!(
                "%({name}) has no conversion letter in {value:?}; write %({name})s"
            ));
        };
        let flags = &spec[..flags_end];
        let width = match spec[flags_end..width_end].parse::<usize>() {
            Ok(w) if w <= MAX_EXPANDED => w,
            Ok(_) => return Err(too_long()),
            // Too many digits for a number: far too wide.
            Err(_) if width_end > flags_end => return Err(too_long()),
            Err(_) => 0,
        };
        let var = vars.get(name)?;
        let text = match (conversion, var) {
            ('s' | 'r', Var::Text(t)) => t,
            ('s' | 'r' | 'd' | 'i' | 'u', Var::Number(n)) => n.to_string(),
            ('d' | 'i' | 'u', Var::Text(t)) => match t.parse::<i64>() {
                Ok(n) => n.to_string(),
                Err(_) => {
                    return Err(format!(
                    "%({name}){conversion} needs a number, and {name} is {t:?}; write %({name})s"
                ))
                }
            },
            (c, _) => {
                return Err(format!(
                    "%({name}){c}: unsupported conversion {c:?}; use s or d"
                ))
            }
        };
        let pad = width.saturating_sub(text.chars().count());
        if flags.contains('-') {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if flags.contains('0') && conversion != 's' {
            let (sign, digits) = match text.strip_prefix('-') {
                Some(d) => ("-", d),
                None => ("", text.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
        rest = &spec[width_end + conversion.len_utf8()..];
    }
    out.push_str(rest);
    if out.len() > MAX_EXPANDED {
        return Err(too_long());
    }
    Ok(out)
}

/// Parses `KEY="val",KEY2=val2`: commas separate pairs, a value in double
/// or single quotes may hold commas, `=` and blanks; an unquoted one runs
/// to the next comma, blanks around it trimmed.
pub(super) fn environment(value: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && *c != ',') {
            key.push(c);
        }
        let key = key.trim().to_string();
        if chars.next() != Some('=') {
            return Err(format!(
                "expected KEY=value after {:?} in environment; separate pairs with commas",
                pairs
                    .last()
                    .map(|(k, _): &(String, String)| k.as_str())
                    .unwrap_or("the start"),
            ));
        }
        super::super::text::check_env_key(&key)?;
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut val = String::new();
        match chars.peek().copied() {
            Some(quote @ ('"' | '\'')) => {
                chars.next();
                loop {
                    match chars.next() {
                        Some(c) if c == quote => break,
                        Some(c) => val.push(c),
                        None => {
                            return Err(format!(
                                "the value of {key} in environment has no closing {quote}"
                            ))
                        }
                    }
                }
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                if chars.peek().is_some_and(|c| *c != ',') {
                    return Err(format!(
                        "unexpected text after the closing quote of {key} in environment; \
                         separate pairs with commas"
                    ));
                }
            }
            _ => {
                while let Some(c) = chars.next_if(|c| *c != ',') {
                    val.push(c);
                }
                val = val.trim().to_string();
            }
        }
        pairs.push((key, val));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(env: &dyn Fn(&str) -> Option<String>) -> Vars<'_> {
        Vars {
            names: BTreeMap::from([
                ("program_name", Var::Text("worker".into())),
                ("process_num", Var::Number(3)),
                ("here", Var::Text("/etc/sv".into())),
            ]),
            env,
        }
    }

    #[test]
    fn expansions_format_like_python() {
        let env = |k: &str| (k == "PATH").then(|| "/usr/bin".to_string());
        let v = vars(&env);
        let e = |s| expand(s, &v).unwrap();
        assert_eq!(
            e("%(program_name)s_%(process_num)02d"),
            "worker_03",
            "supervisord's usual process_name"
        );
        assert_eq!(e("%(here)s/../run %(process_num)d"), "/etc/sv/../run 3");
        assert_eq!(e("/opt/bin:%(ENV_PATH)s"), "/opt/bin:/usr/bin");
        assert_eq!(
            e("100%% [%(process_num)3d] [%(process_num)-3d]"),
            "100% [  3] [3  ]"
        );
        for (bad, says) in [
            ("%(ENV_NOPE)s", "NOPE is not set"),
            ("%(nope)s", "unknown name \"nope\""),
            ("50%", "lone %"),
            ("%(here", "closing )"),
            ("%(here)", "no conversion"),
            ("%(program_name)d", "needs a number"),
            ("%(here)x", "unsupported conversion"),
        ] {
            let err = expand(bad, &v).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn a_short_value_cannot_expand_to_gigabytes() {
        let big = "x".repeat(1 << 20);
        let env = |_: &str| Some(big.clone());
        let v = vars(&env);
        // A width of 99 GB, and a 1 MiB variable expanded many times over.
        for bad in [
            "%(process_num)099999999999d".to_string(),
            "%(program_name)99999999999999999999999s".to_string(),
            "%(ENV_BIG)s".repeat(64),
        ] {
            let err = expand(&bad, &v).unwrap_err();
            assert!(err.contains("longer than"), "{err}");
        }
        assert_eq!(expand("%(process_num)04d", &v).unwrap(), "0003");
    }

    #[test]
    fn environment_pairs() {
        let pairs = environment("A=\"x, y=z\",B=plain , C='it''s',\n  D=/usr/bin:/bin, E=\"\"");
        assert!(pairs.is_err(), "two quoted strings are not one value");
        let pairs =
            environment("A=\"x, y=z\",B=plain , C='q \"', D=/usr/bin:/bin,\n E=\"\"").unwrap();
        let want = [
            ("A", "x, y=z"),
            ("B", "plain"),
            ("C", "q \""),
            ("D", "/usr/bin:/bin"),
            ("E", ""),
        ];
        let got: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, want);
        for (bad, says) in [
            ("A", "expected KEY=value"),
            ("A=1,B", "expected KEY=value after \"A\""),
            ("1A=x", "invalid variable name"),
            ("A=\"open", "no closing"),
        ] {
            let err = environment(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
