//! Text that apps control (their output, their command lines and
//! environments) made harmless for a person's terminal.
//!
//! A terminal obeys control sequences: an app that prints `ESC ] 52`
//! writes the reader's clipboard, `ESC ] 0` sets the window title, and
//! `\r` followed by `ESC [ 2K` erases the `app|out|` prefix to forge a line
//! from another app. When the CLI prints to a terminal, such characters
//! are shown escaped instead, as `journalctl` does; `--raw` and `--json`
//! keep them, and so does output to a pipe or file.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether a character is shown escaped: C0 controls but TAB, DEL, and
/// the C1 controls U+0080–U+009F (ESC is a C0 control).
fn is_escaped(c: char) -> bool {
    (c.is_control() && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
}

/// `text` with every control character but TAB written as an escape:
/// `\n`, `\r`, `\xNN` for other C0 controls and DEL (`\x1b` for ESC),
/// `\u{NN}` for C1 controls; a byte that is not UTF-8 becomes `\xNN`.
/// Borrowed when nothing needs escaping. Backslashes are left as they are.
pub fn escape_controls(text: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(text) {
        if !s.chars().any(is_escaped) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(text.len() + 16);
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                c if c < '\u{80}' && is_escaped(c) => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if is_escaped(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_untouched() {
        for s in ["", "hello", "tab\there", "ünïcödé ✓ 日本", "C:\\path\\x1b"] {
            assert!(matches!(escape_controls(s.as_bytes()), Cow::Borrowed(b) if b == s));
        }
    }

    #[test]
    fn terminal_attacks_are_shown_not_obeyed() {
        let cases: [(&[u8], &str); 6] = [
            // OSC 52: write the reader's clipboard.
            (b"\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),
            // OSC 0: set the window title, ended by ST (ESC \).
            (b"\x1b]0;pwned\x1b\\", "\\x1b]0;pwned\\x1b\\"),
            // Back to the start of the line and erase it: a forged prefix.
            (b"x\r\x1b[2Kweb|out| ok", "x\\r\\x1b[2Kweb|out| ok"),
            (b"a\nb\x00c\x7f", "a\\nb\\x00c\\x7f"),
            // C1 controls: CSI and OSC as single characters.
            ("\u{9b}2J \u{9d}0;t".as_bytes(), "\\u{9b}2J \\u{9d}0;t"),
            (b"\x08\x0b\x0c", "\\x08\\x0b\\x0c"),
        ];
        for (raw, shown) in cases {
            let got = escape_controls(raw);
            assert_eq!(got, shown);
            assert!(!got.chars().any(is_escaped), "{got:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_as_hex() {
        assert_eq!(escape_controls(b"ok \xff\xfe end"), "ok \\xff\\xfe end");
        // A lone C1 byte is not UTF-8: shown as a byte, not as U+009B.
        assert_eq!(escape_controls(b"\x9b2J"), "\\x9b2J");
        assert_eq!(escape_controls("é\u{85}".as_bytes()), "é\\u{85}");
    }
}
