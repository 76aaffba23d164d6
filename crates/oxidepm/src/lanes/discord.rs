//! `[lanes.discord]`: the discord source's bot token (its settings are
//! `oxidepm_lanes::sources::DiscordSettings`, read as they are).
//!
//! The token is a file the person writes, `secrets/discord_token`, mode
//! 0600, the daemon's own. It is never in daemon.toml, the bridge's
//! configuration, a log, `show`, `lanes`, an event or an agent's
//! environment: the daemon checks the file and copies it to
//! `bridge/discord_token` (the bridge's own, 0600), whose path is all the
//! bridge's configuration names. A token others could have read is
//! refused, and the bridge does not run until it is fixed.

use oxidepm_lanes::{Secret, SecretError};
use std::path::{Path, PathBuf};

/// The name of the bot token among the secrets.
pub const DISCORD_TOKEN: &str = "discord_token";

/// Why the bot token cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// No token file.
    #[error("[lanes.discord] is enabled but {} is missing: write the bot token there (from the developer portal: your application → Bot → Reset Token), then chmod 600 it", .0.display())]
    Missing(PathBuf),
    /// Not a plain file.
    #[error("{} is not a regular file; write the bot token into a plain file there", .0.display())]
    NotRegular(PathBuf),
    /// Others could read or change it.
    #[error(transparent)]
    Exposed(#[from] super::private_file::Exposed),
    /// Cannot be read, or is empty.
    #[error(transparent)]
    Read(#[from] SecretError),
}

/// Reads the bot token from `secrets_dir`, refusing a file others could
/// have read or changed.
pub fn read_token(secrets_dir: &Path) -> Result<Secret, TokenError> {
    let path = secrets_dir.join(DISCORD_TOKEN);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TokenError::Missing(path))
        }
        Err(e) => return Err(TokenError::Read(SecretError::Read(path, e))),
    };
    if !meta.file_type().is_file() {
        return Err(TokenError::NotRegular(path));
    }
    super::private_file::check(&path, &meta)?;
    Ok(Secret::read(&path)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_token_others_can_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(read_token(d.path()), Err(TokenError::Missing(_))));
        let p = d.path().join(DISCORD_TOKEN);
        std::fs::write(&p, "tok\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_token(d.path()).unwrap_err();
            assert!(
                matches!(
                    e,
                    TokenError::Exposed(super::super::private_file::Exposed::Mode { .. })
                ),
                "{mode:o}: {e}"
            );
            assert!(e.to_string().contains("chmod 600"), "{e}");
            assert!(!e.to_string().contains("tok\n"));
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(d.path()).unwrap().expose(), "tok");
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(matches!(
            read_token(d.path()),
            Err(TokenError::NotRegular(_))
        ));
    }

    #[test]
    fn settings_make_the_bridge_section() {
        use oxidepm_lanes::sources::{DiscordConfig, DiscordSettings};
        let s: DiscordSettings = toml::from_str(
            "enabled = true\ngateway_url = \"ws://127.0.0.1:9\"\nmax_attachments = 3",
        )
        .unwrap();
        let c = DiscordConfig::of(s.clone(), "/b/discord_token".into()).settings;
        assert_eq!(c.gateway_url.as_deref(), Some("ws://127.0.0.1:9"));
        assert_eq!(c.max_attachments, 3);
        assert!(c.ignore_bots);
        assert!(s.check().is_ok());
        let bad: DiscordSettings = toml::from_str("api_url = \"ftp://x\"").unwrap();
        assert!(bad.check().is_err());
        assert!(toml::from_str::<DiscordSettings>("token = \"x\"").is_err());
    }
}
