//! pm2's `ecosystem.config.js` (`.cjs`, `.mjs`): evaluated by `node`, as pm2
//! does, and read back as the JSON of what the file exports.
//!
//! The file is a program. It runs as the invoking user, inside the CLI, with
//! its own directory as working directory, stdin closed, in a process group
//! of its own; it gets [`TIME_LIMIT`] and [`OUTPUT_LIMIT`] bytes of output,
//! past either it is killed with everything it started in its group. Once
//! it is done, whatever it started is killed too, in its group or not
//! (`leftovers.rs`). The
//! JSON comes after a random marker line, so whatever the file itself prints
//! (`console.log` in a config file is common) is not mistaken for it.

use super::AppFileError;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long the file may take to export its apps.
const TIME_LIMIT: Duration = Duration::from_secs(10);
/// How much it may print, on each of stdout and stderr.
const OUTPUT_LIMIT: usize = 16 << 20;
/// How much of stderr is kept for an error message.
const STDERR_KEPT: usize = 8 << 10;
/// Lines of node's error shown.
const ERROR_LINES: usize = 8;
/// How often an interruption (Ctrl-C) is looked for while node runs.
const POLL: Duration = Duration::from_millis(50);

/// Loads the file the way pm2 does (pm2 `require`s it; `import()` also takes
/// `.mjs` and files of `"type": "module"` packages) and prints the marker,
/// then the JSON of the export. A function export is not called: pm2 does not
/// call it either. `process.exit` once both streams are flushed (so that
/// what the file printed counts towards the bound), since a config file may
/// leave a timer or a connection open. A failed import is left unhandled:
/// node then prints the error with the file's line and a caret under it.
const SCRIPT: &str = r#"
const [file, marker] = process.argv.slice(1);
const fail = (message) => process.stderr.write(message + "\n", () => process.exit(3));
import(require("url").pathToFileURL(file).href).then((ns) => {
  const conf = ns.default !== undefined ? ns.default : Object.assign({}, ns);
  if (typeof conf === "function") {
    return fail("the file exports a function; pm2 does not call it either: export the object itself (module.exports = { apps: [...] })");
  }
  let json;
  try {
    json = JSON.stringify(conf === undefined ? null : conf);
  } catch (e) {
    return fail("what the file exports cannot be written as JSON: " + e.message);
  }
  const done = () => process.stdout.write("\n" + marker + "\n" + json, () => process.exit(0));
  process.stderr.write("", done);
});
"#;

/// Refuses a file that another user could have written: evaluating it
/// runs its code as the caller (often root). The file and its directory
/// must belong to the caller or root, and be writable by nobody else (a
/// sticky directory such as /tmp excepted, where others cannot replace
/// it); group write is left alone, as with user private groups.
fn runnable_by_me(path: &Path, meta: &std::fs::Metadata, dir: &Path) -> Result<(), AppFileError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let owned = |uid: u32| uid == me || uid == 0;
    let refuse = |what: String| {
        Err(AppFileError::new(
            path,
            format!("{what}: node would run that code as you; copy the file to a place of your own, or take it over (chown, chmod o-w)"),
        ))
    };
    if !owned(meta.uid()) {
        return refuse(format!(
            "is owned by uid {}, not by you or root",
            meta.uid()
        ));
    }
    if meta.mode() & 0o002 != 0 {
        return refuse("can be changed by every user".to_string());
    }
    let d = std::fs::metadata(dir)
        .map_err(|e| AppFileError::new(path, format!("cannot look at its directory: {e}")))?;
    let sticky = d.mode() & 0o1000 != 0;
    if !sticky && (!owned(d.uid()) || d.mode() & 0o002 != 0) {
        return refuse(format!(
            "is in {}, a directory another user can change (owner uid {}, mode {:o})",
            dir.display(),
            d.uid(),
            d.mode() & 0o7777
        ));
    }
    Ok(())
}

/// What a reader thread saw on one of node's streams.
enum Stream {
    /// All of stdout, up to its end.
    Out(Vec<u8>),
    /// The first bytes of stderr, up to its end.
    Err(Vec<u8>),
    /// More than [`OUTPUT_LIMIT`] on either.
    TooMuch,
}

