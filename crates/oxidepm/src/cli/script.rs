//! pm2's `start <script>`: which program runs a script, whether a file is
//! an app file or a script, and what an app started from the command line
//! is named.

use super::appfile::Format;
use std::path::Path;

/// Programs that run a script given as their first argument: `start --
/// node app.js` is named `app`, as `start app.js` is.
const INTERPRETERS: &[&str] = &[
    "node", "python", "python3", "sh", "bash", "deno", "bun", "ruby", "perl", "php",
];

/// Why a script cannot be started as given.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// TypeScript needs a program that compiles it.
    #[error("{script:?} is TypeScript, which node does not run by itself; say what runs it, e.g. --interpreter tsx (or ts-node, bun)")]
    TypeScript {
        /// The script.
        script: String,
    },
    /// No execute bit, and an extension that names no interpreter.
    #[error("{script:?} is not executable and its extension does not say what runs it; give the program with --interpreter <program> (or make it executable: chmod +x)")]
    Unknown {
        /// The script.
        script: String,
    },
    /// An app file (by its content) whose name says no format.
    #[error("{script:?} is not a script oxidepm can run: {advice}")]
    Misnamed {
        /// The file.
        script: String,
        /// What it looks like and how to name it.
        advice: String,
    },
    /// `--interpreter-args` for a script that runs itself.
    #[error("--interpreter-args is given but {script:?} runs without an interpreter; add --interpreter <program> or drop --interpreter-args")]
    ArgsWithoutInterpreter {
        /// The script.
        script: String,
    },
    /// The name taken from the script or program is not an app name.
    #[error("{reason}; give the app a name with --name <name>")]
    BadName {
        /// What is wrong with the name.
        reason: String,
    },
}

/// The interpreter pm2 picks by the script's extension; `None` when the
/// script runs itself (it is `executable` and has no known extension, or
/// is a shell script with a `#!` line).
pub fn interpreter_for(
    script: &Path,
    executable: bool,
) -> Result<Option<&'static str>, ScriptError> {
    let extension = script
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    let shown = || script.display().to_string();
    match extension.as_deref() {
        Some("js" | "mjs" | "cjs") => Ok(Some("node")),
        Some("py") => Ok(Some("python3")),
        // An executable shell script with a `#!` line runs itself: its
        // line may ask for bash, which `sh` is not on every system.
        Some("sh") if executable && has_shebang(script) => Ok(None),
        Some("sh") => Ok(Some("sh")),
        Some("ts" | "mts" | "cts" | "tsx") => Err(ScriptError::TypeScript { script: shown() }),
        _ if executable => Ok(None),
        _ => Err(match super::appfile::misnamed(script) {
            Some(advice) => ScriptError::Misnamed {
                script: shown(),
                advice,
            },
            None => ScriptError::Unknown { script: shown() },
        }),
    }
}

fn has_shebang(script: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    std::fs::File::open(script)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == b"#!")
}

/// The app-file format of `path`, when `start` reads it as one: a `.js`
/// file is a pm2 ecosystem file only when named like one (the rule of
/// [`Format::from_path`]), else a script.
pub fn app_file_format(path: &Path) -> Option<Format> {
    Format::from_path(path)
}

/// The name of an app started as `program args…`: after the script when
/// the program is a known interpreter and its first argument that is not
/// an option is a file (relative to `cwd`), else after the program.
pub fn name_for_command(program: &str, args: &[String], cwd: &Path) -> Result<String, ScriptError> {
    let base = Path::new(program)
        .file_name()
        .and_then(|b| b.to_str())
        .unwrap_or(program);
    if INTERPRETERS.contains(&base) {
        if let Some(first) = args.iter().find(|a| !a.starts_with('-')) {
            if cwd.join(first).is_file() {
                return name_from(first);
            }
        }
    }
    name_from(program)
}

