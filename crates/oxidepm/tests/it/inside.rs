//! A shell inside an app's process tree, run by the test: what the app
//! (or any process it starts) can ask the daemon, on the paths it has.

use crate::harness::{bin, read, Env};
use serde_json::Value;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

/// A shell inside an app's process tree that runs the CLI lines the test
/// hands it: what the app (or any process it starts) can ask the daemon.
pub struct Inside {
    dir: PathBuf,
    fifo: File,
    n: u32,
}

/// What one command inside an app gave.
pub struct Ran {
    /// Whether it exited 0.
    pub ok: bool,
    /// Its output.
    pub out: String,
    /// Its error output.
    pub err: String,
}

impl Ran {
    /// The JSON it printed.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.out.trim())
            .unwrap_or_else(|e| panic!("{e}: {} / {}", self.out, self.err))
    }
}

/// Starts app `name` of `kind` (as a person) running a shell that reads
/// command lines from a fifo; it first prints `<name> ready` to its log.
pub fn inside(env: &Env, name: &str, kind: &str) -> Inside {
    inside_as(env, name, kind, None)
}

/// [`inside`], the app running as `user` when one is given (its files
/// then open to everyone: the shell is not the test's uid).
pub fn inside_as(env: &Env, name: &str, kind: &str, user: Option<&str>) -> Inside {
    let dir = env.path(&format!("{name}-inside"));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("in");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    if user.is_some() {
        for p in [&dir, &fifo] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
    }
    let d = dir.display();
    let script = format!(
        "echo {name} ready; exec 3<>{f}; while read -r n line <&3; do sh -c \"$line\" > {d}/$n.out 2> {d}/$n.err; echo $? > {d}/$n.rc; done",
        f = fifo.display()
    );
    let oxpm = format!("OXPM={}", bin("oxidepm").display());
    let mut args = vec!["start", "--name", name, "--kind", kind, "--env", &oxpm];
    if let Some(u) = user {
        args.extend(["--user", u]);
    }
    args.extend(["--", "sh", "-c", &script]);
    env.ok(&args);
    // Opened without blocking: it fails until the shell holds the fifo.
    let fifo = env.wait(20, "the shell inside the app", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .ok()
    });
    Inside { dir, fifo, n: 0 }
}

impl Inside {
    /// Runs `oxidepm <args>` inside the app, on the socket the app is
    /// given (agent.sock for an agent, daemon.sock otherwise).
    pub fn run(&mut self, env: &Env, args: &str) -> Ran {
        self.line(env, &format!("\"$OXPM\" {args}"))
    }

    /// Runs `oxidepm <args>` inside the app, on `socket` of the home.
    pub fn run_on(&mut self, env: &Env, socket: &str, args: &str) -> Ran {
        let path = env.home.join(socket);
        self.line(
            env,
            &format!("OXIDEPM_SOCKET={} \"$OXPM\" {args}", path.display()),
        )
    }

    fn line(&mut self, env: &Env, line: &str) -> Ran {
        self.n += 1;
        let n = self.n;
        writeln!(self.fifo, "{n} {line}").unwrap();
        let rc = self.dir.join(format!("{n}.rc"));
        env.wait(30, &format!("{line} inside the app"), || {
            read(&rc).ends_with('\n')
        });
        Ran {
            ok: read(&rc).trim() == "0",
            out: read(&self.dir.join(format!("{n}.out"))),
            err: read(&self.dir.join(format!("{n}.err"))),
        }
    }
}
