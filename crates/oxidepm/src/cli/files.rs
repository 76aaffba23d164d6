//! `status`, `stop`, `restart` and `delete` of an app file: the apps it
//! defines.
//!
//! A target that is an existing file with an app file's extension
//! (`.toml`, `.yaml`, `.json`, `*.config.js`, `.conf`, `.service`) stands
//! for the apps that file defines, as in pm2; so a file wins over an app
//! of the same name (name that app by its id instead). A script such as
//! `app.js` is not an app file: nothing in it is run to find names.

use super::appfile::{self, Format, LoadOptions};
use super::LocalError;
use std::path::Path;

/// Whether `path` is an existing app file, not a script to run: the one
/// rule of [`Format::from_path`] (a `.js` file is one only when named
/// `*.config.js`, as pm2 decides), never a second copy of it.
fn is_app_file(path: &Path) -> bool {
    Format::from_path(path).is_some() && path.is_file()
}

/// The selector for `targets`: each app file replaced by the names of
/// its apps, everything else as given.
pub fn selector(targets: &[String]) -> Result<String, LocalError> {
    let mut out = Vec::new();
    for t in targets {
        let path = Path::new(t);
        if !is_app_file(path) {
            out.push(t.clone());
            continue;
        }
        let loaded = appfile::load_with(path, &LoadOptions::default())?;
        if loaded.apps.is_empty() {
            return Err(LocalError::EmptyFile { file: t.clone() });
        }
        out.extend(loaded.apps.into_iter().map(|a| a.name));
    }
    Ok(out.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_named_as_app_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, "").unwrap();
            p
        };
        for name in ["app.js", "ecosystem.js", "run.sh", "x.config.jsx"] {
            assert!(!is_app_file(&made(name)), "{name}");
        }
        for name in [
            "a.toml",
            "pm2.config.cjs",
            "ecosystem.config.js",
            "w.service",
        ] {
            assert!(is_app_file(&made(name)), "{name}");
        }
        // A FIFO is never opened: it stands for an app's name.
        let fifo = dir.path().join("f.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(!is_app_file(&fifo));
        assert!(!is_app_file(&dir.path().join("missing.toml")));
    }
}
