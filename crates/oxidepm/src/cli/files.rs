//! `stop`, `restart` and `delete` of an app file: the apps it defines.
//!
//! A target that is an existing file with an app file's extension
//! (`.toml`, `.yaml`, `.json`, `*.config.js`, `.conf`, `.service`) stands
//! for the apps that file defines, as in pm2; so a file wins over an app
//! of the same name (name that app by its id instead). A script such as
//! `app.js` is not an app file: nothing in it is run to find names.

use super::appfile::{self, Format, LoadOptions};
use super::LocalError;
use std::path::Path;

/// Whether `path` is an existing app file, not a script to run.
fn is_app_file(path: &Path) -> bool {
    let Some(format) = Format::from_path(path) else {
        return false;
    };
    if !path.is_file() {
        return false;
    }
    match format {
        // Evaluating a script to learn its app names would run it: only
        // pm2's `*.config.js` files are app files.
        Format::EcosystemJs => path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            let n = n.to_ascii_lowercase();
            [".config.js", ".config.cjs", ".config.mjs"]
                .iter()
                .any(|s| n.ends_with(s))
        }),
        _ => true,
    }
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
