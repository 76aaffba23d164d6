//! state.db failing under the daemon: made immutable while apps run and
//! crash, deleted while the daemon runs, corrupt or read-only at start.
//! What the daemon did must never be forgotten: a change that cannot be
//! saved is refused as `E_STORAGE` (and kept, and written once it can be),
//! and after a restart no app runs twice and a stopped app stays stopped.

use crate::harness::{alive, Env};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `chattr +i` on state.db and its WAL files for as long as it lives
/// (made writable again when dropped, also when a test fails).
struct Immutable {
    files: Vec<PathBuf>,
}

impl Immutable {
    /// Makes the files of `home`'s state.db immutable; `None` (the reason
    /// printed) where `chattr` cannot.
    fn new(home: &Path) -> Option<Immutable> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: making state.db immutable needs root");
            return None;
        }
        let files: Vec<PathBuf> = ["state.db", "state.db-wal", "state.db-shm"]
            .iter()
            .map(|f| home.join(f))
            .filter(|p| p.exists())
            .collect();
        let guard = Immutable { files };
        if guard.files.iter().all(|f| chattr("+i", f)) {
            Some(guard)
        } else {
            eprintln!(
                "skipped: chattr +i is not supported on the file system of {}",
                home.display()
            );
            None
        }
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for f in &self.files {
            chattr("-i", f);
        }
    }
}

