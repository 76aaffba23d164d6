//! The bridge's sources as daemon.toml and the bridge's file both write
//! them: one settings type per source, read from `[lanes.<source>]` and
//! written into the bridge's file as is, inside a section that adds only
//! what the daemon fills in (a secret's path) and the bridge's own knobs.
//!
//! * [`section`] — what every section has: its source's name, how it goes
//!   with `sources`, its check, and the one error a check gives;
//! * [`registry`] — what the daemon does with every source's settings
//!   ([`SourceSettings`]), and [`crate::with_sources`], the one list of
//!   them;
//! * [`webhook`] — HTTP in, HTTP out;
//! * [`email`] — Maildir in, SMTP out;
//! * [`discord`] — the bot's gateway in, REST out;
//! * [`consult`] — agents consulting each other (the rules and bounds of
//!   [`crate::consult`]).
//!
//! A new source is one module here (its settings, with
//! [`SourceSettings`] implemented, and its section, with
//! [`section::Section`]) and its line at the end of [`crate::with_sources`]:
//! the bridge's file and daemon.toml's `[lanes]` have its key from there.

pub mod consult;
pub mod discord;
pub mod email;
pub mod registry;
pub mod section;
pub mod webhook;

pub use discord::{DiscordConfig, DiscordConfigError, DiscordSettings, DiscordSettingsError};
pub use email::EmailSettings;
pub use registry::{SecretOrigin, SecretSpec, SourceSettings};
pub use section::{Presence, PresenceError, Section, SectionError};
pub use webhook::{
    WebhookConfig, WebhookConfigError, WebhookLimits, WebhookSettings, WebhookSettingsError,
};

/// Calls macro `$then` with every source daemon.toml has a table for, as
/// `name: SettingsType,` (a type with [`SourceSettings`]), in two groups
/// that keep where earlier releases wrote each key in `[lanes]` and in the
/// bridge's file: `early` (right after `default_agent`) and `late` (further
/// down). A new source is a line at the end of `late`.
#[macro_export]
macro_rules! with_sources {
    ($then:ident) => {
        $then! {
            early {
                webhook: $crate::sources::webhook::WebhookSettings,
                email: $crate::sources::email::EmailSettings,
            }
            late {
                discord: $crate::sources::discord::DiscordSettings,
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::section::Section;
    use super::SourceSettings;

    /// Each line of the list names its source the way its types do.
    macro_rules! names_agree {
        (
            early { $($early:ident : $early_ty:ty,)* }
            late { $($late:ident : $late_ty:ty,)* }
        ) => {
            $(
                assert_eq!(<$early_ty as SourceSettings>::NAME, stringify!($early));
                assert_eq!(<<$early_ty as SourceSettings>::Section as Section>::SOURCE, stringify!($early));
            )*
            $(
                assert_eq!(<$late_ty as SourceSettings>::NAME, stringify!($late));
                assert_eq!(<<$late_ty as SourceSettings>::Section as Section>::SOURCE, stringify!($late));
            )*
        };
    }

    #[test]
    fn a_source_has_one_name() {
        crate::with_sources!(names_agree);
    }
}
