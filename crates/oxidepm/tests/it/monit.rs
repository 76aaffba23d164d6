//! `oxidepm monit` driven as a person drives it: in a real terminal
//! (tmux, 80×24), against a real daemon, keys sent and the screen read.

use crate::harness::{alive, bin, kill, strs, Env};
use oxidepm_testkit::words;
use std::path::PathBuf;
use std::process::Command;

/// A private tmux server with one 80×24 session running a plain shell in
/// the test's home; the server is killed on drop.
struct Tmux {
    socket: PathBuf,
}

/// The shell's prompt (capture-pane drops its trailing space).
const PROMPT: &str = "monit-test$";

impl Tmux {
    /// Starts the shell, or `None` (with the reason printed) without tmux.
    fn start(env: &Env, actor: Option<&str>) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("skipped: tmux is not installed (test.sh installs it)");
            return None;
        }
        let t = Tmux {
            socket: env.path("tmux.sock"),
        };
        let claim = actor.map(|a| format!("OXIDEPM_ACTOR={a}"));
        let shell = format!(
            "env -u OXIDEPM_SOCKET -u OXIDEPM_LOG -u OXIDEPM_ACTOR OXIDEPM_HOME={} {} PS1='{PROMPT} ' bash --norc --noprofile",
            env.home.display(),
            claim.unwrap_or_default(),
        );
        t.tmux(&[
            "new-session",
            "-d",
            "-s",
            "monit",
            "-x",
            "80",
            "-y",
            "24",
            &shell,
        ]);
        t.wait_for(env, "the shell's prompt", |s| s.contains(PROMPT));
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "monit"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "monit"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Waits until the screen passes `check`; returns that screen, or
    /// panics with the last screen seen.
    #[track_caller]
    fn wait_for(&self, _env: &Env, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        for _ in 0..300 {
            last = self.screen();
            if check(&last) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("gave up waiting for {what}; the screen:\n{last}");
    }

    /// The pid of the program the shell runs in the foreground.
    fn foreground_pid(&self) -> Option<u32> {
        let shell: u32 = self
            .tmux(&["display-message", "-p", "-t", "monit", "#{pane_pid}"])
            .trim()
            .parse()
            .ok()?;
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        children.split_whitespace().next()?.parse().ok()
    }

    /// Runs monit in the shell and waits for its first frame with `app`.
    fn monit(&self, env: &Env, app: &str) {
        let cmd = format!("{} monit", bin("oxidepm").display());
        self.keys(&[&cmd, "Enter"]);
        self.wait_for(env, "monit's first frame", |s| {
            s.contains("oxidepm monit") && app_row(s, app).is_some()
        });
    }

    /// The terminal is the shell's again: the dashboard is gone, and the
    /// shell echoes what is typed and runs it (cooked mode is back).
    #[track_caller]
    fn assert_shell_back(&self, env: &Env) {
        // Typed before monit is gone, keys would be monit's to read.
        self.wait_for(env, "the shell's prompt after monit", |s| {
            s.lines().rfind(|l| !l.trim().is_empty()) == Some(PROMPT)
        });
        self.keys(&["echo back-$((40+2))", "Enter"]);
        let s = self.wait_for(env, "the shell to answer", |s| s.contains("\nback-42"));
        assert!(!s.contains("┌apps"), "the dashboard is gone:\n{s}");
        assert!(s.contains(PROMPT), "{s}");
        assert!(s.contains("echo back-$((40+2))"), "typing is echoed:\n{s}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// The apps table's row of `app` on a screen.
fn app_row<'a>(screen: &'a str, app: &str) -> Option<&'a str> {
    screen.lines().find(|l| {
        l.starts_with('│')
            && l.split_whitespace()
                .any(|w| w == app || w == format!("│{app}"))
    })
}

fn row_says(screen: &str, app: &str, status: &str) -> bool {
    app_row(screen, app).is_some_and(|r| r.split_whitespace().any(|w| w == status))
}

#[test]
fn monit_shows_a_crash_restarts_with_r_and_quits_with_q() {
    let env = Env::new();
    let crash = env.path("crash");
    // Waits until told to crash, then crashes on every start.
    let body = format!(
        "while [ ! -e {0} ]; do sleep 0.1; done; echo crashing >&2; exit 3",
        crash.display()
    );
    env.ok(&[
        "start",
        "--name",
        "flaky",
        "--restart-delay",
        "0",
        "--max-restarts",
        "1",
        "--min-uptime",
        "60s",
        "--",
        "sh",
        "-c",
        &body,
    ]);
    env.wait_status("flaky", "online");
    let first = env.pid("flaky");
    let Some(t) = Tmux::start(&env, None) else {
        return;
    };
    t.monit(&env, "flaky");
    t.wait_for(&env, "flaky online, selected", |s| {
        row_says(s, "flaky", "online") && app_row(s, "flaky").is_some_and(|r| r.contains('›'))
    });

    std::fs::write(&crash, "").unwrap();
    let s = t.wait_for(&env, "flaky errored on screen", |s| {
        row_says(s, "flaky", "errored")
    });
    assert_eq!(env.app("flaky")["status"], "errored", "{s}");
    t.wait_for(&env, "the crash in the log pane", |s| {
        s.contains("crashing")
    });

    std::fs::remove_file(&crash).unwrap();
    t.keys(&["r"]);
    t.wait_for(&env, "flaky online again", |s| {
        row_says(s, "flaky", "online") && s.contains("restarted flaky")
    });
    let pid = env.pid("flaky");
    assert_ne!(pid, first, "a new process");
    t.wait_for(&env, "the new pid on screen", |s| {
        app_row(s, "flaky").is_some_and(|r| r.split_whitespace().any(|w| w == pid.to_string()))
    });

    t.keys(&["q"]);
    t.assert_shell_back(&env);
}

#[test]
fn an_ai_in_monit_is_refused_what_its_tier_forbids_and_nothing_changes() {
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 1000")));
    let pid = env.pid("db");
    let Some(t) = Tmux::start(&env, Some("ai:assistant")) else {
        return;
    };
    t.monit(&env, "db");
    t.keys(&["r"]);
    t.wait_for(&env, "the refusal of r", |s| s.contains("E_PROTECTED"));
    t.keys(&["s"]);
    t.wait_for(&env, "the refusal of s", |s| {
        s.contains("E_PROTECTED") && !s.contains("stopping db")
    });
    assert_eq!(env.pid("db"), pid, "same process");
    assert_eq!(env.app("db")["status"], "online");
    t.keys(&["C-c"]);
    t.assert_shell_back(&env);
}

#[test]
fn sigterm_and_sighup_give_the_terminal_back() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    let Some(t) = Tmux::start(&env, None) else {
        return;
    };
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        t.monit(&env, "web");
        let monit = t.foreground_pid().expect("monit runs in the shell");
        kill(monit, sig);
        env.wait(30, "monit to exit", || !alive(monit));
        t.assert_shell_back(&env);
        t.keys(&["clear", "Enter"]);
    }
}

