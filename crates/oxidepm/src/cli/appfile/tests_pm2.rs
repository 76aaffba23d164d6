//! pm2's habits in app files: `--env <name>`, numbers as strings, log and
//! pid file paths, pm2-logrotate's keys.

use super::*;

const ORIGIN: &str = "/srv/shop/ecosystem.config.json";

/// Loads `text` as `load_with` loads the file `ORIGIN`.
fn load(text: &str, env: Option<&str>) -> Result<Loaded, String> {
    let options = LoadOptions {
        env: env.map(str::to_string),
        only: Vec::new(),
    };
    let (loaded, sections) =
        from_text(text, Format::Json, Path::new(ORIGIN), &options).map_err(|e| e.to_string())?;
    if let Some(env) = env {
        pm2::check_env_section(Path::new(ORIGIN), env, &sections).map_err(|e| e.to_string())?;
    }
    Ok(loaded)
}

const SECTIONS: &str = r#"{"apps": [
  {"name": "api", "script": "api.js",
   "env": {"NODE_ENV": "development", "PORT": 3000, "DEBUG": "api:*"},
   "env_production": {"NODE_ENV": "production", "PORT": 8080},
   "env_staging": {"NODE_ENV": "staging"}},
  {"name": "worker", "script": "worker.js", "env": {"NODE_ENV": "development"}}
]}"#;

#[test]
fn an_env_section_is_merged_over_env_when_chosen() {
    let apps = load(SECTIONS, None).unwrap().apps;
    assert_eq!(apps[0].env["NODE_ENV"], "development");
    assert_eq!(apps[0].env["PORT"], "3000");

    let apps = load(SECTIONS, Some("production")).unwrap().apps;
    let api = &apps[0].env;
    assert_eq!(
        (
            api["NODE_ENV"].as_str(),
            api["PORT"].as_str(),
            api["DEBUG"].as_str()
        ),
        ("production", "8080", "api:*"),
        "the section wins, what it does not set stays"
    );
    // An app without the section keeps its env, as in pm2.
    assert_eq!(apps[1].env["NODE_ENV"], "development");
}

#[test]
fn an_env_no_app_has_is_refused_naming_those_there_are() {
    let e = load(SECTIONS, Some("prod")).unwrap_err();
    assert!(
        e.starts_with(&format!("{ORIGIN}: --env prod: no app of this file has an \"env_prod\" section; its sections are env_production, env_staging")),
        "{e}"
    );
    let e = load(
        r#"{"apps": [{"name": "a", "script": "a.js"}]}"#,
        Some("production"),
    )
    .unwrap_err();
    assert!(e.contains("it has no env_<name> section"), "{e}");
}

#[test]
fn a_bad_value_in_the_chosen_section_is_an_error_and_others_are_not_read() {
    let text = r#"{"apps": [{"name": "a", "script": "a.js",
        "env_production": {"1BAD": "x"}, "env_other": {"2BAD": "y"}}]}"#;
    assert!(load(text, None).is_ok());
    let e = load(text, Some("production")).unwrap_err();
    assert!(e.contains("app \"a\": field \"env_production\""), "{e}");
}

#[test]
fn numbers_as_strings_are_numbers_as_in_pm2() {
    let text = r#"{"apps": [{"name": "a", "script": "a.js", "instances": "1",
        "max_restarts": "10", "kill_timeout": "3000", "restart_delay": "250",
        "min_uptime": "5000", "max_memory_restart": "300M", "retain": "7"}]}"#;
    let app = &load(text, None).unwrap().apps[0];
    assert_eq!(app.max_restarts, 10);
    assert_eq!(app.kill_timeout_ms, 3000);
    assert_eq!(app.restart_delay_ms, 250);
    assert_eq!(app.min_uptime_ms, 5000);
    assert_eq!(app.max_memory_bytes, Some(300 << 20));
    assert_eq!(app.log_keep, 7);
    let e = load(
        r#"{"apps": [{"name": "a", "script": "a.js", "max_restarts": "ten"}]}"#,
        None,
    )
    .unwrap_err();
    assert!(
        e.contains("field \"max_restarts\": invalid type: string \"ten\", expected a whole number"),
        "{e}"
    );
    let apps = load(
        r#"{"apps": [{"name": "a", "script": "a.js", "instances": "4"}]}"#,
        None,
    )
    .unwrap()
    .apps;
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a-0", "a-1", "a-2", "a-3"]);
    let e = load(
        r#"{"apps": [{"name": "a", "script": "a.js", "instances": "max"}]}"#,
        None,
    )
    .unwrap_err();
    assert!(e.contains("cluster mode"), "{e}");
}

#[test]
fn node_args_and_args_as_strings_or_lists() {
    let text = r#"{"apps": [
      {"name": "a", "script": "a.js", "node_args": "--inspect --max-old-space-size=512",
       "args": "--title 'my app' -v"},
      {"name": "b", "script": "b.js", "interpreter_args": ["--no-warnings"], "args": ["x y", 3]}
    ]}"#;
    let apps = load(text, None).unwrap().apps;
    assert_eq!(apps[0].command, "node");
    assert_eq!(
        apps[0].args,
        [
            "--inspect",
            "--max-old-space-size=512",
            "/srv/shop/a.js",
            "--title",
            "my app",
            "-v"
        ]
    );
    assert_eq!(
        apps[1].args,
        ["--no-warnings", "/srv/shop/b.js", "x y", "3"]
    );
}

