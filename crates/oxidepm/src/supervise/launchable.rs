//! What can be known of an app's start before its fork: the PATH it runs
//! with, and whether its working directory and program are there. A
//! request that starts several apps checks every one of them first, so
//! that it can refuse the whole request before anything changes; and a
//! start that fails anyway is explained by its real cause (a missing
//! directory, or the interpreter a script's `#!` line names) rather than
//! by the errno the exec returned.

pub use super::program::app_path;
use oxidepm_proto::AppSpec;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why an app cannot be started, found before its fork.
#[derive(Debug, thiserror::Error)]
pub enum Unlaunchable {
    /// Its working directory is missing.
    #[error("working directory {dir:?} does not exist; create it or change the app's cwd")]
    NoCwd {
        /// The directory.
        dir: String,
    },
    /// Its working directory is a file, or cannot be looked at.
    #[error("working directory {dir:?} is not a directory; change the app's cwd")]
    CwdNotDirectory {
        /// The directory.
        dir: String,
    },
    /// Its user may not enter its working directory (entered as the
    /// app's user, as systemd's `WorkingDirectory=`).
    #[error("user {user:?} may not enter working directory {dir:?} (it is entered as the app's user); give that user access to it, or change the app's cwd")]
    CwdDenied {
        /// The directory.
        dir: String,
        /// The user the app runs as.
        user: String,
    },
    /// A program without a slash found in no directory of the PATH.
    #[error("program {program:?} is not on the PATH of user {user:?} ({path}); install it there, give its full path, or set PATH in the app's env")]
    NotOnPath {
        /// The program.
        program: String,
        /// The user the app runs as.
        user: String,
        /// The PATH the app gets.
        path: String,
    },
    /// A program given by its path that is not there.
    #[error("program {program:?} does not exist")]
    NoProgram {
        /// The program, as the app's directory makes it.
        program: String,
    },
    /// A program that is found but has no execute bit (or is a directory).
    #[error("program {program:?} is not executable; make it so (chmod +x) or run it through an interpreter (--interpreter)")]
    NotExecutable {
        /// The program, as found.
        program: String,
    },
    /// The user it runs as cannot be had (missing, or the daemon is not
    /// root).
    #[error(transparent)]
    User(#[from] super::spawn::SpawnError),
}

/// Checks that the working directory of `spec` is one, and that its
/// program is found (on `path`, as the spawn looks it up) with an execute
/// bit. `user` is named in the message when the program is not found.
pub fn check(spec: &AppSpec, user: &str, path: &str) -> Result<(), Unlaunchable> {
    if let Some(dir) = &spec.cwd {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {
                if !super::spawn::user_may_enter(spec.user.as_deref(), dir) {
                    return Err(Unlaunchable::CwdDenied {
                        dir: dir.clone(),
                        user: user.to_string(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Unlaunchable::NoCwd { dir: dir.clone() })
            }
            _ => return Err(Unlaunchable::CwdNotDirectory { dir: dir.clone() }),
        }
    }
    let cwd = spec.cwd.as_deref().map(Path::new);
    let program = &spec.command;
    if program.contains('/') {
        let seen = seen_from(cwd, Path::new(program));
        return match std::fs::metadata(&seen) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
            Ok(_) => Err(Unlaunchable::NotExecutable {
                program: seen.display().to_string(),
            }),
            Err(_) => Err(Unlaunchable::NoProgram {
                program: seen.display().to_string(),
            }),
        };
    }
    // As the spawn resolves it: the first file with an execute bit wins;
    // a file found only without one is reported as such.
    let mut found_unrunnable = None;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let seen = seen_from(cwd, &Path::new(dir).join(program));
        match std::fs::metadata(&seen) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(()),
            Ok(m) if m.is_file() => {
                found_unrunnable.get_or_insert(seen);
            }
            _ => {}
        }
    }
    Err(match found_unrunnable {
        Some(p) => Unlaunchable::NotExecutable {
            program: p.display().to_string(),
        },
        None => Unlaunchable::NotOnPath {
            program: program.clone(),
            user: user.to_string(),
            path: path.to_string(),
        },
    })
}

/// `p` as the child will see it: a relative path is taken from `cwd`.
fn seen_from(cwd: Option<&Path>, p: &Path) -> PathBuf {
    match cwd {
        Some(c) if p.is_relative() => c.join(p),
        _ => p.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, cwd: &Path) -> AppSpec {
        let mut s = AppSpec::new("a", command, vec![]);
        s.cwd = Some(cwd.display().to_string());
        s
    }

    #[test]
    fn causes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let gone = d.join("gone");
        let e = check(&spec("sh", &gone), "u", "/usr/bin:/bin").unwrap_err();
        assert!(matches!(e, Unlaunchable::NoCwd { .. }), "{e}");
        let e = check(&spec("no-such-prog-x", d), "www", "/usr/bin:/bin").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"www\"") && text.contains("/usr/bin:/bin"),
            "{text}"
        );
        std::fs::write(d.join("plain"), "x").unwrap();
        let e = check(&spec("./plain", d), "u", "/usr/bin").unwrap_err();
        assert!(matches!(e, Unlaunchable::NotExecutable { .. }), "{e}");
        let e = check(&spec("./none", d), "u", "/usr/bin").unwrap_err();
        assert!(matches!(e, Unlaunchable::NoProgram { .. }), "{e}");
        check(&spec("sh", d), "u", "/usr/bin:/bin").unwrap();
    }
}
