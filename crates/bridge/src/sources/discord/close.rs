//! How the gateway closed a connection, and what the bridge does about
//! it (pure).
//!
//! twilight resumes by itself after a close Discord allows a resume for
//! (4000, 4007, 1001, a dropped connection, …) and ends its stream after a
//! fatal one (4004, 4010–4014): the stream is then never polled again (it
//! panics if it is), the session ends with a [`Refusal`] that says what
//! to do, and the bridge reports the source failed without trying again.
//!
//! A gateway that closes every connection before a session is up (one
//! that sends frames over the bound, or cannot be reached) would have
//! twilight reconnect at once, forever; [`pause_after`] spaces those
//! reconnections out.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;
use twilight_model::gateway::CloseCode;

/// The largest gateway message taken, in bytes. Discord's own are far
/// smaller (a large server's GUILD_CREATE, without members or presences,
/// is well under 1 MiB); a larger frame is refused when its header is
/// read, before its payload, and the connection is resumed.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// The longest pause between two reconnections of a gateway that keeps
/// closing before a session is up.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Whether a close code ends the session for good (twilight ends its
/// stream after it). An unknown code is not fatal, as for twilight.
pub fn is_fatal(code: u16) -> bool {
    CloseCode::try_from(code).is_ok_and(|c| !c.can_reconnect())
}

/// How long to wait before letting the shard reconnect, after the
/// `closes`-th close in a row without a session coming up in between (the
/// first is resumed at once: a RECONNECT, a lost connection).
pub fn pause_after(closes: u32) -> Duration {
    match closes {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(6)).min(MAX_PAUSE),
    }
}

/// The gateway ended the session for good: the close code and reason it
/// gave, and where the bridge reads the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The close code, if the gateway sent one.
    pub code: Option<u16>,
    /// The reason it gave with it.
    pub reason: String,
    /// The bridge's token file (`discord.token_file`).
    pub token_file: PathBuf,
}

/// What brings a stopped source back once the cause is fixed.
const RELOAD: &str =
    "then run `oxidepm reload-daemon-config` (a bridge run by hand: send it SIGHUP), \
     which starts the source again";

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(code) = self.code else {
            return write!(
                f,
                "the Discord gateway ended the session without a close code; \
                 check that gateway_url is Discord's gateway, {RELOAD}"
            );
        };
        let said = if self.reason.is_empty() {
            String::new()
        } else {
            format!(": {:?}", self.reason)
        };
        match code {
            4004 => write!(
                f,
                "Discord refused the bot token (close code 4004, authentication failed{said}): \
                 it was reset or revoked. Put the bot's current token (developer portal → your \
                 application → Bot → Reset Token) in $OXIDEPM_HOME/secrets/discord_token (the \
                 bridge reads its copy, {}), {RELOAD}",
                self.token_file.display()
            ),
            4010 => write!(
                f,
                "Discord refused the shard (close code 4010, invalid shard{said}): the bridge \
                 identifies as shard 0 of 1, which Discord's gateway always takes; check that \
                 gateway_url is Discord's gateway, {RELOAD}"
            ),
            4011 => write!(
                f,
                "Discord requires sharding for this bot (close code 4011{said}): it is in more \
                 servers than one gateway connection may serve (2,500), and the bridge runs one; \
                 use a bot in fewer servers, {RELOAD}"
            ),
            4012 => write!(
                f,
                "Discord refused the gateway API version (close code 4012{said}): this oxidepm \
                 speaks version 10; update oxidepm, or check that gateway_url is Discord's \
                 gateway, {RELOAD}"
            ),
            4013 => write!(
                f,
                "Discord refused the intents (close code 4013, invalid intents{said}): the bridge \
                 asks for GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES and MESSAGE_CONTENT; check that \
                 gateway_url is Discord's gateway, {RELOAD}"
            ),
            4014 => write!(
                f,
                "Discord refused a privileged intent (close code 4014, disallowed intents{said}): \
                 enable Message Content Intent for the bot (developer portal → your application → \
                 Bot → Privileged Gateway Intents), {RELOAD}"
            ),
            c => write!(
                f,
                "the Discord gateway ended the session for good (close code {c}{said}); {RELOAD}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fatal_codes_are_those_discord_documents_as_not_to_reconnect() {
        for c in [4004, 4010, 4011, 4012, 4013, 4014] {
            assert!(is_fatal(c), "{c}");
        }
        for c in [1000, 1001, 1006, 4000, 4001, 4007, 4008, 4009, 4999] {
            assert!(!is_fatal(c), "{c}");
        }
    }

    #[test]
    fn the_first_close_is_resumed_at_once_and_a_run_of_them_spaced_out() {
        assert_eq!(pause_after(1), Duration::ZERO);
        assert_eq!(pause_after(2), Duration::from_secs(1));
        assert_eq!(pause_after(3), Duration::from_secs(2));
        assert_eq!(pause_after(8), MAX_PAUSE);
        assert_eq!(pause_after(u32::MAX), MAX_PAUSE);
    }

    #[test]
    fn each_refusal_says_what_to_do() {
        let r = |code| {
            Refusal {
                code,
                reason: "Authentication failed.".into(),
                token_file: "/h/bridge/discord_token".into(),
            }
            .to_string()
        };
        let token = r(Some(4004));
        assert!(
            token.contains("refused the bot token (close code 4004"),
            "{token}"
        );
        assert!(token.contains("secrets/discord_token"), "{token}");
        assert!(token.contains("/h/bridge/discord_token"), "{token}");
        assert!(token.contains("reload-daemon-config"), "{token}");
        assert!(r(Some(4014)).contains("enable Message Content Intent"));
        assert!(r(Some(4011)).contains("sharding"));
        assert!(r(Some(4012)).contains("update oxidepm"));
        assert!(r(Some(4999)).contains("close code 4999"));
        assert!(r(None).contains("without a close code"));
    }
}
