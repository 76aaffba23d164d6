use super::*;
use oxidepm_proto::{AppKind, DependencyCondition, RestartPolicy};

fn parse_ok(text: &str, format: Format) -> Vec<AppSpec> {
    match parse(text, format, Path::new("/srv/demo/apps.conf")) {
        Ok(apps) => apps,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn parse_err(text: &str, format: Format) -> String {
    let origin = match format {
        Format::Toml => "/srv/demo/apps.toml",
        Format::Yaml => "/srv/demo/apps.yaml",
        _ => "/srv/demo/apps.json",
    };
    match parse(text, format, Path::new(origin)) {
        Ok(apps) => panic!("expected an error, got {apps:?}"),
        Err(e) => e.to_string(),
    }
}

fn toml_app(fields: &str) -> String {
    format!("[[apps]]\nname = \"web\"\nscript = \"server\"\n{fields}\n")
}

const THREE_TOML: &str = include_str!("testdata/three.toml");

const THREE_YAML: &str = include_str!("testdata/three.yaml");

const THREE_JSON: &str = include_str!("testdata/three.json");

#[test]
fn the_three_formats_give_the_same_apps() {
    let toml = parse_ok(THREE_TOML, Format::Toml);
    assert_eq!(toml, parse_ok(THREE_YAML, Format::Yaml));
    assert_eq!(toml, parse_ok(THREE_JSON, Format::Json));

    let web = &toml[0];
    assert_eq!(web.command, "node");
    assert_eq!(
        web.args,
        [
            "/srv/demo/web/server.js",
            "--port",
            "8080",
            "--title",
            "a b"
        ]
    );
    assert_eq!(web.cwd.as_deref(), Some("/srv/demo/web"));
    assert_eq!(web.env["PORT"], "8080");
    assert_eq!(web.env["DEBUG"], "true");
    assert_eq!(web.max_memory_bytes, Some(200 << 20));
    assert_eq!(web.min_uptime_ms, 5000);
    assert_eq!(web.kill_timeout_ms, 3000);
    assert_eq!(web.stop_signal, "SIGINT");
    assert_eq!(web.cron_restart.as_deref(), Some("0 3 * * *"));
    assert_eq!(web.tags, ["front", "http", "shop"]);
    let health = web.health.as_ref().unwrap();
    assert_eq!(health.expect_status, Some(200));
    assert_eq!(
        (
            health.interval_ms,
            health.timeout_ms,
            health.retries,
            health.start_period_ms
        ),
        (10_000, 2000, 3, 0)
    );

    let worker = &toml[1];
    assert_eq!(worker.command, "/usr/bin/worker");
    assert_eq!(worker.args, ["--queue", "jobs", "3"]);
    assert_eq!(worker.cwd.as_deref(), Some("/srv/demo"));
    assert_eq!(worker.restart, RestartPolicy::OnFailure);
    assert_eq!(
        (
            worker.restart_delay_ms,
            worker.exp_backoff_ms,
            worker.max_restarts
        ),
        (1000, 250, 5)
    );
    assert!(!worker.log_timestamps);
    assert_eq!((worker.log_max_bytes, worker.log_keep), (10 << 20, 3));
    assert_eq!(worker.user.as_deref(), Some("www-data"));
    assert_eq!(worker.depends_on[0].condition, DependencyCondition::Started);
    assert_eq!(worker.depends_on[1].app, "db");
    assert_eq!(worker.depends_on[1].condition, DependencyCondition::Healthy);

    let cleanup = &toml[2];
    assert_eq!(cleanup.name, "cleanup");
    assert_eq!(cleanup.command, "python3");
    assert_eq!(cleanup.args, ["-u", "/srv/demo/jobs/cleanup.py"]);
    assert_eq!(cleanup.restart, RestartPolicy::Never);
    assert_eq!(cleanup.kind, AppKind::Agent);
    assert!(cleanup.protected && !cleanup.autostart);
    assert_eq!(cleanup.health.as_ref().unwrap().retries, 5);
}

#[test]
fn defaults_come_from_app_spec() {
    let apps = parse_ok(
        "[[apps]]\nscript = \"/bin/sleep\"\nargs = \"60\"\n",
        Format::Toml,
    );
    let mut expected = AppSpec::new("sleep", "/bin/sleep", vec!["60".into()]);
    expected.cwd = Some("/srv/demo".into());
    assert_eq!(apps, [expected]);
}

#[test]
fn a_pm2_ecosystem_file_loads_as_it_is() {
    let text = include_str!("testdata/ecosystem.config.json");
    let apps = parse_ok(text, Format::Json);
    let api = &apps[0];
    assert_eq!(api.command, "node");
    assert_eq!(
        api.args,
        [
            "--max-old-space-size=4096",
            "/var/www/api/dist/index.js",
            "--color"
        ]
    );
    assert_eq!(api.cwd.as_deref(), Some("/var/www/api"));
    assert_eq!(
        api.env.len(),
        2,
        "env_production is applied only with --env"
    );
    assert_eq!(api.env["NODE_ENV"], "development");
    assert_eq!(api.max_memory_bytes, Some(1 << 30));
    assert_eq!(api.restart, RestartPolicy::Always);
    assert_eq!((api.restart_delay_ms, api.kill_timeout_ms), (4000, 1600));
    assert_eq!(api.tags, ["backend"]);
    let next = &apps[1];
    assert_eq!(
        (next.command.as_str(), next.args.as_slice()),
        ("npm", &["start".to_string()][..])
    );
    assert_eq!(next.user.as_deref(), Some("deploy"));
}

#[test]
fn unknown_fields_name_file_line_app_and_field() {
    let toml = "[[apps]]\nname = \"web\"\nscirpt = \"server\"\n";
    let e = parse_err(toml, Format::Toml);
    assert!(
        e.starts_with("/srv/demo/apps.toml:3:1: app \"web\": unknown field \"scirpt\" (did you mean \"script\"?); expected one of name, script, args,"),
        "{e}"
    );

    let yaml = "apps:\n  - name: web\n    script: server\n    colour: red\n";
    let e = parse_err(yaml, Format::Yaml);
    assert!(
        e.starts_with(
            "/srv/demo/apps.yaml:4:5: app \"web\": unknown field \"colour\"; expected one of"
        ),
        "{e}"
    );

    let json = "{\"apps\": [\n {\"script\": \"a\"},\n {\"name\": \"b\",\n  \"bogus\": 1, \"script\": \"b\"}]}";
    let e = parse_err(json, Format::Json);
    assert!(
        e.starts_with("/srv/demo/apps.json:4:9: app \"b\": unknown field \"bogus\""),
        "{e}"
    );

    // Before the name is read, the app is still named.
    let e = parse_err(
        "[[apps]]\nbogus = 1\nname = \"late\"\nscript = \"x\"\n",
        Format::Toml,
    );
    assert!(e.contains("app \"late\": unknown field \"bogus\""), "{e}");
    let e = parse_err("[[apps]]\nbogus = 1\n", Format::Toml);
    assert!(e.contains(":2:1: app #1: unknown field"), "{e}");

    let e = parse_err("app = []\n", Format::Toml);
    assert!(
        e.contains("unknown top-level key \"app\" (did you mean \"apps\"?)"),
        "{e}"
    );
    let e = parse_err(
        "[[apps]]\nname = \"w\"\nscript = \"x\"\nhealth = { tcp = \"h:1\", intervl = 5 }\n",
        Format::Toml,
    );
    assert!(e.contains(":4:"), "{e}");
    assert!(e.contains("app \"w\": field \"health\": unknown health field \"intervl\" (did you mean \"interval\"?)"), "{e}");
}

#[test]
fn value_errors_point_at_the_value() {
    let e = parse_err(&toml_app("min_uptime = \"5 parsecs\""), Format::Toml);
    assert!(
        e.starts_with("/srv/demo/apps.toml:4:14: app \"web\": field \"min_uptime\": invalid duration \"5 parsecs\""),
        "{e}"
    );
    let e = parse_err(
        "apps:\n- name: web\n  script: x\n  max_memory_restart: 12Q\n",
        Format::Yaml,
    );
    assert!(e.starts_with("/srv/demo/apps.yaml:4:23: app \"web\": field \"max_memory_restart\": invalid size \"12Q\""), "{e}");
    let e = parse_err(
        "[{\"name\": \"web\", \"script\": \"x\",\n \"autorestart\": \"yes\"}]",
        Format::Json,
    );
    assert!(e.starts_with("/srv/demo/apps.json:2:"), "{e}");
    assert!(e.contains("app \"web\": field \"autorestart\": invalid type: string \"yes\", expected true or false"), "{e}");
    let e = parse_err(&toml_app("kill_timeout = -5"), Format::Toml);
    assert!(e.contains("field \"kill_timeout\": -5 is negative"), "{e}");
    let e = parse_err(&toml_app("restart_delay = \"30d\""), Format::Toml);
    assert!(e.contains("is too large; the maximum is 7days"), "{e}");
    let e = parse_err(&toml_app("max_memory_restart = 1000"), Format::Toml);
    assert!(
        e.contains("1000 bytes is too small; the minimum is 1M"),
        "{e}"
    );
    let e = parse_err(&toml_app("log_files_kept = \"three\""), Format::Toml);
    assert!(e.contains("expected a whole number"), "{e}");
    let e = parse_err(&toml_app("stop_signal = \"SIGFOO\""), Format::Toml);
    assert!(e.contains("unknown signal \"SIGFOO\""), "{e}");
    let e = parse_err(&toml_app("tags = [\"a b\"]"), Format::Toml);
    assert!(e.contains("invalid tag \"a b\""), "{e}");
    let e = parse_err(&toml_app("kind = \"system\""), Format::Toml);
    assert!(e.contains("reserved for the daemon"), "{e}");
    let e = parse_err(&toml_app("cron_restart = \"daily\""), Format::Toml);
    assert!(e.contains("has 1 fields"), "{e}");
    let e = parse_err(&toml_app("args = \"'unclosed\""), Format::Toml);
    assert!(e.contains("unclosed '"), "{e}");
    let e = parse_err(
        "{\"apps\": [{\"script\": \"x\", \"name\": \"a\"}]} x",
        Format::Json,
    );
    assert!(
        e.starts_with("/srv/demo/apps.json:1:42: trailing characters"),
        "{e}"
    );
}

#[test]
fn health_checks_are_validated() {
    let cases = [
        (
            "health = { expect_status = 200 }",
            "needs one of http, tcp or command",
        ),
        (
            "health = { http = \"http://h/\", tcp = \"h:1\" }",
            "not http and tcp",
        ),
        (
            "health = { tcp = \"h:1\", expect_status = 200 }",
            "expect_status applies only to http",
        ),
        (
            "health = { http = \"https://h/\" }",
            "https is not supported",
        ),
        ("health = { tcp = \"localhost\" }", "use \"host:port\""),
        ("health = { tcp = \"h:0\" }", "use \"host:port\""),
        ("health = { command = [] }", "the health command is empty"),
        ("health = { command = \"curl -f x\" }", "expected a list"),
        (
            "health = { http = \"http://h/\", expect_status = 700 }",
            "700 is too large",
        ),
        (
            "health = { http = \"http://h/\", interval = \"10ms\" }",
            "minimum is 100ms",
        ),
        (
            "health = { http = \"http://h/\", retries = 0 }",
            "0 is too small",
        ),
        (
            "health = { http = \"http://h/\", path = \"/x\" }",
            "unknown health field \"path\"",
        ),
    ];
    for (fields, expected) in cases {
        let e = parse_err(&toml_app(fields), Format::Toml);
        assert!(e.contains("field \"health"), "{fields}: {e}");
        assert!(e.contains(expected), "{fields}: {e}");
    }
    let apps = parse_ok(
        &toml_app("health = { tcp = \"[::1]:5432\", timeout = \"1s\", start_period = \"30s\" }"),
        Format::Toml,
    );
    let health = apps[0].health.as_ref().unwrap();
    assert_eq!(
        health.probe,
        oxidepm_proto::HealthProbe::Tcp("[::1]:5432".into())
    );
    assert_eq!(
        (
            health.interval_ms,
            health.timeout_ms,
            health.start_period_ms
        ),
        (5000, 1000, 30_000)
    );
}

#[test]
fn interpreters_are_inferred_as_pm2_does() {
    let cases = [
        ("script = \"app.js\"", "node", vec!["/srv/demo/app.js"]),
        (
            "script = \"app.mjs\"\nargs = [\"-v\"]",
            "node",
            vec!["/srv/demo/app.mjs", "-v"],
        ),
        (
            "script = \"lib/app.cjs\"",
            "node",
            vec!["/srv/demo/lib/app.cjs"],
        ),
        (
            "script = \"main.py\"\nnode_args = \"-X dev\"",
            "python3",
            vec!["-X", "dev", "/srv/demo/main.py"],
        ),
        (
            "script = \"run.rb\"\ninterpreter = \"ruby\"",
            "ruby",
            vec!["/srv/demo/run.rb"],
        ),
        (
            "script = \"app.js\"\ninterpreter = \"./bin/bun\"",
            "/srv/demo/bin/bun",
            vec!["/srv/demo/app.js"],
        ),
        (
            "script = \"app.js\"\ninterpreter = \"none\"",
            "app.js",
            vec![],
        ),
        ("script = \"./bin/server\"", "/srv/demo/bin/server", vec![]),
        ("script = \"redis-server\"", "redis-server", vec![]),
        ("script = \"/opt/x/run.sh\"", "/opt/x/run.sh", vec![]),
    ];
    for (fields, command, args) in cases {
        let apps = parse_ok(&format!("[[apps]]\nname = \"a\"\n{fields}\n"), Format::Toml);
        assert_eq!(apps[0].command, command, "{fields}");
        assert_eq!(apps[0].args, args, "{fields}");
    }
    let e = parse_err(
        "[[apps]]\nscript = \"server\"\ninterpreter_args = [\"-x\"]\n",
        Format::Toml,
    );
    assert!(
        e.contains("\"interpreter_args\" is set but \"server\" runs without an interpreter"),
        "{e}"
    );
}

#[test]
fn relative_paths_start_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("srv");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("tool"), "").unwrap();
    let text = "[[apps]]\nscript = \"tool\"\ncwd = \"srv/./\"\n\n[[apps]]\nscript = \"tool\"\nname = \"t2\"\ncwd = \"../elsewhere\"\n";
    let apps = parse(text, Format::Toml, &dir.path().join("apps.toml")).unwrap();
    let root = dir.path().to_str().unwrap();
    assert_eq!(apps[0].cwd, Some(format!("{root}/srv")));
    // A bare script found in the app's directory is that file, as in pm2.
    assert_eq!(apps[0].command, format!("{root}/srv/tool"));
    assert_eq!(apps[1].cwd, Some(format!("{root}/../elsewhere")));
    assert_eq!(apps[1].command, "tool");

    // A relative origin is taken from the current directory.
    let apps = parse_ok("[[apps]]\nscript = \"x\"\n", Format::Toml);
    assert_eq!(apps[0].cwd.as_deref(), Some("/srv/demo"));
    let here = std::env::current_dir().unwrap();
    let apps = parse(
        "[[apps]]\nscript = \"x\"\ncwd = \"sub\"\n",
        Format::Toml,
        Path::new("apps.toml"),
    )
    .unwrap();
    assert_eq!(
        apps[0].cwd,
        Some(here.join("sub").to_string_lossy().into_owned())
    );
}

