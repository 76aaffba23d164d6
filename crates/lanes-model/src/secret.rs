//! Secrets: lane passwords (256 random bits each, in clear only in
//! `$OXIDEPM_HOME/secrets/`, mode 0700, files 0600, the daemon's uid) and
//! tokens. One rule reads a secret file, whoever wrote it: its first line
//! without the line end; an empty secret is an error, as it would let
//! anyone in.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A password or token. Neither `Debug` nor `Display` shows it, so that it
/// cannot end up in a log by accident; [`Secret::expose`] is the way to it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// Why a secret file cannot be used.
#[derive(Debug)]
pub enum SecretError {
    /// The file cannot be read.
    Read(PathBuf, std::io::Error),
    /// Its first line is empty.
    Empty(PathBuf),
    /// It is not UTF-8 text.
    NotText(PathBuf),
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            SecretError::Empty(p) => write!(f, "{} is empty", p.display()),
            SecretError::NotText(p) => write!(f, "{} is not UTF-8 text", p.display()),
        }
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// A secret held in memory (made here, or a fixed one in a test).
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// Reads the secret file `path`: its first line, without the CR/LF
    /// that ends it.
    pub fn read(path: &Path) -> Result<Secret, SecretError> {
        let bytes = std::fs::read(path).map_err(|e| SecretError::Read(path.to_path_buf(), e))?;
        let mut line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
        while let Some(rest) = line.strip_suffix(b"\r") {
            line = rest;
        }
        if line.is_empty() {
            return Err(SecretError::Empty(path.to_path_buf()));
        }
        let text =
            std::str::from_utf8(line).map_err(|_| SecretError::NotText(path.to_path_buf()))?;
        Ok(Secret(text.to_string()))
    }

    /// The secret itself, to hand to what checks it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The secrets directory, created 0700 (and tightened if it was wider).
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Path of the secret `name` (an ACL user's password is named after the
/// user).
pub fn path(dir: &Path, name: impl fmt::Display) -> PathBuf {
    dir.join(name.to_string())
}

/// The secret `name`, made (and stored) on first use.
pub fn ensure(dir: &Path, name: impl fmt::Display) -> std::io::Result<Secret> {
    let user = name.to_string();
    let p = path(dir, &user);
    if let Ok(s) = Secret::read(&p) {
        if s.expose().len() == 64 {
            return Ok(s);
        }
    }
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let pw: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{user}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(pw.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &p)?;
    Ok(Secret(pw))
}

/// Forgets the secret `name`.
pub fn remove(dir: &Path, name: impl fmt::Display) {
    let _ = std::fs::remove_file(path(dir, name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_private_and_stable() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("secrets");
        ensure_dir(&dir).unwrap();
        let a = ensure(&dir, "agent_a").unwrap();
        assert_eq!(a.expose().len(), 64);
        assert_eq!(ensure(&dir, "agent_a").unwrap(), a);
        assert_ne!(ensure(&dir, "agent_b").unwrap(), a);
        let mode = std::fs::metadata(path(&dir, "agent_a"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn reading_takes_the_first_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("s");
        for (text, want) in [
            ("pw", "pw"),
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            ("pw\nsecond line\n", "pw"),
            (" spaced pw \n", " spaced pw "),
        ] {
            std::fs::write(&f, text).unwrap();
            assert_eq!(Secret::read(&f).unwrap().expose(), want, "{text:?}");
        }
        for empty in ["", "\n", "\r\n", "\nafter an empty line"] {
            std::fs::write(&f, empty).unwrap();
            let e = Secret::read(&f).unwrap_err();
            assert_eq!(e.to_string(), format!("{} is empty", f.display()));
        }
        std::fs::write(&f, b"\xff\xfe").unwrap();
        assert!(matches!(Secret::read(&f), Err(SecretError::NotText(_))));
        let e = Secret::read(&d.path().join("missing")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");
    }

    #[test]
    fn never_shown() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s} {s:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }
}
