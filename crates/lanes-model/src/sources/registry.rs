//! What the daemon does with a source's settings, the same for every
//! source ([`SourceSettings`]): whether the bridge serves the source, the
//! secret it needs, the check against daemon.toml's other keys, and the
//! section of the bridge's file the settings become. The daemon's side
//! knows no source in particular: it walks [`crate::with_sources`].

use super::section::Section;
use std::error::Error;
use std::path::Path;

/// A source's settings as `[lanes.<source>]` of daemon.toml holds them.
pub trait SourceSettings: Clone {
    /// The source's name: its `[lanes.<name>]` table, its key in the
    /// bridge's file and its name in `sources`.
    const NAME: &'static str;
    /// The secret the bridge needs for the source, if it needs one.
    const SECRET: Option<SecretSpec> = None;
    /// The source's section of the bridge's file.
    type Section: Section;

    /// Whether the bridge serves the source with these settings (a switch
    /// in them may leave it off).
    fn served(&self) -> bool {
        true
    }

    /// Checks the settings as the daemon reads them, against its
    /// `sources`; the error names the keys and says what to do.
    fn check_settings(&self, _sources: &[String]) -> Result<(), Box<dyn Error + Send + Sync>> {
        Ok(())
    }

    /// The section of these settings, with its secret's file (when it has
    /// one) in `bridge_dir` under [`SecretSpec::name`].
    fn section(self, bridge_dir: &Path) -> Self::Section;
}

/// A secret a source needs, which the daemon keeps in `secrets/` and
/// copies into the bridge's folder, the bridge's own, 0600.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecretSpec {
    /// Its file's name, in `secrets/` and in the bridge's folder.
    pub name: &'static str,
    /// Who writes it.
    pub origin: SecretOrigin,
}

/// Who writes a source's secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretOrigin {
    /// The daemon makes it when it is missing (a token outsiders are
    /// given).
    Made,
    /// The person writes it (a token an outside service issued); the
    /// daemon refuses a file others could have read or changed.
    Given {
        /// What it is, as a sentence names it ("the bot token").
        what: &'static str,
        /// Where to get it and what to do with it, for the error that says
        /// it is missing.
        how: &'static str,
    },
}

impl SecretSpec {
    /// The secret's file in the bridge's folder.
    pub fn file(&self, bridge_dir: &Path) -> std::path::PathBuf {
        bridge_dir.join(self.name)
    }
}
