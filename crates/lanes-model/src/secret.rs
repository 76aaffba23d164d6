//! Lane passwords: 256 random bits each, in clear only in
//! `$OXIDEPM_HOME/secrets/` (mode 0700, files 0600, the daemon's uid).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Path of the password file of ACL user `user`.
pub fn path(dir: &Path, user: &str) -> PathBuf {
    dir.join(user)
}

/// The password of `user`, made (and stored) on first use.
pub fn ensure(dir: &Path, user: &str) -> std::io::Result<String> {
    let p = path(dir, user);
    match std::fs::read_to_string(&p) {
        Ok(s) if s.trim().len() == 64 => return Ok(s.trim().to_string()),
        Ok(_) | Err(_) => {}
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
    Ok(pw)
}

/// Forgets the password of `user`.
pub fn remove(dir: &Path, user: &str) {
    let _ = std::fs::remove_file(path(dir, user));
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
        assert_eq!(a.len(), 64);
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
}
