//! Container mode: `oxidepmd --foreground --attach apps.toml` run as a
//! container would run it, its stdout and stderr read as `docker logs`
//! would, stopped as `docker stop` stops it.

use crate::harness::{alive, bin, kill, read, Env};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};

fn daemon(env: &Env, file: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(bin("oxidepmd"));
    c.env("OXIDEPM_HOME", &env.home)
        .env_remove("OXIDEPM_LOG")
        .args(["--foreground", "--attach", file])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Every line of `r`, as it comes.
fn lines(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Lines of a stream kept as they arrive, to look for one later.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn collect(rx: Receiver<String>) -> Seen {
        let seen = Seen::default();
        let s = seen.clone();
        std::thread::spawn(move || {
            for l in rx {
                s.0.lock().unwrap().push(l);
            }
        });
        seen
    }
    fn has(&self, line: &str) -> bool {
        self.0.lock().unwrap().iter().any(|l| l == line)
    }
    fn any(&self, part: &str) -> bool {
        self.0.lock().unwrap().iter().any(|l| l.contains(part))
    }
}

/// Waits for the daemon to exit on its own.
fn exited(env: &Env, child: &mut Child) -> ExitStatus {
    env.wait(30, "the daemon to exit", || child.try_wait().unwrap())
}

fn write(env: &Env, name: &str, text: &str) -> String {
    let p = env.path(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn the_apps_lines_come_out_prefixed_and_sigterm_stops_them_with_status_0() {
    let env = Env::new();
    let marker = env.path("got-term");
    let web = env.script(
        "web.sh",
        &format!(
            "trap 'touch {}; exit 0' TERM\necho web ready\necho web warns >&2\n\
             (sleep 0.2 &)\nsleep 100000 & wait",
            marker.display()
        ),
    );
    let file = write(
        &env,
        "apps.toml",
        &format!(
            "[[apps]]\nname = \"web\"\nscript = \"{web}\"\n\n\
             [[apps]]\nname = \"worker\"\nscript = \"sh\"\nargs = [\"-c\", \"echo worker up; exec sleep 100000\"]\n"
        ),
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    let out = Seen::collect(lines(child.stdout.take().unwrap()));
    let err = Seen::collect(lines(child.stderr.take().unwrap()));
    env.wait(20, "web's line on stdout", || out.has("web | web ready"));
    env.wait(20, "worker's line on stdout", || {
        out.has("worker | worker up")
    });
    env.wait(20, "web's stderr line on stderr", || {
        err.has("web | web warns")
    });
    assert!(!out.any("web warns"), "a stderr line went to stdout");
    // The daemon answers another shell meanwhile.
    let web_pid = env.pid("web");
    let worker_pid = env.pid("worker");
    assert_eq!(env.app("worker")["status"], "online");
    // The orphan web left behind was reaped: no zombie of the daemon's.
    let daemon_pid = child.id();
    env.wait(10, "the orphan to be reaped", || {
        zombies_of(daemon_pid) == 0
    });

    kill(daemon_pid, libc::SIGTERM);
    let status = exited(&env, &mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(marker.exists(), "web did not get its stop signal");
    assert!(!alive(web_pid) && !alive(worker_pid));
    assert!(!env.home.join("daemon.sock").exists());
}

/// Zombie children of `pid`.
fn zombies_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid …: comm may hold spaces, so split after ')'.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let mut f = rest.split_whitespace();
            f.next() == Some("Z") && f.next() == Some(&pid.to_string())
        })
        .count()
}

#[test]
fn an_app_that_exits_3_and_is_never_restarted_ends_the_daemon_with_3() {
    let env = Env::new();
    let file = write(
        &env,
        "apps.toml",
        "[[apps]]\nname = \"job\"\nscript = \"sh\"\nargs = [\"-c\", \"echo job done; exit 3\"]\nrestart = \"never\"\n\n\
         [[apps]]\nname = \"tidy\"\nscript = \"sh\"\nargs = [\"-c\", \"exit 0\"]\nrestart = \"never\"\n",
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    let out = Seen::collect(lines(child.stdout.take().unwrap()));
    let _err = Seen::collect(lines(child.stderr.take().unwrap()));
    let status = exited(&env, &mut child);
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(out.has("job | job done"), "{:?}", out.0.lock().unwrap());
}

#[test]
fn a_file_that_cannot_be_used_exits_78_and_starts_nothing() {
    let env = Env::new();
    let marker = env.path("ran");
    let file = write(
        &env,
        "apps.toml",
        &format!(
            "[[apps]]\nname = \"first\"\nscript = \"touch\"\nargs = [\"{}\"]\n\n[[apps]\nname = \"broken\"\n",
            marker.display()
        ),
    );
    let o = daemon(&env, &file, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(78));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("apps.toml"), "{e}");
    assert!(!marker.exists());
    assert!(
        !env.home.exists(),
        "the home was made for a file that cannot run"
    );
    let o = daemon(&env, &env.path("missing.toml").display().to_string(), &[])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78));
    assert!(!env.home.exists());
}