/// The terminal goes away under monit (its tmux pane closed, an ssh
/// session dropped): monit ends at once instead of spinning on a
/// terminal that reads nothing, for ever.
#[test]
fn a_terminal_that_goes_away_ends_monit() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    let Some(t) = Tmux::start(&env, None) else {
        return;
    };
    t.monit(&env, "web");
    let monit = t.foreground_pid().expect("monit runs in the shell");
    t.tmux(&["kill-session", "-t", "monit"]);
    env.wait(5, "monit to end with its terminal", || !alive(monit));
}

#[test]
fn monit_without_a_terminal_says_so_and_starts_nothing() {
    let env = Env::new();
    let o = env.run(&["monit"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("terminal"), "{err}");
    assert!(!env.home.join("daemon.sock").exists(), "no daemon started");
}

#[test]
fn monit_shows_each_agents_inbox_from_the_lanes_report() {
    let env = Env::new();
    crate::lanes::start_agents(&env, &["alice"]);
    let mut bridge = crate::lanes::host_conn(&env, "bridge");
    for text in ["one", "two", "three"] {
        crate::lanes::run(
            &mut bridge,
            &["XADD", "alice:webhook:inbox", "*", "text", text],
        )
        .unwrap();
    }
    let Some(t) = Tmux::start(&env, None) else {
        return;
    };
    t.monit(&env, "alice");
    // agent, inbox, pending, outbox, dead.
    let s = t.wait_for(&env, "alice's lane with 3 in her inbox", |s| {
        s.lines().any(|l| {
            let cells: Vec<&str> = l.split(['│', ' ']).filter(|c| !c.is_empty()).collect();
            cells == ["alice", "3", "0", "0", "0"]
        })
    });
    assert!(s.contains("┌lanes"), "{s}");
    t.keys(&["q"]);
    t.assert_shell_back(&env);
}