#[test]
fn env_files_merge_under_env() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "# settings\nexport A=from-file\nB = 'single # kept'\nC=\"line1\\nline2\"\nD=plain # comment\nE=\"multi\nline\"\n\nF=\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("local.env"), "D=local\n").unwrap();
    let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = [\".env\", \"local.env\"]\nenv = { A = \"from-env\" }\n";
    let apps = parse(text, Format::Toml, &dir.path().join("apps.toml")).unwrap();
    let env = &apps[0].env;
    assert_eq!(env["A"], "from-env");
    assert_eq!(env["B"], "single # kept");
    assert_eq!(env["C"], "line1\nline2");
    assert_eq!(env["D"], "local");
    assert_eq!(env["E"], "multi\nline");
    assert_eq!(env["F"], "");
    assert_eq!(env.len(), 6);

    std::fs::write(dir.path().join("bad.env"), "A=1\nnot a line\n").unwrap();
    let e = read_env_file(&dir.path().join("bad.env")).unwrap_err();
    assert_eq!(e.line(), Some(2));
    assert!(
        e.to_string()
            .ends_with("bad.env:2: expected KEY=VALUE, found \"not a line\""),
        "{e}"
    );
    let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = \"bad.env\"\n";
    let e = parse(text, Format::Toml, &dir.path().join("apps.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("apps.toml:4:12: app \"a\": field \"env_file\": cannot load env file: "),
        "{e}"
    );
    assert!(e.contains("bad.env:2: expected KEY=VALUE"), "{e}");
    let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = \"missing.env\"\n";
    let e = parse(text, Format::Toml, &dir.path().join("apps.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.env: cannot read"), "{e}");
}

