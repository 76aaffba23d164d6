//! The sources' secrets (a `SecretSpec` of their settings' type in
//! `oxidepm_lanes::sources`), the same for every source.
//!
//! A secret lives in `secrets/<name>`, mode 0600, the daemon's own. It is
//! never in daemon.toml, the bridge's configuration, a log, `show`,
//! `lanes`, an event or an agent's environment: the daemon copies it to
//! `bridge/<name>` (the bridge's own, 0600), whose path is all the
//! bridge's configuration names. One the daemon makes (the webhook's
//! token) is made when missing; one the person writes (the discord bot
//! token) is checked first: a file others could have read is refused, and
//! the bridge does not run until it is fixed.

use super::settings::LanesSettings;
use oxidepm_lanes::sources::{SecretOrigin, SecretSpec};
use oxidepm_lanes::{Secret, SecretError};
use std::path::{Path, PathBuf};

/// Why a secret the person writes cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// No file.
    #[error("[lanes.{source_name}] is enabled but {} is missing: {how}", .path.display())]
    Missing {
        /// The source.
        source_name: &'static str,
        /// Where it should be.
        path: PathBuf,
        /// Where to get it and what to do with it.
        how: &'static str,
    },
    /// Not a plain file.
    #[error("{} is not a regular file; write {what} into a plain file there", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// Others could read or change it.
    #[error(transparent)]
    Exposed(#[from] super::private_file::Exposed),
    /// Cannot be read, or is empty.
    #[error(transparent)]
    Read(#[from] SecretError),
}

/// Makes every secret the daemon makes that is missing, whether or not
/// its source is configured (so that its token is there to give out).
pub fn ensure_made(secrets_dir: &Path) -> Result<(), (&'static str, std::io::Error)> {
    for (source, spec) in LanesSettings::source_secrets() {
        if spec.origin == SecretOrigin::Made {
            oxidepm_lanes::secret::ensure(secrets_dir, spec.name).map_err(|e| (source, e))?;
        }
    }
    Ok(())
}

/// Whether the bridge serves a source whose secret the person writes (and
/// may have just put right: a reload hands the bridge the file again).
pub fn given_served(settings: &LanesSettings) -> bool {
    let served = settings.served_tables();
    LanesSettings::source_secrets()
        .into_iter()
        .any(|(source, spec)| {
            matches!(spec.origin, SecretOrigin::Given { .. }) && served.contains(&source)
        })
}

/// Reads the secret `spec` of source `source`: one the daemon made as it
/// is, one the person writes refused when others could have read or
/// changed it.
pub fn read(
    secrets_dir: &Path,
    source: &'static str,
    spec: SecretSpec,
) -> Result<Secret, SecretFileError> {
    let path = secrets_dir.join(spec.name);
    let SecretOrigin::Given { what, how } = spec.origin else {
        return Ok(Secret::read(&path)?);
    };
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SecretFileError::Missing {
                source_name: source,
                path,
                how,
            })
        }
        Err(e) => return Err(SecretFileError::Read(SecretError::Read(path, e))),
    };
    if !meta.file_type().is_file() {
        return Err(SecretFileError::NotRegular { path, what });
    }
    super::private_file::check(&path, &meta)?;
    Ok(Secret::read(&path)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_lanes::sources::{DiscordSettings, SourceSettings};
    use std::os::unix::fs::PermissionsExt;

    fn read_token(dir: &Path) -> Result<Secret, SecretFileError> {
        read(dir, "discord", DiscordSettings::SECRET.unwrap())
    }

    #[test]
    fn a_token_others_can_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_token(d.path()),
            Err(SecretFileError::Missing { .. })
        ));
        let p = d.path().join("discord_token");
        std::fs::write(&p, "tok\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_token(d.path()).unwrap_err();
            assert!(
                matches!(
                    e,
                    SecretFileError::Exposed(super::super::private_file::Exposed::Mode { .. })
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
            Err(SecretFileError::NotRegular { .. })
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