#[test]
fn log_and_pid_paths_are_accepted_with_a_note_each() {
    // The name comes after the paths: the notes still name the app.
    let text = r#"{"apps": [{"script": "a.js", "out_file": "/var/log/a.out",
        "error": "./a.err", "log_file": "a.log", "pid_file": "/run/a.pid", "name": "api"}]}"#;
    let loaded = load(text, None).unwrap();
    let fields: Vec<&str> = loaded.notes.iter().map(|n| n.field.as_str()).collect();
    assert_eq!(fields, ["out_file", "error", "log_file", "pid_file"]);
    assert!(loaded.notes.iter().all(|n| n.app.as_deref() == Some("api")));
    assert!(loaded.notes[0].message.contains("logs/api-out.log"));
    assert!(loaded.notes[1].message.contains("logs/api-err.log"));
    // pm2's aliases of one field are the same field.
    let e = load(
        r#"{"apps": [{"name": "a", "script": "a.js", "out_file": "x", "output": "y"}]}"#,
        None,
    )
    .unwrap_err();
    assert!(
        e.contains("\"out_file\" and \"output\" are the same field"),
        "{e}"
    );
}

#[test]
fn logrotate_keys_set_rotation_per_app_and_for_the_file() {
    let text = r#"{"max_size": "5M", "retain": 3, "apps": [
      {"name": "a", "script": "a.js"},
      {"name": "b", "script": "b.js", "max_size": "1M", "retain": "9"},
      {"name": "c", "script": "c.js", "log_files_kept": 2}
    ]}"#;
    let apps = load(text, None).unwrap().apps;
    let rotation: Vec<(u64, u32)> = apps.iter().map(|a| (a.log_max_bytes, a.log_keep)).collect();
    assert_eq!(rotation, [(5 << 20, 3), (1 << 20, 9), (5 << 20, 2)]);
    let e = load(
        r#"{"apps": [{"name": "a", "script": "a.js", "max_size": "1M", "log_max_size": "2M"}]}"#,
        None,
    )
    .unwrap_err();
    assert!(e.contains("are the same field"), "{e}");
    let e = load(r#"{"retain": "all", "apps": []}"#, None).unwrap_err();
    assert!(e.contains("field \"retain\""), "{e}");
}

#[test]
fn only_keeps_the_notes_of_the_apps_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ecosystem.config.json");
    std::fs::write(
        &path,
        r#"{"apps": [{"name": "a", "script": "a.js", "pid_file": "a.pid"},
                     {"name": "b", "script": "b.js", "pid_file": "b.pid"}]}"#,
    )
    .unwrap();
    let options = LoadOptions {
        env: None,
        only: vec!["b".into()],
    };
    let loaded = load_with(&path, &options).unwrap();
    assert_eq!(loaded.apps.len(), 1);
    assert_eq!(loaded.notes.len(), 1);
    assert_eq!(loaded.notes[0].app.as_deref(), Some("b"));
}

#[test]
fn pm2_schema_aliases_and_shortcuts() {
    let text = r#"{"apps": [
      {"name": "a", "exec": "a.js", "interpreterArgs": "--no-warnings", "port": 3000,
       "disable_logs": true, "windowsHide": true, "trace": false},
      {"name": "b", "script": "b.js", "port": 3000, "env": {"PORT": "4000"},
       "env_production": {"PORT": 5000}, "disable_logs": false}
    ]}"#;
    let loaded = load(text, Some("production")).unwrap();
    let a = &loaded.apps[0];
    assert_eq!(a.args, ["--no-warnings", "/srv/shop/a.js"]);
    assert_eq!(a.env["PORT"], "3000");
    // env wins over port, and the chosen section over env.
    assert_eq!(loaded.apps[1].env["PORT"], "5000");
    let notes: Vec<(&str, &str)> = loaded
        .notes
        .iter()
        .map(|n| (n.app.as_deref().unwrap(), n.field.as_str()))
        .collect();
    assert_eq!(notes, [("a", "disable_logs")]);
}

#[test]
fn javascript_is_a_config_file_only_when_named_like_one() {
    for name in [
        "ecosystem.config.js",
        "pm2.config.cjs",
        "x/ecosystem.config.mjs",
        "ECO.CONFIG.JS",
    ] {
        assert_eq!(
            Format::from_path(Path::new(name)),
            Some(Format::EcosystemJs),
            "{name}"
        );
    }
    for name in ["app.js", "server.mjs", "config.js", "ecosystem.js"] {
        assert_eq!(Format::from_path(Path::new(name)), None, "{name}");
    }
}

#[test]
fn a_file_that_is_one_app_is_read_as_pm2_reads_it() {
    let text = r#"{"name": "api", "script": "server.js",
        "env": {"PORT": "3000"}, "env_production": {"PORT": "80"}}"#;
    let loaded = load(text, Some("production")).unwrap();
    assert_eq!(loaded.apps.len(), 1);
    let app = &loaded.apps[0];
    assert_eq!(app.name, "api");
    assert_eq!(app.env.get("PORT").map(String::as_str), Some("80"));
    // A wrong value keeps the file's own line and column.
    let e = load("{\"script\": \"a.js\", \"max_restarts\": \"ten\"}", None).unwrap_err();
    // serde_json points at the end of the value: column 40 of the file.
    assert!(e.starts_with(&format!("{ORIGIN}:1:40: ")), "{e}");
    let e = load("{\"script\": \"a.js\",\n \"max_restarts\": \"ten\"}", None).unwrap_err();
    assert!(e.starts_with(&format!("{ORIGIN}:2:")), "{e}");
    // An object that is neither an app nor a file of apps is still refused.
    let e = load(r#"{"name": "api"}"#, None).unwrap_err();
    assert!(e.contains("apps"), "{e}");
}