#[test]
fn pm2_fields_that_cannot_be_honoured_are_refused() {
    let cases = [
        (
            "instances = 300",
            "instances = 300 is too many; at most 256",
        ),
        ("instances = \"max\"", "cluster mode"),
        ("instances = 0", "cluster mode"),
        ("exec_mode = \"cluster\"", "cluster mode"),
        ("gid = \"www\"", "set \"user\""),
        ("stop_exit_codes = [0]", "on-failure"),
        ("shutdown_with_message = true", "stopped with a signal"),
        (
            "autorestart = false\nrestart = \"always\"",
            "conflicts with \"restart\" = \"always\"",
        ),
        ("autorestart = true\nrestart = \"never\"", "conflicts"),
        (
            "user = \"a\"\nuid = \"b\"",
            "\"user\" and \"uid\" are the same field; keep one",
        ),
        ("depends_on = [\"web\"]", "lists \"web\", the app itself"),
        ("depends_on = [\"db\", { app = \"db\" }]", "listed twice"),
        (
            "depends_on = [{ condition = \"healthy\" }]",
            "needs \"app\"",
        ),
        (
            "depends_on = [{ app = \"db\", condition = \"ready\" }]",
            "unknown condition",
        ),
    ];
    for (fields, expected) in cases {
        let e = parse_err(&toml_app(fields), Format::Toml);
        assert!(e.contains(expected), "{fields}: {e}");
    }
    // What pm2 would do anyway is accepted.
    parse_ok(&toml_app("instances = 1\nexec_mode = \"fork\"\nwatch = false\nshutdown_with_message = false\nautorestart = false\nrestart = \"never\""), Format::Toml);
}

