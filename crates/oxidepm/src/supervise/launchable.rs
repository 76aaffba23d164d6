//! What can be known of an app's start before its fork: the PATH it runs
//! with, and whether its working directory and program are there. A
//! request that starts several apps checks every one of them first, so
//! that it can refuse the whole request before anything changes; and a
//! start that fails anyway is explained by its real cause (a missing
//! directory, or the interpreter a script's `#!` line names) rather than
//! by the errno the exec returned.

use oxidepm_proto::AppSpec;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The PATH of an app that runs as another user and sets none: systemd's
/// default for `User=` services, directories every user can search (the
/// daemon's own PATH may hold directories only it can enter, such as
/// root's home).
pub const USER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

/// The PATH app `spec` runs with: its own; else [`USER_PATH`] when it runs
/// as another user than the daemon (`other_user`), as systemd's `User=`
/// does; else the daemon's.
pub fn app_path(spec: &AppSpec, other_user: bool) -> String {
    if let Some(p) = spec.env.get("PATH") {
        return p.clone();
    }
    if other_user {
        return USER_PATH.to_string();
    }
    std::env::var("PATH").unwrap_or_else(|_| USER_PATH.to_string())
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

/// The interpreter a script's `#!` line names, when that interpreter does
/// not exist: what an exec's ENOENT means for a script that is there.
pub fn missing_interpreter(program: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let interpreter = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())?;
    let interpreter = Path::new(<OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
        interpreter,
    ));
    (!interpreter.exists()).then(|| interpreter.display().to_string())
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

    #[test]
    fn user_apps_get_a_path_they_can_search() {
        let mut s = AppSpec::new("a", "x", vec![]);
        assert_eq!(app_path(&s, true), USER_PATH);
        s.env.insert("PATH".into(), "/opt/bin".into());
        assert_eq!(app_path(&s, true), "/opt/bin");
    }

    #[test]
    fn a_missing_shebang_interpreter_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        std::fs::write(&p, "#!/no/such/interp -x\necho\n").unwrap();
        assert_eq!(missing_interpreter(&p).as_deref(), Some("/no/such/interp"));
        std::fs::write(&p, "#! /bin/sh\necho\n").unwrap();
        assert_eq!(missing_interpreter(&p), None);
    }
}