/// Runs `node` on the file and returns the JSON of its export; nothing the
/// file started outlives it.
pub(super) fn evaluate(path: &Path) -> Result<String, AppFileError> {
    let leftovers = super::leftovers::Leftovers::watch();
    let json = run(path);
    leftovers.end();
    json
}

/// Runs `node` on the file, within the limits.
fn run(path: &Path) -> Result<String, AppFileError> {
    let file = std::path::absolute(path)
        .map_err(|e| AppFileError::new(path, format!("cannot find the file's directory: {e}")))?;
    let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    // Never node on a FIFO (it would wait for a writer for ever), nor on
    // code another user can change.
    let (_, meta) = super::read::regular_file(path)?;
    runnable_by_me(path, &meta, &dir)?;
    let marker = marker().map_err(|e| AppFileError::new(path, e))?;
    let mut child = spawn(path, &file, &dir, &marker)?;
    let (tx, rx) = mpsc::channel();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        kill(&mut child);
        return Err(AppFileError::new(path, "cannot read node's output"));
    };
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        let _ = out_tx.send(read_stdout(stdout));
    });
    std::thread::spawn(move || {
        let _ = tx.send(read_stderr(stderr));
    });

    let interrupted = Arc::new(AtomicBool::new(false));
    let _interrupts = Interrupts::catch(&interrupted);
    let deadline = Instant::now() + TIME_LIMIT;
    let (mut out, mut err) = (None, None);
    while out.is_none() || err.is_none() {
        if interrupted.load(Ordering::SeqCst) {
            kill(&mut child);
            return Err(AppFileError::new(
                path,
                "interrupted while node read this file",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(POLL)) {
            Ok(Stream::Out(bytes)) => out = Some(bytes),
            Ok(Stream::Err(bytes)) => err = Some(bytes),
            Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {}
            Ok(Stream::TooMuch) => {
                kill(&mut child);
                return Err(AppFileError::new(
                    path,
                    format!(
                        "node printed more than {} MiB while evaluating this file and was \
                         stopped; an ecosystem file exports a small object: look for a loop \
                         that prints",
                        OUTPUT_LIMIT >> 20
                    ),
                ));
            }
            Err(_) => {
                kill(&mut child);
                return Err(timed_out(path));
            }
        }
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline && !interrupted.load(Ordering::SeqCst) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Ok(None) => {
                kill(&mut child);
                return Err(timed_out(path));
            }
            Err(e) => {
                return Err(AppFileError::new(
                    path,
                    format!("cannot wait for node: {e}"),
                ))
            }
        }
    };
    let (out, err) = (out.unwrap_or_default(), err.unwrap_or_default());
    if !status.success() {
        return Err(AppFileError::new(
            path,
            format!("node could not evaluate this file:\n{}", first_lines(&err)),
        ));
    }
    exported_json(path, &out, &marker)
}

/// Starts node on the file; a missing node gets the message a pm2 user needs.
fn spawn(path: &Path, file: &Path, dir: &Path, marker: &str) -> Result<Child, AppFileError> {
    use std::os::unix::process::CommandExt;
    Command::new("node")
        .arg("--input-type=commonjs")
        .arg("-e")
        .arg(SCRIPT)
        .arg(file)
        .arg(marker)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that a kill reaches what the file started.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "ecosystem.config.js".into());
            // The directory was checked: not found is node.
            if e.kind() == std::io::ErrorKind::NotFound {
                AppFileError::new(
                    path,
                    format!(
                        "node is needed to read {name}; install Node.js or write the file \
                         as ecosystem.config.json"
                    ),
                )
            } else {
                AppFileError::new(path, format!("cannot run node: {e}"))
            }
        })
}

/// A marker no file can guess.
fn marker() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("cannot get random bytes: {e}"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("oxidepm-export-{hex}"))
}

fn read_stdout(mut stdout: impl Read) -> Stream {
    let mut out = Vec::new();
    match (&mut stdout)
        .take(OUTPUT_LIMIT as u64 + 1)
        .read_to_end(&mut out)
    {
        Ok(_) if out.len() > OUTPUT_LIMIT => Stream::TooMuch,
        // A read error ends the output: what came is judged as it is.
        _ => Stream::Out(out),
    }
}

