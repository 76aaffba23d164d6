//! pm2's `watch`: a change under an app's tree restarts it once per burst,
//! `node_modules` never counts, and a fix to a crashed app starts it.

use crate::harness::Env;
use std::fs;

/// Waits until app `name`'s watch is armed (it says so in an event).
fn armed(env: &Env, name: &str) {
    env.wait(20, &format!("{name}'s watch to be armed"), || {
        watch_events(env, name)
            .iter()
            .any(|d| d.starts_with("watching "))
    });
}

/// The details of app `name`'s `watch` events, oldest first.
fn watch_events(env: &Env, name: &str) -> Vec<String> {
    env.daemon_events(name)
        .iter()
        .filter(|e| e["kind"] == "watch")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_change_restarts_the_app_once_per_burst_and_node_modules_never_counts() {
    let env = Env::new();
    let project = env.path("project");
    fs::create_dir_all(project.join("src")).unwrap();
    fs::create_dir_all(project.join("node_modules/dep")).unwrap();
    let cwd = project.to_str().unwrap();
    env.ok(&[
        "start",
        "--name",
        "w",
        "--cwd",
        cwd,
        "--watch",
        "--watch-delay",
        "300",
        "--",
        "sleep",
        "1000",
    ]);
    env.wait_status("w", "online");
    let show = env.ok(&["show", "w"]);
    assert!(
        show.contains("watch") && show.contains("node_modules"),
        "{show}"
    );
    armed(&env, "w");
    // The root and src; node_modules and what is under it left out.
    let seen = watch_events(&env, "w");
    assert!(
        seen.contains(&"watching 2 directories".to_string()),
        "{seen:?}"
    );
    let restarts = env.app("w")["restarts"].as_u64().unwrap();
    let pid = env.pid("w");

    // A dependency's change, then a burst of twenty writes of the app's
    // own files: one restart, named after the app's first file.
    fs::write(project.join("node_modules/dep/index.js"), "x").unwrap();
    for i in 0..20 {
        fs::write(project.join(format!("src/f{i}.js")), format!("{i}")).unwrap();
    }
    env.wait(20, "the restart after the burst", || {
        env.daemon_app("w")["pid"]
            .as_u64()
            .is_some_and(|p| p as u32 != pid)
    });
    env.wait_status("w", "online");
    let seen = watch_events(&env, "w");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("src/f0.js changed"),
        "{seen:?}"
    );
    // Stopped by a request, it stays stopped whatever changes.
    env.ok(&["stop", "w"]);
    assert_eq!(
        env.app("w")["restarts"].as_u64().unwrap(),
        restarts + 1,
        "the burst restarted once"
    );
    let events = env.events("w");
    let actors: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "watch")
        .filter_map(|e| e["actor"].as_str())
        .collect();
    assert!(actors.iter().all(|a| *a == "system:watch"), "{actors:?}");
}

#[test]
fn a_fix_to_a_crashed_app_starts_it_and_an_import_keeps_the_watch() {
    let env = Env::new();
    let project = env.path("broken");
    fs::create_dir_all(&project).unwrap();
    let cwd = project.to_str().unwrap();
    env.ok(&[
        "start",
        "--name",
        "b",
        "--cwd",
        cwd,
        "--restart",
        "never",
        "--watch=.",
        "--ignore-watch",
        "*.log tmp",
        "--watch-delay",
        "100",
        "--",
        "sh",
        "-c",
        "test -f fixed || exit 3; exec sleep 1000",
    ]);
    env.wait(20, "b to exit", || {
        let a = env.daemon_app("b");
        a["status"] == "stopped" || a["status"] == "errored"
    });
    armed(&env, "b");
    fs::write(project.join("fixed"), "yes").unwrap();
    env.wait(20, "the fix to start b", || {
        env.daemon_app("b")["status"] == "online"
    });
    let seen = watch_events(&env, "b");
    assert!(seen.iter().any(|d| d == "fixed changed"), "{seen:?}");
    // A pm2 file's watch fields, imported, stay a watch.
    let file = project.join("ecosystem.config.json");
    fs::write(
        &file,
        r#"{"apps": [{"name": "api", "script": "server.js", "watch": ["src"],
            "ignore_watch": ["*.log", "tmp"], "watch_delay": 100}]}"#,
    )
    .unwrap();
    let toml = env.ok(&["import", file.to_str().unwrap()]);
    assert!(toml.contains("watch = [\"src\"]"), "{toml}");
    assert!(
        toml.contains("ignore_watch = [\"*.log\", \"tmp\"]"),
        "{toml}"
    );
    assert!(toml.contains("watch_delay = 100"), "{toml}");
}

#[test]
fn a_watch_the_daemon_cannot_keep_says_why_in_the_events() {
    let env = Env::new();
    let project = env.path("gone");
    fs::create_dir_all(&project).unwrap();
    let cwd = project.to_str().unwrap();
    env.ok(&[
        "start",
        "--name",
        "g",
        "--cwd",
        cwd,
        "--watch=missing",
        "--",
        "sleep",
        "1000",
    ]);
    env.wait_status("g", "online");
    let seen = env.wait(20, "the watch to say it is off", || {
        let s = watch_events(&env, "g");
        (!s.is_empty()).then_some(s)
    });
    assert!(
        seen[0].starts_with("watch off:") && seen[0].contains("missing"),
        "{seen:?}"
    );
    // A glob that is not one is refused before anything changes.
    let e = env.fails(&[
        "start",
        "--name",
        "h",
        "--watch",
        "--ignore-watch",
        "a[b",
        "--",
        "sleep",
        "1",
    ]);
    assert!(e.contains("a[b"), "{e}");
    assert!(env.status().iter().all(|a| a["name"] != "h"));
}