#[test]
fn a_stdout_nobody_reads_stops_neither_the_apps_nor_the_daemon() {
    let env = Env::new();
    let file = write(
        &env,
        "apps.toml",
        "[[apps]]\nname = \"chatty\"\nscript = \"sh\"\nargs = [\"-c\", \
         \"i=0; while [ $i -lt 20000 ]; do echo line $i of a chatty app that says a lot; i=$((i+1)); done; \
         echo all said; exec sleep 100000\"]\n",
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    // Nobody reads stdout: it fills at the pipe's size.
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let _err = Seen::collect(lines(child.stderr.take().unwrap()));
    let log = env.home.join("logs/chatty-out.log");
    env.wait(60, "chatty to say everything", || {
        log.exists() && read(&log).contains("all said")
    });
    // The daemon still answers, and the app still runs.
    let pid = env.pid("chatty");
    assert_eq!(env.app("chatty")["status"], "online");
    // Read again, the stream resumes and says what it had to drop.
    let out = Seen::collect(lines(stdout));
    env.wait(30, "the drop count", || out.any("lines dropped"));
    kill(child.id(), libc::SIGTERM);
    assert_eq!(exited(&env, &mut child).code(), Some(0));
    assert!(!alive(pid));
}

#[test]
fn only_runs_the_named_apps_of_the_file() {
    let env = Env::new();
    let marker = env.path("a-ran");
    let file = write(
        &env,
        "apps.toml",
        &format!(
            "[[apps]]\nname = \"a\"\nscript = \"touch\"\nargs = [\"{}\"]\nrestart = \"never\"\n\n\
             [[apps]]\nname = \"b\"\nscript = \"sh\"\nargs = [\"-c\", \"echo b ran\"]\nrestart = \"never\"\n",
            marker.display()
        ),
    );
    let mut child = daemon(&env, &file, &["--only", "b"]).spawn().unwrap();
    let out = Seen::collect(lines(child.stdout.take().unwrap()));
    let _err = Seen::collect(lines(child.stderr.take().unwrap()));
    assert_eq!(exited(&env, &mut child).code(), Some(0));
    assert!(out.has("b | b ran"));
    assert!(!marker.exists(), "--only b ran a");
}

#[test]
fn an_app_that_ignores_its_stop_signal_is_killed_and_the_status_says_so() {
    let env = Env::new();
    let file = write(
        &env,
        "apps.toml",
        "[[apps]]\nname = \"stubborn\"\nscript = \"sh\"\nargs = [\"-c\", \"trap '' TERM; echo up; while :; do sleep 1; done\"]\nkill_timeout = \"300ms\"\n",
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    let out = Seen::collect(lines(child.stdout.take().unwrap()));
    let _err = Seen::collect(lines(child.stderr.take().unwrap()));
    env.wait(20, "stubborn to be up", || out.has("stubborn | up"));
    let pid = env.pid("stubborn");
    kill(child.id(), libc::SIGINT);
    // Killed with SIGKILL after its kill_timeout: 128 + 9.
    assert_eq!(exited(&env, &mut child).code(), Some(137));
    assert!(!alive(pid));
}

#[test]
fn an_app_that_cannot_start_stops_the_others_and_exits_1() {
    let env = Env::new();
    let file = write(
        &env,
        "apps.toml",
        "[[apps]]\nname = \"good\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n\
         [[apps]]\nname = \"bad\"\nscript = \"/nonexistent/program\"\n",
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    let _out = Seen::collect(lines(child.stdout.take().unwrap()));
    let err = Seen::collect(lines(child.stderr.take().unwrap()));
    assert_eq!(exited(&env, &mut child).code(), Some(1));
    assert!(err.any("bad"), "{:?}", err.0.lock().unwrap());
    assert!(!sleeping_in(&env), "good was left running");
}

/// Whether a `sleep 100000` of this test's home is alive (its cgroup or
/// its environment would tell; its command line is enough here as each
/// test home runs its own).
fn sleeping_in(env: &Env) -> bool {
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        cmd == b"sleep\x00100000\x00" && String::from_utf8_lossy(&environ).contains(&home)
    })
}

#[test]
fn a_daemon_whose_stdout_is_never_read_still_stops_when_told() {
    let env = Env::new();
    let file = write(
        &env,
        "apps.toml",
        "[[apps]]\nname = \"chatty\"\nscript = \"sh\"\nargs = [\"-c\", \
         \"i=0; while [ $i -lt 5000 ]; do echo line $i of a chatty app that says a lot; i=$((i+1)); done; \
         echo all said; exec sleep 100000\"]\n",
    );
    let mut child = daemon(&env, &file, &[]).spawn().unwrap();
    let _stdout: ChildStdout = child.stdout.take().unwrap();
    let _err = Seen::collect(lines(child.stderr.take().unwrap()));
    let log = env.home.join("logs/chatty-out.log");
    env.wait(60, "chatty to say everything", || {
        log.exists() && read(&log).contains("all said")
    });
    let pid = env.pid("chatty");
    kill(child.id(), libc::SIGTERM);
    assert_eq!(exited(&env, &mut child).code(), Some(0));
    assert!(!alive(pid));
}
