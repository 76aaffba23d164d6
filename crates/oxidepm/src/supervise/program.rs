//! Where an app's program is looked for: the PATH it runs with, and the
//! interpreter a script's `#!` line names (what an exec's ENOENT means for
//! a script that is there). Shared by the checks made before a fork
//! (`launchable`) and the spawn itself.

use oxidepm_proto::AppSpec;
use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;

/// The PATH of an app that runs as another user and sets none: systemd's
/// default for `User=` services, directories every user can search (the
/// daemon's own PATH may hold directories only it can enter, such as
/// root's home).
pub const USER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

/// Whether `spec` runs Python: its program is `python`, `python3`,
/// `python3.12`, … or a script ending `.py`. Such an app gets
/// `PYTHONUNBUFFERED=1` unless it sets it, because Python block-buffers
/// stdout into a pipe and its first lines would reach the log only after
/// kilobytes of output (or never, for a quiet server).
pub fn runs_python(spec: &AppSpec) -> bool {
    let program = Path::new(&spec.command);
    if program.extension().is_some_and(|e| e == "py") {
        return true;
    }
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
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

    #[test]
    fn user_apps_get_a_path_they_can_search() {
        let mut s = AppSpec::new("a", "x", vec![]);
        assert_eq!(app_path(&s, true), USER_PATH);
        s.env.insert("PATH".into(), "/opt/bin".into());
        assert_eq!(app_path(&s, true), "/opt/bin");
    }

    #[test]
    fn python_apps_are_told_not_to_buffer_unless_they_say_otherwise() {
        let creds = crate::supervise::spawn::Creds {
            name: "u".into(),
            uid: nix::unistd::geteuid(),
            gid: nix::unistd::getegid(),
            groups: Vec::new(),
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        let unbuffered = |s: &AppSpec| {
            crate::supervise::spawn::app_env(s, &creds, &[])
                .into_iter()
                .find(|(k, _)| k == "PYTHONUNBUFFERED")
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        for program in ["python3", "/usr/bin/python3.11", "python", "./serve.py"] {
            let s = AppSpec::new("a", program, vec![]);
            assert!(runs_python(&s), "{program}");
            assert_eq!(unbuffered(&s).as_deref(), Some("1"), "{program}");
        }
        for program in ["node", "python3-config", "pythonista", "/opt/py"] {
            let s = AppSpec::new("a", program, vec![]);
            assert!(!runs_python(&s), "{program}");
            assert_eq!(unbuffered(&s), None, "{program}");
        }
        let mut s = AppSpec::new("a", "python3", vec![]);
        s.env.insert("PYTHONUNBUFFERED".into(), "".into());
        assert_eq!(unbuffered(&s).as_deref(), Some(""));
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