/// Keeps the first bytes and counts the rest, so that a file printing
/// errors in a loop is stopped like one printing on stdout.
fn read_stderr(mut stderr: impl Read) -> Stream {
    let mut kept = Vec::new();
    let mut total = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => return Stream::Err(kept),
            Ok(n) => {
                let room = STDERR_KEPT.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                total += n;
                if total > OUTPUT_LIMIT {
                    return Stream::TooMuch;
                }
            }
        }
    }
}

/// Ctrl-C, SIGTERM and SIGHUP while node runs. node is in a group of its
/// own, which the terminal does not signal: the CLI catches them, kills the
/// group and fails. Once node is done with, they end the CLI as before.
struct Interrupts {
    done: Arc<AtomicBool>,
    caught: Vec<signal_hook::SigId>,
}

impl Interrupts {
    fn catch(flag: &Arc<AtomicBool>) -> Interrupts {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let done = Arc::new(AtomicBool::new(false));
        let mut caught = Vec::new();
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            // Registered first, so that it runs first: the default action,
            // but only once `done` is set.
            let _ = signal_hook::flag::register_conditional_default(signal, Arc::clone(&done));
            if let Ok(id) = signal_hook::flag::register(signal, Arc::clone(flag)) {
                caught.push(id);
            }
        }
        Interrupts { done, caught }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        for id in self.caught.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Kills node's group and reaps node. The group is signalled before node is
/// reaped, so its id cannot have been reused.
fn kill(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn timed_out(path: &Path) -> AppFileError {
    AppFileError::new(
        path,
        format!(
            "node did not finish evaluating this file within {} s and was stopped; \
             an ecosystem file must export its apps without waiting for anything \
             (or write them as ecosystem.config.json)",
            TIME_LIMIT.as_secs()
        ),
    )
}

/// The JSON after the last marker line of stdout.
fn exported_json(path: &Path, out: &[u8], marker: &str) -> Result<String, AppFileError> {
    let out = String::from_utf8_lossy(out);
    let Some((_, json)) = out.rsplit_once(&format!("\n{marker}\n")) else {
        return Err(AppFileError::new(
            path,
            "the file ended node before exporting anything (does it call process.exit?); \
             export the apps with module.exports = { apps: [...] }",
        ));
    };
    Ok(json.to_string())
}

/// The first lines of node's error, control characters shown as `?`.
fn first_lines(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    // node's own frames and version say nothing about the file.
    let lines: Vec<String> = text
        .lines()
        .filter(|l| {
            let t = l.trim();
            !t.is_empty() && !t.contains("node:internal") && !t.starts_with("Node.js v")
        })
        .take(ERROR_LINES)
        .map(|l| {
            let clean: String = l
                .chars()
                .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
                .collect();
            format!("  {clean}")
        })
        .collect();
    if lines.is_empty() {
        "  (node printed nothing)".into()
    } else {
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_what_follows_the_last_marker() {
        let path = Path::new("/srv/ecosystem.config.js");
        let out = b"loading\noxidepm-export-x\n{\"a\":1}\n\noxidepm-export-x\n{\"apps\":[]}";
        assert_eq!(
            exported_json(path, out, "oxidepm-export-x").unwrap(),
            "{\"apps\":[]}"
        );
        let e = exported_json(path, b"only noise", "oxidepm-export-x").unwrap_err();
        assert!(e.to_string().contains("process.exit"), "{e}");
    }

    #[test]
    fn node_errors_keep_the_files_lines_only() {
        let err = b"/srv/ecosystem.config.js:3\n  script: x,\n          ^\n\nReferenceError: x is not defined\n    at Object.<anonymous> (/srv/ecosystem.config.js:3:11)\n    at Module._compile (node:internal/modules/cjs/loader:1521:14)\n\nNode.js v20.0.0\n\x1b[31mred\x1b[0m\n";
        let shown = first_lines(err);
        assert!(
            shown.contains("ReferenceError: x is not defined"),
            "{shown}"
        );
        assert!(shown.contains("(/srv/ecosystem.config.js:3:11)"), "{shown}");
        assert!(!shown.contains("node:internal"), "{shown}");
        assert!(!shown.contains("Node.js v"), "{shown}");
        assert!(
            shown.contains("?[31mred?[0m"),
            "escapes are not passed to the terminal: {shown}"
        );
        assert_eq!(first_lines(b""), "  (node printed nothing)");
    }

    #[test]
    fn markers_differ() {
        assert_ne!(marker().unwrap(), marker().unwrap());
    }
}