#[test]
fn pm2_watch_fields_become_a_watch_of_the_app() {
    let json = |fields: &str| {
        format!("{{\"apps\": [{{\"name\": \"web\", \"script\": \"server\", {fields}}}]}}")
    };
    let watch = |fields: &str| parse_ok(&json(fields), Format::Json).remove(0).watch;
    let w = watch("\"watch\": true").unwrap();
    assert!(w.paths.is_empty(), "true watches the cwd");
    assert_eq!(w.delay_ms, 1000);
    let w = watch(
        "\"watch\": [\"src\", \"lib\"], \"ignore_watch\": [\"*.log\", \"tmp\"], \"watch_delay\": 250",
    )
    .unwrap();
    assert_eq!(w.paths, ["src", "lib"]);
    assert_eq!(w.ignore, ["*.log", "tmp"]);
    assert_eq!(w.delay_ms, 250);
    let w = watch("\"watch\": \"src\", \"ignore_watch\": \"logs\"").unwrap();
    assert_eq!(
        (w.paths, w.ignore),
        (vec!["src".to_string()], vec!["logs".to_string()])
    );
    assert_eq!(watch("\"watch\": false, \"ignore_watch\": [\"x\"]"), None);
    let e = parse_err(&json("\"watch\": 3"), Format::Json);
    assert!(e.contains("true, false, a path or a list of paths"), "{e}");
    let e = parse_err(
        &json("\"watch\": true, \"watch_delay\": 3600000"),
        Format::Json,
    );
    assert!(e.contains("watch_delay"), "{e}");
}