fn chattr(flag: &str, path: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(path)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ping` on the socket, with the final line's degraded-state warning.
fn ping(env: &Env) -> (Value, Option<String>) {
    let r = env.raw("daemon.sock").call(json!({"id": 1, "op": "ping"}));
    assert_eq!(r["ok"], true, "{r}");
    let warning = r["warning"].as_str().map(String::from);
    assert_eq!(r["result"]["warning"].as_str(), warning.as_deref());
    (r["result"].clone(), warning)
}

/// An apps row of state.db: name, desired, status, pid, run_id.
type Row = (String, bool, String, Option<i64>, Option<i64>);

/// The apps rows of state.db, read while no daemon holds it.
fn stored(home: &Path) -> Vec<Row> {
    let db = rusqlite::Connection::open(home.join("state.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT name, desired, status, pid, run_id FROM apps ORDER BY id")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)? != 0,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// Live processes started for `home`'s apps (their environment names the
/// home; the daemon and its log writers are left out).
fn app_processes(home: &Path) -> Vec<u32> {
    let mark = format!("OXIDEPM_HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let ours = env.split(|b| *b == 0).any(|v| v == mark.as_bytes());
        if ours && !String::from_utf8_lossy(&cmd).contains("oxidepmd") && alive(pid) {
            out.push(pid);
        }
    }
    out.sort();
    out
}

#[test]
fn an_unwritable_state_db_fails_changes_and_nothing_runs_twice_after_a_restart() {
    let env = Env::new();
    let count = env.path("runs");
    let go = env.path("go");
    // Crashes three times once `go` exists, then stays up: its restarts
    // happen while state.db cannot be written.
    let crashy = env.script(
        "crashy.sh",
        &format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\n\
             if [ $n -eq 1 ]; then while [ ! -e {g} ]; do sleep 0.05; done; exit 1; fi\n\
             if [ $n -lt 4 ]; then exit 1; fi\n\
             exec sleep 1000",
            c = count.display(),
            g = go.display()
        ),
    );
    env.ok(&["start", "--name", "steady", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "victim", "--", "sleep", "1000"]);
    env.ok(&[
        "start",
        "--name",
        "crashy",
        "--restart-delay",
        "100ms",
        "--",
        &crashy,
    ]);
    env.wait_status("crashy", "online");
    let steady = env.pid("steady");
    let victim = env.pid("victim");
    assert_eq!(ping(&env).1, None, "a sound state.db is not degraded");

    let Some(guard) = Immutable::new(&env.home) else {
        return;
    };
    std::fs::write(&go, "").unwrap();
    env.wait(30, "crashy to crash three times and stay up", || {
        std::fs::read_to_string(&count).is_ok_and(|n| n.trim() == "4")
            && env.daemon_app("crashy")["status"] == "online"
    });
    let crashy_pid = env.daemon_app("crashy")["pid"].as_u64().unwrap() as u32;

    // The stop is carried out, and refused as not saved.
    let o = env.run(&["stop", "victim"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "stop succeeded with state.db immutable"
    );
    assert!(err.contains("E_STORAGE"), "{err}");
    assert!(err.contains("state.db"), "{err}");
    env.wait(10, "victim to be gone", || !alive(victim));
    assert_eq!(env.daemon_app("victim")["status"], "stopped");
    // A definition is refused before it changes anything.
    let err = env.fails(&["start", "--name", "late", "--", "sleep", "1000"]);
    assert!(err.contains("E_STORAGE"), "{err}");
    assert!(env.daemon_status().iter().all(|a| a["name"] != "late"));

    let (_, warning) = ping(&env);
    let warning = warning.expect("ping says the daemon is degraded");
    assert!(warning.contains("state.db"), "{warning}");
    let o = env.run(&["status", "--json"]);
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("\"warning\""), "status --json: {stderr}");
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3);

    drop(guard);
    env.wait(30, "the warning to clear", || ping(&env).1.is_none());
    let memory = env.daemon_status();

    // What is on disk is what memory held.
    env.kill_daemon();
    let rows = stored(&env.home);
    for (name, desired, status, pid, run) in &rows {
        let m = memory.iter().find(|a| a["name"] == name.as_str()).unwrap();
        assert_eq!(status, m["status"].as_str().unwrap(), "{name}");
        assert_eq!(pid.map(|p| p as u64), m["pid"].as_u64(), "{name}");
        assert_eq!(*desired, name != "victim", "{name}");
        if pid.is_some() {
            assert!(run.is_some(), "{name} runs with no run recorded");
        }
    }

    // A new daemon adopts what runs, starts nothing twice, and leaves the
    // stopped app stopped.
    env.ok(&["ping"]);
    assert_eq!(env.pid("crashy"), crashy_pid);
    assert_eq!(env.pid("steady"), steady);
    assert_eq!(env.app("victim")["status"], "stopped");
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "4");
    let mut expected = vec![crashy_pid, steady];
    expected.sort();
    assert_eq!(app_processes(&env.home), expected, "an app runs twice");
}

#[test]
fn a_state_db_deleted_while_running_is_rewritten_from_memory() {
    let env = Env::new();
    env.ok(&["start", "--name", "a", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "b", "--", "sleep", "1000"]);
    env.ok(&["stop", "b"]);
    let a = env.pid("a");
    let before = env.daemon_status();
    for f in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(env.home.join(f));
    }
    let warning = env.wait(30, "the daemon to notice and rewrite state.db", || {
        ping(&env).1.filter(|w| w.contains("rewritten from memory"))
    });
    assert!(warning.contains("deleted"), "{warning}");
    assert!(env.home.join("state.db").exists());
    // The CLI shows the warning to a person.
    let o = env.run(&["status"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning: degraded"));

    env.kill_daemon();
    let rows = stored(&env.home);
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(rows[0].3, Some(a as i64));
    assert!(!rows[1].1, "b was stopped");
    env.ok(&["ping"]);
    let after = env.status();
    for (x, y) in before.iter().zip(&after) {
        assert_eq!(x["id"], y["id"]);
        assert_eq!(x["name"], y["name"]);
    }
    assert_eq!(env.pid("a"), a, "a is adopted, not started again");
    assert_eq!(env.app("b")["status"], "stopped");
    assert_eq!(app_processes(&env.home), vec![a], "an app runs twice");
}

#[test]
fn a_state_db_deleted_while_no_daemon_ran_is_restored_from_its_backup() {
    let env = Env::new();
    env.ok(&["start", "--name", "kept", "--", "sleep", "1000"]);
    env.ok(&["kill"]);
    assert!(env.home.join("state.db.bak").exists());
    for f in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(env.home.join(f));
    }
    env.ok(&["ping"]);
    let st = env.status();
    assert_eq!(st.len(), 1, "the apps come back from the backup");
    assert_eq!(st[0]["name"], "kept");
    let warning = ping(&env).1.expect("the restore is reported");
    assert!(
        warning.contains("missing") && warning.contains("state.db.bak"),
        "{warning}"
    );
}

/// A state.db emptied to 0 bytes while no daemon ran (a disk that filled,
/// a careless `>`) is lost, not a new database: its backup is restored;
/// with no backup, the apps' processes are kept running as orphans, each
/// adopted again by the first app of its name, and whoami says so.
#[test]
fn an_empty_state_db_is_restored_from_its_backup_or_its_processes_kept() {
    let env = Env::new();
    env.ok(&["start", "--name", "kept", "--", "sleep", "1000"]);
    env.ok(&["kill"]);
    std::fs::write(env.home.join("state.db"), b"").unwrap();
    env.ok(&["ping"]);
    let st = env.status();
    assert_eq!(st.len(), 1, "the apps come back from the backup");
    let warning = ping(&env).1.expect("the restore is reported");
    assert!(
        warning.contains("empty") && warning.contains("state.db.bak"),
        "{warning}"
    );

    // Running, then emptied with no backup beside it.
    env.ok(&["start", "kept"]);
    let pid = env.pid("kept");
    env.kill_daemon();
    for f in ["state.db", "state.db-wal", "state.db-shm", "state.db.bak"] {
        let _ = std::fs::remove_file(env.home.join(f));
    }
    std::fs::write(env.home.join("state.db"), b"").unwrap();
    env.ok(&["ping"]);
    assert!(env.status().is_empty());
    assert!(alive(pid), "its process is left running");
    let who = env.json(&["whoami"]);
    assert!(
        who.to_string().contains(&format!("kept (pid {pid})")),
        "{who}"
    );
    env.ok(&["start", "--name", "kept", "--", "sleep", "1000"]);
    assert_eq!(env.pid("kept"), pid, "adopted, not started twice");
}

#[test]
fn a_corrupt_state_db_at_start_is_restored_from_its_backup_else_refused() {
    let env = Env::new();
    env.ok(&["start", "--name", "kept", "--", "sleep", "1000"]);
    // A clean shutdown writes the backup.
    env.ok(&["kill"]);
    assert!(env.home.join("state.db.bak").exists());
    std::fs::write(env.home.join("state.db"), vec![0x5a; 16384]).unwrap();
    let _ = std::fs::remove_file(env.home.join("state.db-wal"));

    env.ok(&["ping"]);
    let st = env.status();
    assert_eq!(st.len(), 1);
    assert_eq!(st[0]["name"], "kept");
    let warning = ping(&env).1.expect("the restore is reported");
    assert!(
        warning.contains("corrupt") && warning.contains("state.db.bak"),
        "{warning}"
    );
    let aside = std::fs::read_dir(&env.home)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("state.db.corrupt-")
        })
        .count();
    assert_eq!(aside, 1, "the corrupt file is kept");

    // Corrupt again, with no backup: refused, with the file named.
    env.ok(&["kill"]);
    std::fs::remove_file(env.home.join("state.db.bak")).unwrap();
    std::fs::write(env.home.join("state.db"), vec![0x5a; 16384]).unwrap();
    let _ = std::fs::remove_file(env.home.join("state.db-wal"));
    let err = env.fails(&["ping"]);
    assert!(err.contains("state.db") && err.contains("corrupt"), "{err}");
    assert!(!env.home.join("daemon.sock").exists());
    assert_eq!(
        std::fs::read(env.home.join("state.db")).unwrap(),
        vec![0x5a; 16384],
        "the file is left for a person to look at"
    );
}

#[test]
fn a_read_only_state_db_at_start_is_refused_unless_allowed() {
    let env = Env::new();
    env.ok(&["start", "--name", "x", "--", "sleep", "1000"]);
    env.ok(&["kill"]);
    let Some(guard) = Immutable::new(&env.home) else {
        return;
    };
    let err = env.fails(&["ping"]);
    assert!(
        err.contains("state.db") && err.contains("cannot be written"),
        "{err}"
    );
    assert!(err.contains("allow_read_only_state"), "{err}");

    env.daemon_toml("allow_read_only_state = true\n");
    env.ok(&["ping"]);
    let st = env.status();
    assert_eq!(st[0]["name"], "x");
    assert!(
        ping(&env).1.is_some(),
        "a read-only state.db is a degraded state"
    );
    let err = env.fails(&["start", "x"]);
    assert!(err.contains("E_STORAGE"), "{err}");
    let pid = env.daemon_app("x")["pid"].as_u64().unwrap() as u32;

    drop(guard);
    env.wait(30, "the warning to clear once writable", || {
        ping(&env).1.is_none()
    });
    env.kill_daemon();
    let rows = stored(&env.home);
    assert_eq!(
        rows[0].3,
        Some(pid as i64),
        "the start was saved once it could be"
    );
    env.ok(&["ping"]);
    assert_eq!(env.pid("x"), pid);
}

/// A small tmpfs mounted on a home (before its daemon starts), unmounted
/// when dropped, after the daemon of that home is stopped.
struct SmallDisk {
    home: PathBuf,
}

impl SmallDisk {
    fn mount(home: &Path) -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(home).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs"])
            .arg(home)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs on {}", home.display());
            return None;
        }
        Some(SmallDisk {
            home: home.to_path_buf(),
        })
    }

    /// Fills the file system with one file; returns it.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.home.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new(crate::harness::bin("oxidepm"))
            .env("OXIDEPM_HOME", &self.home)
            .arg("kill")
            .output();
        // The apps' log writers may still be closing their files: try a
        // while, then detach it lazily (it goes once they have).
        let umount = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(&self.home)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        for _ in 0..50 {
            if umount(&[]) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        umount(&["-l"]);
    }
}

#[test]
fn a_full_disk_fails_changes_and_they_are_saved_once_there_is_room() {
    let env = Env::new();
    let Some(disk) = SmallDisk::mount(&env.home) else {
        return;
    };
    env.ok(&[
        "start",
        "--name",
        "crashy",
        "--restart-delay",
        "100ms",
        "--",
        "sh",
        "-c",
        "sleep 0.2; exit 1",
    ]);
    env.ok(&["start", "--name", "victim", "--", "sleep", "1000"]);
    let victim = env.pid("victim");
    let filler = disk.fill();
    // The crash loop writes on: one of its writes finds the disk full.
    env.wait(60, "the daemon to report the full disk", || {
        ping(&env).1.is_some()
    });
    let o = env.run(&["stop", "victim"]);
    assert!(!o.status.success(), "stop succeeded on a full disk");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("E_STORAGE"), "{err}");
    env.wait(10, "victim to be gone", || !alive(victim));

    std::fs::remove_file(filler).unwrap();
    env.wait(30, "the warning to clear", || ping(&env).1.is_none());
    env.kill_daemon();
    let rows = stored(&env.home);
    let v = rows.iter().find(|r| r.0 == "victim").unwrap();
    assert_eq!((v.1, v.2.as_str(), v.3), (false, "stopped", None));
    env.ok(&["ping"]);
    assert_eq!(env.app("victim")["status"], "stopped");
    // Nothing started the stopped app again (crashy's runs are `sh` and
    // `sleep 0.2`).
    let sleepers: Vec<u32> = app_processes(&env.home)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x001000\x00")
        })
        .collect();
    assert_eq!(sleepers, Vec::<u32>::new(), "the stopped app runs again");
    drop(disk);
}
