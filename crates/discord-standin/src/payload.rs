//! The JSON of what the stand-in sends: messages and READY, with the fields
//! twilight-model requires.

use serde_json::{json, Value};

/// The bot's user id.
pub const BOT_ID: u64 = 1_100_000_000_000_000_001;
/// The bot's user name.
pub const BOT_NAME: &str = "oxidepm-bot";
/// The guild of messages unless a test says otherwise.
pub const GUILD: u64 = 1_200_000_000_000_000_001;

/// A message someone writes.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The message id (`None`: the next one).
    pub id: Option<u64>,
    /// The channel (or thread).
    pub channel: u64,
    /// The guild; `None` for a direct message.
    pub guild: Option<u64>,
    /// The author's id.
    pub author_id: u64,
    /// The author's user name.
    pub author: String,
    /// Whether the author is a bot.
    pub bot: bool,
    /// The text.
    pub content: String,
    /// The message it answers.
    pub reply_to: Option<u64>,
    /// Attachment URLs.
    pub attachments: Vec<String>,
}

impl Msg {
    /// A person's message in `channel` of [`GUILD`].
    pub fn new(channel: u64, content: &str) -> Msg {
        Msg {
            id: None,
            channel,
            guild: Some(GUILD),
            author_id: 1_000_000_000_000_000_042,
            author: "someone".into(),
            bot: false,
            content: content.into(),
            reply_to: None,
            attachments: Vec::new(),
        }
    }
}

fn user(id: u64, name: &str, bot: bool) -> Value {
    json!({
        "id": id.to_string(), "username": name, "discriminator": "0",
        "avatar": null, "bot": bot, "global_name": name,
    })
}

/// A MESSAGE_CREATE's `d`.
pub fn message(id: u64, m: &Msg) -> Value {
    let attachments: Vec<Value> = m
        .attachments
        .iter()
        .enumerate()
        .map(|(i, url)| {
            json!({
                "id": (id + 1 + i as u64).to_string(), "filename": format!("file{i}"),
                "size": 1, "url": url, "proxy_url": url, "content_type": null,
            })
        })
        .collect();
    let mut d = json!({
        "id": id.to_string(),
        "channel_id": m.channel.to_string(),
        "author": user(m.author_id, &m.author, m.bot),
        "content": m.content,
        "timestamp": "2026-11-30T12:00:00.000000+00:00",
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": attachments,
        "embeds": [],
        "pinned": false,
        "type": if m.reply_to.is_some() { 19 } else { 0 },
    });
    if let Some(g) = m.guild {
        d["guild_id"] = json!(g.to_string());
    }
    if let Some(r) = m.reply_to {
        d["message_reference"] =
            json!({ "message_id": r.to_string(), "channel_id": m.channel.to_string() });
    }
    d
}

/// A message the bot posted, as the gateway and REST show it.
pub fn bot_message(id: u64, channel: u64, content: &str) -> Value {
    let mut m = Msg::new(channel, content);
    m.author_id = BOT_ID;
    m.author = BOT_NAME.into();
    m.bot = true;
    message(id, &m)
}

/// READY's `d`.
pub fn ready(session_id: &str, resume_url: &str) -> Value {
    json!({
        "v": 10,
        "user": {
            "id": BOT_ID.to_string(), "username": BOT_NAME, "discriminator": "0",
            "avatar": null, "bot": true, "mfa_enabled": false, "verified": true,
        },
        "guilds": [{ "id": GUILD.to_string(), "unavailable": true }],
        "session_id": session_id,
        "resume_gateway_url": resume_url,
        "shard": [0, 1],
        "application": { "id": "1100000000000000002", "flags": 0 },
    })
}
