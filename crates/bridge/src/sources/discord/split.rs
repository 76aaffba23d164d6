//! Splitting an answer at Discord's limit of 2,000 characters per message.
//!
//! Discord counts characters (Unicode scalar values, as twilight's own
//! validation does), not bytes. A part ends at the last newline within the
//! limit, else at the last whitespace, else at the limit itself — always
//! on a character boundary. The parts put together are the text as it was;
//! parts that are whitespace only are left out, since Discord refuses an
//! empty message.

/// Characters one message may hold.
pub const MAX_CHARS: usize = 2000;

/// `text` in parts of at most `max` characters, in order.
pub fn split(text: &str, max: usize) -> Vec<&str> {
    let max = max.max(1);
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // Byte offset just past the `max`-th character, if there are more.
        let Some((limit, _)) = rest.char_indices().nth(max) else {
            parts.push(rest);
            break;
        };
        let head = &rest[..limit];
        let cut = head
            .rfind('\n')
            .or_else(|| head.rfind(char::is_whitespace))
            .map(|i| i + head[i..].chars().next().map_or(1, char::len_utf8))
            .filter(|&i| i > 0)
            .unwrap_or(limit);
        parts.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    parts.retain(|p| !p.trim().is_empty());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split("hello", MAX_CHARS), ["hello"]);
        assert!(split("", MAX_CHARS).is_empty());
        assert!(split("  \n ", MAX_CHARS).is_empty());
    }

    #[test]
    fn three_thousand_characters_make_two_parts_in_order() {
        let words: String = (0..600).map(|i| format!("w{:03} ", i % 1000)).collect();
        let text = &words[..3000];
        let parts = split(text, MAX_CHARS);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| chars(p) <= MAX_CHARS));
        assert_eq!(parts.concat(), text);
        assert!(
            parts[0].ends_with(' '),
            "cut at a space: {:?}",
            &parts[0][1990..]
        );
    }

    #[test]
    fn prefers_a_newline_to_a_space() {
        let text = format!("{}\n{} {}", "a".repeat(10), "b".repeat(5), "c".repeat(10));
        let parts = split(&text, 20);
        assert_eq!(parts[0], format!("{}\n", "a".repeat(10)));
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn never_cuts_inside_a_character() {
        // 3,000 four-byte characters with no space: cut at the limit.
        let text = "🦀".repeat(3000);
        let parts = split(&text, MAX_CHARS);
        assert_eq!(parts.len(), 2);
        assert_eq!(chars(parts[0]), 2000);
        assert_eq!(chars(parts[1]), 1000);
        // Exactly the limit is one part.
        assert_eq!(split(&"é".repeat(2000), MAX_CHARS).len(), 1);
        assert_eq!(split(&"é".repeat(2001), MAX_CHARS).len(), 2);
    }
}
