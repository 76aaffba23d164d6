//! Under memory pressure the kernel kills an app, not the daemon: in a
//! memory cgroup too small for its apps, the daemon survives, the apps
//! the OOM killer took are recorded as killed for memory, and the rest
//! are still supervised.

use crate::harness::{alive, Env};
use std::path::{Path, PathBuf};

/// A memory cgroup (cgroup v1's memory controller) made for one test,
/// under the test's own, removed once its processes are gone.
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// A cgroup limited to `limit` bytes, swap included; `None` (and why)
    /// when this host has no writable v1 memory controller.
    fn new(limit: u64) -> Result<MemoryCgroup, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root".into());
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let path = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
            .ok_or("no v1 memory controller")?;
        let base = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
        let dir = base.join(format!("oxidepm-test-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = MemoryCgroup { dir };
        cg.write("memory.limit_in_bytes", limit)?;
        // Swap would turn the pressure into slowness instead of kills.
        let _ = cg.write("memory.swappiness", 0);
        let _ = cg.write("memory.memsw.limit_in_bytes", limit);
        Ok(cg)
    }

    fn write(&self, file: &str, v: u64) -> Result<(), String> {
        std::fs::write(self.dir.join(file), v.to_string()).map_err(|e| format!("{file}: {e}"))
    }

    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for pid in self.procs() {
            crate::harness::kill(pid, libc::SIGKILL);
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

#[test]
fn in_a_memory_cgroup_too_small_the_kernel_kills_apps_and_never_the_daemon() {
    let cg = match MemoryCgroup::new(192 << 20) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("skipped: no memory cgroup to test in ({why})");
            return;
        }
    };
    let env = Env::new();
    // The daemon starts inside the cgroup: its apps are charged to it.
    let join = format!(
        "echo $$ > {}/cgroup.procs && exec {} ping",
        cg.dir.display(),
        crate::harness::bin("oxidepm").display()
    );
    let o = std::process::Command::new("sh")
        .args(["-c", &join])
        .env("OXIDEPM_HOME", &env.home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let daemon = env.daemon_pid();
    assert!(
        cg.procs().contains(&daemon),
        "the daemon runs in the cgroup"
    );

    // Six apps of 48 MiB each in 192 MiB: some must go.
    let hog = env.script(
        "hog",
        "exec python3 -c 'import time; b = b\"x\" * (48 << 20); print(\"full\", flush=True); time.sleep(100000)'",
    );
    for i in 0..6 {
        env.ok(&[
            "start",
            "--name",
            &format!("hog{i}"),
            "--restart",
            "never",
            "--",
            &hog,
        ]);
    }
    let killed = env.wait(60, "an app killed for memory", || {
        let names: Vec<String> = (0..6)
            .map(|i| format!("hog{i}"))
            .filter(|n| {
                env.events(n).iter().any(|e| {
                    e["kind"] == "exited"
                        && e["detail"]
                            .as_str()
                            .is_some_and(|d| d.contains("OOM killer"))
                })
            })
            .collect();
        (!names.is_empty()).then_some(names)
    });
    assert!(alive(daemon), "the daemon survived");
    assert_eq!(env.daemon_pid(), daemon, "and was not restarted");
    // Everything that was not killed is still supervised and answering.
    let status = env.status();
    assert_eq!(status.len(), 6);
    for a in &status {
        let name = a["name"].as_str().unwrap();
        if !killed.iter().any(|k| k == name) {
            continue;
        }
        assert_ne!(a["status"], "online", "{a}");
    }
    let shown = env.ok(&["events", &killed[0]]);
    assert!(shown.contains("out of memory"), "{shown}");
}