#[test]
fn names_are_checked() {
    let e = parse_err(
        "[[apps]]\nname = \"a\"\nscript = \"x\"\n[[apps]]\nname = \"a\"\nscript = \"y\"\n",
        Format::Toml,
    );
    assert!(e.starts_with("/srv/demo/apps.toml:5:8: app \"a\": field \"name\": app name \"a\" is used by an earlier app"), "{e}");
    let e = parse_err(
        "[[apps]]\nscript = \"/bin/x\"\n[[apps]]\nscript = \"/usr/bin/x\"\n",
        Format::Toml,
    );
    assert!(
        e.contains("app \"x\": no \"name\" is set and the name from the script, \"x\", is used"),
        "{e}"
    );
    let e = parse_err("[[apps]]\nname = \"all\"\nscript = \"x\"\n", Format::Toml);
    assert!(
        e.contains("field \"name\": \"all\" selects every app"),
        "{e}"
    );
    let e = parse_err("[[apps]]\nscript = \"/bin/.x\"\n", Format::Toml);
    assert!(e.contains("set \"name\""), "{e}");
    let e = parse_err("[[apps]]\nname = \"a\"\n", Format::Toml);
    assert!(e.contains("app \"a\": missing field \"script\""), "{e}");
}

#[test]
fn file_shapes() {
    for (text, format) in [
        ("", Format::Toml),
        ("apps = []", Format::Toml),
        ("apps: []", Format::Yaml),
        ("", Format::Yaml),
        ("[]", Format::Json),
        ("{\"apps\": []}", Format::Json),
    ] {
        let e = parse_err(text, format);
        assert!(e.contains(": no apps in this file; add "), "{text:?}: {e}");
    }
    assert_eq!(
        parse_ok("- script: /bin/a\n- script: /bin/b\n", Format::Yaml).len(),
        2
    );
    let e = parse_err("[apps]\nscript = \"x\"\n", Format::Toml);
    assert!(e.contains("expected a list of apps"), "{e}");
    let e = parse_err("{\"apps\": [}", Format::Json);
    assert!(e.starts_with("/srv/demo/apps.json:1:11: "), "{e}");
    let e = parse_err("apps:\n  - name: [\n", Format::Yaml);
    assert!(e.starts_with("/srv/demo/apps.yaml:"), "{e}");
}

