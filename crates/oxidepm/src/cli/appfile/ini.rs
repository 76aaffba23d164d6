//! The two INI dialects of foreign app files: supervisord's (Python's
//! `configparser`, as supervisord sets it up) and systemd's unit files.
//! Both give sections of entries, each entry with the line it starts on, so
//! that every later error can name it.

/// Which rules a file is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// `key = value` or `key: value`, keys folded to lower case, indented
    /// lines continue a value, `;` or `#` after a blank start a comment.
    Supervisord,
    /// `Key=Value`, keys as written, a trailing backslash continues a line,
    /// comments only on lines of their own.
    Systemd,
}

/// One `[name]` section; a name given twice is one section, as both tools
/// read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Section {
    /// The name between the brackets.
    pub name: String,
    /// The 1-based line of its first header.
    pub line: usize,
    /// Its entries, in file order (a key may appear more than once).
    pub entries: Vec<Entry>,
}

/// One `key = value` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The key (lower case in supervisord's dialect).
    pub key: String,
    /// The value, trimmed, continuation lines joined.
    pub value: String,
    /// The 1-based line the entry starts on.
    pub line: usize,
}

impl Section {
    /// The last value given for `key` (later entries override earlier ones).
    pub fn last(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| e.key == key)
    }
}

/// Parses a whole file; an error carries its 1-based line.
pub(super) fn parse(text: &str, dialect: Dialect) -> Result<Vec<Section>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut sections: Vec<Section> = Vec::new();
    // Index of the section being filled, and whether the last entry may
    // still take continuation lines (supervisord only).
    let mut current: Option<usize> = None;
    let mut open_entry = false;
    let mut lines = text.lines().enumerate();
    while let Some((index, raw)) = lines.next() {
        let number = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            open_entry = false;
            continue;
        }
        if trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if dialect == Dialect::Supervisord && raw.starts_with(char::is_whitespace) && open_entry {
            let value = strip_inline_comment(trimmed);
            if let Some(entry) = current.and_then(|s| sections[s].entries.last_mut()) {
                if !entry.value.is_empty() {
                    entry.value.push('\n');
                }
                entry.value.push_str(value.trim());
            }
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let name = header(rest, trimmed, number, dialect)?;
            current = Some(match sections.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    sections.push(Section {
                        name: name.to_string(),
                        line: number,
                        entries: Vec::new(),
                    });
                    sections.len() - 1
                }
            });
            open_entry = false;
            continue;
        }
        let (key, value) = match dialect {
            Dialect::Supervisord => supervisord_entry(trimmed, number)?,
            Dialect::Systemd => systemd_entry(trimmed, number, &mut lines)?,
        };
        if key.is_empty() {
            return Err((number, format!("no key before the = in {trimmed:?}")));
        }
        let Some(section) = current else {
            return Err((
                number,
                format!("{key:?} is outside any section; put it under a [section] header"),
            ));
        };
        sections[section].entries.push(Entry {
            key,
            value,
            line: number,
        });
        open_entry = true;
    }
    Ok(sections)
}

/// The name of a section header, `rest` being what follows its `[`.
fn header<'t>(
    rest: &'t str,
    trimmed: &str,
    number: usize,
    dialect: Dialect,
) -> Result<&'t str, (usize, String)> {
    let Some(name) = rest.strip_suffix(']').or_else(|| {
        // configparser allows a comment after the header.
        (dialect == Dialect::Supervisord)
            .then(|| strip_inline_comment(rest).trim_end().strip_suffix(']'))
            .flatten()
    }) else {
        return Err((
            number,
            format!("section header {trimmed:?} has no closing ]"),
        ));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err((number, "empty section name []".into()));
    }
    Ok(name)
}

/// `key = value` or `key: value`, the key in lower case, an inline
/// comment cut.
fn supervisord_entry(trimmed: &str, number: usize) -> Result<(String, String), (usize, String)> {
    let Some(at) = trimmed.find(['=', ':']) else {
        return Err((
            number,
            format!("expected \"key = value\", found {trimmed:?}"),
        ));
    };
    let value = strip_inline_comment(&trimmed[at + 1..]).trim().to_string();
    Ok((trimmed[..at].trim().to_ascii_lowercase(), value))
}

/// `Key=Value`, with the lines a trailing backslash joins to it (taken
/// from `lines`).
fn systemd_entry<'t>(
    trimmed: &str,
    number: usize,
    lines: &mut impl Iterator<Item = (usize, &'t str)>,
) -> Result<(String, String), (usize, String)> {
    let mut joined = trimmed.to_string();
    // A trailing backslash joins the next line, with a space.
    while joined.ends_with('\\') {
        joined.pop();
        joined.push(' ');
        match lines.next() {
            Some((_, next)) if next.trim_start().starts_with(['#', ';']) => {}
            Some((_, next)) => joined.push_str(next.trim()),
            None => break,
        }
    }
    let Some((key, value)) = joined.split_once('=') else {
        return Err((number, format!("expected \"Key=Value\", found {trimmed:?}")));
    };
    Ok((key.trim().to_string(), value.trim().to_string()))
}

/// Cuts a `;` or `#` comment that follows a blank (supervisord's
/// `inline_comment_prefixes`); one inside a word is kept.
fn strip_inline_comment(value: &str) -> &str {
    super::text::cut_comment(value, &[';', '#'], false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supervisord_dialect() {
        let text = "; top comment\n[program:web]\ncommand = /bin/app --x ; comment\n\
                    Environment: A=1,\n  B=2\n# c\n[program:web]\nuser=a#b\n";
        let sections = parse(text, Dialect::Supervisord).unwrap();
        assert_eq!(sections.len(), 1);
        let web = &sections[0];
        assert_eq!(web.line, 2);
        assert_eq!(web.last("command").unwrap().value, "/bin/app --x");
        let env = web.last("environment").unwrap();
        assert_eq!((env.value.as_str(), env.line), ("A=1,\nB=2", 4));
        assert_eq!(web.last("user").unwrap().value, "a#b");
        assert_eq!(
            parse("x=1\n", Dialect::Supervisord).unwrap_err().0,
            1,
            "an entry before any section"
        );
        assert_eq!(parse("[a]\n\n[b\n", Dialect::Supervisord).unwrap_err().0, 3);
        assert_eq!(
            parse("[a]\nnothing here\n", Dialect::Supervisord)
                .unwrap_err()
                .0,
            2
        );
    }

    #[test]
    fn systemd_dialect() {
        let text = "[Service]\nExecStart=/bin/app \\\n  --flag ; not a comment\n\
                    Environment=A=1\nEnvironment=B=2\n  ; comment\n";
        let sections = parse(text, Dialect::Systemd).unwrap();
        let service = &sections[0];
        assert_eq!(
            service.last("ExecStart").unwrap().value,
            "/bin/app  --flag ; not a comment"
        );
        let env: Vec<_> = service
            .entries
            .iter()
            .filter(|e| e.key == "Environment")
            .map(|e| (e.value.as_str(), e.line))
            .collect();
        assert_eq!(env, [("A=1", 4), ("B=2", 5)]);
        assert_eq!(
            parse("[Service]\nExecStart\n", Dialect::Systemd)
                .unwrap_err()
                .0,
            2
        );
    }
}