/// An app name from a file's stem (`./app.js` → `app`), checked.
pub fn name_from(file: &str) -> Result<String, ScriptError> {
    let stem = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string());
    oxidepm_proto::check_app_name(&stem).map_err(|reason| ScriptError::BadName { reason })?;
    Ok(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misnamed_app_file_is_named_for_what_it_looks_like() {
        let dir = tempfile::tempdir().unwrap();
        let programs = dir.path().join("programs.txt");
        std::fs::write(&programs, "; workers\n[program:web]\ncommand=/bin/true\n").unwrap();
        let e = interpreter_for(&programs, false).unwrap_err().to_string();
        assert!(
            e.contains("a supervisord file") && e.contains("*.conf"),
            "{e}"
        );
        let e = crate::cli::appfile::load_with(&programs, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a supervisord file") && e.contains("*.conf"),
            "{e}"
        );
        let unit = dir.path().join("web.unit");
        std::fs::write(
            &unit,
            "[Unit]\nDescription=web\n\n[Service]\nExecStart=/bin/true\n",
        )
        .unwrap();
        let e = interpreter_for(&unit, false).unwrap_err().to_string();
        assert!(
            e.contains("a systemd unit") && e.contains("*.service"),
            "{e}"
        );
        // A file that looks like nothing keeps the advice about interpreters.
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "hello\n").unwrap();
        let e = interpreter_for(&notes, false).unwrap_err().to_string();
        assert!(e.contains("--interpreter"), "{e}");
    }

    #[test]
    fn interpreters_by_extension_as_pm2() {
        let pick = |f: &str, x: bool| interpreter_for(Path::new(f), x);
        assert_eq!(pick("app.js", false).unwrap(), Some("node"));
        assert_eq!(pick("./srv/app.mjs", true).unwrap(), Some("node"));
        assert_eq!(pick("a.cjs", false).unwrap(), Some("node"));
        assert_eq!(pick("worker.py", false).unwrap(), Some("python3"));
        assert_eq!(pick("run.sh", false).unwrap(), Some("sh"));
        let dir = tempfile::tempdir().unwrap();
        let bash = dir.path().join("b.sh");
        std::fs::write(&bash, "#!/bin/bash\necho\n").unwrap();
        assert_eq!(interpreter_for(&bash, true).unwrap(), None);
        assert_eq!(interpreter_for(&bash, false).unwrap(), Some("sh"));
        assert_eq!(pick("server", true).unwrap(), None);
        assert_eq!(pick("tool.rb", true).unwrap(), None);
        let ts = pick("app.ts", true).unwrap_err().to_string();
        assert!(ts.contains("--interpreter"), "{ts}");
        let plain = pick("notes.txt", false).unwrap_err().to_string();
        assert!(
            plain.contains("--interpreter") && plain.contains("notes.txt"),
            "{plain}"
        );
    }

    #[test]
    fn config_js_is_an_app_file_app_js_a_script() {
        let f = |p: &str| app_file_format(Path::new(p));
        assert_eq!(f("ecosystem.config.js"), Some(Format::EcosystemJs));
        assert_eq!(f("/x/pm2.config.cjs"), Some(Format::EcosystemJs));
        assert_eq!(f("ecosystem.js"), None, "pm2 runs it as a script too");
        assert_eq!(f("app.js"), None);
        assert_eq!(f("./server.mjs"), None);
        assert_eq!(f("apps.toml"), Some(Format::Toml));
        assert_eq!(f("run.sh"), None);
    }

    #[test]
    fn names_follow_the_script() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("other.js"), "").unwrap();
        let name = |p: &str, a: &[&str]| {
            let args: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            name_for_command(p, &args, dir.path()).unwrap()
        };
        assert_eq!(name("node", &["other.js"]), "other");
        assert_eq!(name("/usr/bin/node", &["--inspect", "other.js"]), "other");
        // The first argument that is not an option is not a file: the program.
        assert_eq!(name("python3", &["-m", "http.server"]), "python3");
        assert_eq!(name("sh", &["-c", "sleep 1"]), "sh");
        // Not an interpreter: the program, whatever its arguments.
        assert_eq!(name("npm", &["other.js"]), "npm");
        assert_eq!(name("./bin/server", &[]), "server");
        assert_eq!(name_from("./worker.py").unwrap(), "worker");
        let bad = name_from("123.js").unwrap_err().to_string();
        assert!(bad.contains("--name"), "{bad}");
    }
}