#[test]
fn formats_come_from_the_extension() {
    assert_eq!(
        Format::from_path(Path::new("apps.toml")),
        Some(Format::Toml)
    );
    assert_eq!(
        Format::from_path(Path::new("a/apps.yml")),
        Some(Format::Yaml)
    );
    assert_eq!(
        Format::from_path(Path::new("apps.YAML")),
        Some(Format::Yaml)
    );
    assert_eq!(
        Format::from_path(Path::new("ecosystem.config.json")),
        Some(Format::Json)
    );
    assert_eq!(
        Format::from_path(Path::new("ecosystem.config.js")),
        Some(Format::EcosystemJs)
    );
    assert_eq!(
        Format::from_path(Path::new("web.service")),
        Some(Format::Systemd)
    );
    assert_eq!(
        Format::from_path(Path::new("supervisord.conf")),
        Some(Format::Supervisord)
    );
    assert_eq!(Format::from_path(Path::new("toml")), None);
    let e = load_with(Path::new("/nowhere/apps.toml"), &LoadOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nowhere/apps.toml: cannot read: "),
        "{e}"
    );
}

#[test]
fn load_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ecosystem.config.yaml");
    std::fs::write(&path, "apps:\n  - name: web\n    script: server.js\n").unwrap();
    let apps = load_with(&path, &LoadOptions::default()).unwrap().apps;
    assert_eq!(
        apps[0].args,
        [dir.path().join("server.js").to_string_lossy()]
    );
}

