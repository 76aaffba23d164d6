//! A gateway message as an [`Inbound`] for the publisher, within bounds.
//!
//! Fields of the inbox entry: `channel` (the channel or thread id; a thread
//! is a channel of its own for routing, a `guild` route takes every channel
//! and thread of its server), `guild` (absent for a direct message),
//! `sender` (the author's user name, at most 256 bytes), `sender_id` (the author's id: the name
//! can change, the id cannot), `text` (cut at `max_text_bytes` on a
//! character boundary, with `truncated = true`), `external_id` (the message
//! id), `attachments` (one URL a line, at most `max_attachments`, each at
//! most 2 KiB) and `reply_to` (the id of the message it answers, when it
//! does).

use crate::message::Inbound;
use oxidepm_lanes::bridge_config::DiscordConfig;
use twilight_model::channel::Message;

/// The longest attachment URL kept (Discord's are far shorter).
const MAX_URL_BYTES: usize = 2048;
/// The most bytes of the author's name kept (Discord's are at most 32
/// characters; a gateway proxy could send anything).
const MAX_NAME_BYTES: usize = 256;

/// Whether a message is to be taken in: not the bot's own, and not another
/// bot's when `ignore_bots` (two bots answering each other would never
/// stop).
pub fn wanted(m: &Message, own_id: Option<u64>, cfg: &DiscordConfig) -> bool {
    if own_id == Some(m.author.id.get()) {
        return false;
    }
    !(cfg.settings.ignore_bots && m.author.bot)
}

/// The message as the publisher takes it.
pub fn inbound(m: &Message, cfg: &DiscordConfig) -> Inbound {
    let (text, truncated) = cut(&m.content, cfg.settings.max_text_bytes);
    let mut extra = vec![("sender_id".to_string(), m.author.id.to_string())];
    if truncated {
        extra.push(("truncated".into(), "true".into()));
    }
    let urls: Vec<&str> = m
        .attachments
        .iter()
        .map(|a| a.url.as_str())
        .filter(|u| u.len() <= MAX_URL_BYTES && !u.contains('\n'))
        .take(cfg.settings.max_attachments)
        .collect();
    if !urls.is_empty() {
        extra.push(("attachments".into(), urls.join("\n")));
    }
    if let Some(r) = m.reference.as_ref().and_then(|r| r.message_id) {
        extra.push(("reply_to".into(), r.to_string()));
    }
    Inbound {
        source: super::NAME.into(),
        channel: m.channel_id.to_string(),
        guild: m.guild_id.map(|g| g.to_string()),
        address: None,
        sender: cut(&m.author.name, MAX_NAME_BYTES).0.to_string(),
        text: text.to_string(),
        external_id: Some(m.id.to_string()),
        extra,
    }
}

/// `s` cut to at most `max` bytes on a character boundary, and whether it
/// was cut.
fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(cut("héllo", 10), ("héllo", false));
        assert_eq!(cut("héllo", 2), ("h", true));
        assert_eq!(cut("héllo", 3), ("hé", true));
    }
}