#[test]
fn yaml_anchors_and_merge_keys() {
    let text = "x-defaults: &defaults\n  autorestart: false\n  env: { A: 1 }\napps:\n  - <<: *defaults\n    name: web\n    script: /bin/web\n  - { <<: *defaults, name: api, script: /bin/api, env: { A: 2 } }\n";
    let apps = parse_ok(text, Format::Yaml);
    assert_eq!(apps[0].restart, RestartPolicy::Never);
    assert_eq!(apps[0].env["A"], "1");
    assert_eq!(apps[1].env["A"], "2");
    let e = parse_err(
        "x-d: &d\n  colour: red\napps:\n  - <<: *d\n    name: web\n    script: x\n",
        Format::Yaml,
    );
    assert!(
        e.starts_with("/srv/demo/apps.yaml: app \"web\": unknown field \"colour\""),
        "{e}"
    );
}

#[test]
fn instances_make_one_app_each() {
    let text = format!(
        "{}\n[[apps]]\nname = \"db\"\nscript = \"db\"\n",
        toml_app("instances = \"3\"\nexec_mode = \"fork\"\ntags = [\"front\"]")
    );
    let apps = parse_ok(&text, Format::Toml);
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["web-0", "web-1", "web-2", "db"]);
    for (i, a) in apps[..3].iter().enumerate() {
        assert_eq!(a.env.get("OXIDEPM_INSTANCE"), Some(&i.to_string()));
        assert_eq!(a.tags, ["front", "web"]);
        assert_eq!(oxidepm_proto::instance_of(a), Some(("web", i as u32)));
    }
    assert_eq!(oxidepm_proto::instance_of(&apps[3]), None);
    let e = parse_err(&toml_app("exec_mode = \"cluster\""), Format::Toml);
    assert!(e.contains("oxidepm runs separate processes"), "{e}");
}

#[test]
fn scripts_in_a_file_get_the_interpreter_start_gives_them() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plain.sh"), "echo hi\n").unwrap();
    let own = dir.path().join("own.sh");
    std::fs::write(&own, "#!/bin/bash\necho hi\n").unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("app.ts"), "console.log(1)\n").unwrap();
    let path = dir.path().join("apps.toml");
    let text = "[[apps]]\nscript = \"plain.sh\"\n[[apps]]\nscript = \"own.sh\"\n";
    let apps = parse(text, Format::Toml, &path).unwrap();
    assert_eq!(apps[0].command, "sh", "a plain .sh runs with sh");
    assert_eq!(
        apps[1].command,
        own.to_str().unwrap(),
        "its #! line runs it"
    );
    let e = parse("[[apps]]\nscript = \"app.ts\"\n", Format::Toml, &path).unwrap_err();
    assert!(e.to_string().contains("interpreter"), "{e}");
    let ok = parse(
        "[[apps]]\nscript = \"app.ts\"\ninterpreter = \"tsx\"\n",
        Format::Toml,
        &path,
    )
    .unwrap();
    assert_eq!(ok[0].command, "tsx");
}
