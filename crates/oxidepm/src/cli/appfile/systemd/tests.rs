use super::*;
use crate::cli::appfile::{load_with, to_toml, LoadOptions};
use oxidepm_proto::RestartPolicy;

/// Writes `files` (name, text; `@DIR@` stands for the directory) into a
/// fresh directory and loads the first.
fn load_units(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Loaded, AppFileError>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_string_lossy().into_owned();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text.replace("@DIR@", &root)).unwrap();
    }
    let result = load(&dir.path().join(files[0].0));
    (dir, result)
}

fn error(files: &[(&str, &str)]) -> (String, Option<usize>) {
    match load_units(files).1 {
        Ok(loaded) => panic!("expected an error, got {:?}", loaded.apps),
        Err(e) => (e.to_string(), e.line()),
    }
}

fn has_note(loaded: &Loaded, app: &str, field: &str, says: &str) -> bool {
    loaded
        .notes
        .iter()
        .any(|n| n.app.as_deref() == Some(app) && n.field == field && n.message.contains(says))
}

const API: &str = "[Unit]
Description=API
After=network.target db.service
Requires=db.service
Wants=cache.service

[Service]
Type=notify
WorkingDirectory=@DIR@
Environment=\"GREETING=hello world\" PORT=8080
Environment=OPTS=--quiet
EnvironmentFile=@DIR@/one.env
EnvironmentFile=-@DIR@/missing.env
EnvironmentFile=@DIR@/two.env
ExecStart=/usr/bin/api --port ${PORT} $OPTS --name=%N
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2s
TimeoutStopSec=20
KillSignal=SIGINT
MemoryMax=512M
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
";

const DB: &str = "[Unit]
Before=api.service

[Service]
ExecStart=/usr/bin/db
";

#[test]
fn a_service_maps_field_by_field() {
    let (dir, loaded) = load_units(&[
        ("api.service", API),
        ("db.service", DB),
        (
            "one.env",
            "OPTS=\"--verbose  --workers 2\"\nDATABASE_URL=postgres://db/app\n",
        ),
        (
            "two.env",
            "; systemd's comment\nDATABASE_URL=postgres://db/other\n",
        ),
    ]);
    let loaded = loaded.unwrap();
    let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["api", "db"], "db is pulled in by Requires=");
    let api = &loaded.apps[0];
    assert_eq!(api.command, "/usr/bin/api");
    assert_eq!(
        api.args,
        [
            "--port",
            "8080",
            "--verbose",
            "--workers",
            "2",
            "--name=api"
        ],
        "${{PORT}} is one word, $OPTS splits, files override Environment="
    );
    assert_eq!(api.cwd.as_deref(), Some(&*dir.path().to_string_lossy()));
    assert_eq!(api.env["GREETING"], "hello world");
    assert_eq!(
        api.env["DATABASE_URL"], "postgres://db/other",
        "later files win"
    );
    assert_eq!(api.restart, RestartPolicy::OnFailure);
    assert_eq!(api.restart_delay_ms, 2000);
    assert_eq!(api.kill_timeout_ms, 20_000, "a bare number is seconds");
    assert_eq!(api.stop_signal, "SIGINT");
    assert_eq!(api.max_memory_bytes, Some(512 << 20));
    let deps: Vec<&str> = api.depends_on.iter().map(|d| d.app.as_str()).collect();
    assert_eq!(deps, ["db"]);
    for (field, says) in [
        ("Type", "notify"),
        ("ExecReload", "not run"),
        ("MemoryMax", "restarted"),
        ("LimitNOFILE", "no equivalent"),
        ("EnvironmentFile", "missing.env does not exist: skipped"),
        ("network.target", "target"),
        ("cache.service", "not in this directory"),
        ("[Install] WantedBy", "oxidepm startup --write"),
    ] {
        assert!(
            has_note(&loaded, "api", field, says),
            "{field}: {:#?}",
            loaded.notes
        );
    }

    let db = &loaded.apps[1];
    assert_eq!(db.restart, RestartPolicy::Never, "systemd's Restart=no");
    assert_eq!((db.restart_delay_ms, db.kill_timeout_ms), (100, 90_000));
    assert_eq!(db.cwd.as_deref(), Some("/"));
    assert!(db.depends_on.is_empty());

    let text = to_toml::render(&loaded, &dir.path().join("api.service"));
    let toml = dir.path().join("apps.toml");
    std::fs::write(&toml, &text).unwrap();
    let back = load_with(&toml, &LoadOptions::default()).unwrap();
    assert_eq!(back.apps, loaded.apps, "{text}");
}

#[test]
fn before_orders_the_other_unit() {
    let (_dir, loaded) = load_units(&[
        (
            "db.service",
            "[Unit]\nWants=api.service\nBefore=api.service\n[Service]\nExecStart=/usr/bin/db\n",
        ),
        ("api.service", "[Service]\nExecStart=/usr/bin/api\n"),
    ]);
    let loaded = loaded.unwrap();
    let api = loaded.apps.iter().find(|a| a.name == "api").unwrap();
    assert_eq!(api.depends_on.len(), 1);
    assert_eq!(api.depends_on[0].app, "db");
    let db = &loaded.apps[0];
    assert_eq!(db.depends_on[0].app, "api", "Wants= pulls api in first");
}

#[test]
fn prefixes_and_optional_directories() {
    let (_dir, loaded) = load_units(&[(
        "a.service",
        "[Service]\nWorkingDirectory=-/nonexistent/dir\nExecStart=-@/usr/bin/app app-name $UNSET x$$y\n\
         Restart=on-abnormal\nTimeoutStopSec=infinity\nKillMode=mixed\n",
    )]);
    let loaded = loaded.unwrap();
    let a = &loaded.apps[0];
    assert_eq!(a.cwd.as_deref(), Some("/"));
    assert_eq!(a.args, ["x$y"]);
    assert_eq!(a.restart, RestartPolicy::OnFailure);
    assert_eq!(a.kill_timeout_ms, 7 * 24 * 3600 * 1000);
    for (field, says) in [
        ("WorkingDirectory", "does not exist"),
        ("ExecStart", "argv[0]"),
        ("ExecStart", "$UNSET is not set"),
        ("ExecStart", "-: a failing exit"),
        ("Restart", "on-abnormal"),
        ("TimeoutStopSec", "infinity"),
        ("KillMode", "mixed"),
    ] {
        assert!(
            has_note(&loaded, "a", field, says),
            "{field}: {:#?}",
            loaded.notes
        );
    }
    let (_dir, loaded) = load_units(&[(
        "b.service",
        "[Service]\nType=oneshot\nExecStart=:/usr/bin/job $NOT_EXPANDED\n",
    )]);
    let b = &loaded.unwrap().apps[0];
    assert_eq!(b.args, ["$NOT_EXPANDED"]);
    assert_eq!(b.restart, RestartPolicy::Never);
}

#[test]
fn errors_name_the_line_and_what_to_do() {
    let cases: &[(&str, &str, Option<usize>)] = &[
        (
            "[Service]\nType=forking\nExecStart=/usr/sbin/nginx\n",
            "foreground",
            Some(2),
        ),
        (
            "[Service]\nExecStart=/bin/app\nEnvironmentFile=@DIR@/none.env\n",
            "none.env to make it optional",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nEnvironmentFile=app.env\n",
            "not an absolute path",
            Some(3),
        ),
        ("[Service]\nExecStart=+/bin/app\n", "the + prefix", Some(2)),
        (
            "[Service]\nExecStart=/bin/app\nDynamicUser=yes\n",
            "set User= instead",
            Some(3),
        ),
        (
            "[Service]\nType=oneshot\nExecStart=/bin/a\nExecStart=/bin/b\n",
            "put the commands in a script",
            Some(4),
        ),
        ("[Unit]\nDescription=x\n", "no ExecStart=", None),
        (
            "[Service]\nExecStart=/bin/app\nRestart=sometimes\n",
            "unknown value \"sometimes\"",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nRestartSec=soon\n",
            "invalid time span",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nKillSignal=SIGSTOP\n",
            "unknown signal",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nEnvironment=JUSTAWORD\n",
            "is not KEY=value",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nMemoryMax=20%\n",
            "give a size",
            Some(3),
        ),
        (
            "[Service]\nExecStart=/bin/app\nWorkingDirectory=srv\n",
            "not an absolute path",
            Some(3),
        ),
        ("[Service]\nExecStart=bin/app\n", "is relative", Some(2)),
        (
            "[Service]\nExecStart=/bin/app \"open\n",
            "unclosed",
            Some(2),
        ),
        (
            "[Service]\nExecStart=/bin/app %Z\n",
            "%Z is not supported",
            Some(2),
        ),
        (
            // The error is in the env file (here the unit itself), at its line.
            "[Service]\nExecStart=/bin/app\nEnvironmentFile=@DIR@/app.service\n",
            "app.service:1: expected KEY=VALUE",
            Some(1),
        ),
        (
            "[Service]\nExecStart=/bin/a ; /bin/b\n",
            "several commands",
            Some(2),
        ),
        (
            "\n[Service]\nExecStart\n",
            "expected \"Key=Value\"",
            Some(3),
        ),
    ];
    for (text, says, line) in cases {
        let (message, at) = error(&[("app.service", text)]);
        assert!(message.contains(says), "{text}: {message}");
        assert_eq!(at, *line, "{text}: {message}");
    }
    let (message, _) = error(&[("web@.service", "[Service]\nExecStart=/bin/app\n")]);
    assert!(message.contains("is a template"), "{message}");
}

#[test]
fn a_short_exec_start_cannot_expand_to_gigabytes() {
    // 64 KiB of Environment=, referred to 1024 times: 64 MiB of command
    // line from a 70 KiB unit (and a few more references make it terabytes).
    let big = "x".repeat(64 << 10);
    let refs = "${A}".repeat(1024);
    let unit = format!("[Service]\nEnvironment=A={big}\nExecStart=/bin/echo {refs}\n");
    let (message, line) = error(&[("big.service", &unit)]);
    assert!(message.contains("longer than"), "{message}");
    assert_eq!(line, Some(3));
    let words = format!(
        "[Service]\nEnvironment=\"A={}\"\nExecStart=/bin/echo $A $A\n",
        "x ".repeat(8)
    );
    let (_dir, loaded) = load_units(&[("ok.service", &words)]);
    assert_eq!(loaded.unwrap().apps[0].args.len(), 16);
}

#[test]
fn an_environment_file_pattern_is_one_level_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let env = dir.path().join("env");
    std::fs::create_dir(&env).unwrap();
    // A symlink loop under the pattern's directory: never walked.
    std::os::unix::fs::symlink(".", env.join("a")).unwrap();
    std::os::unix::fs::symlink(".", env.join("b")).unwrap();
    std::fs::write(env.join("one.env"), "ONE=1\n").unwrap();
    let unit = format!("[Service]\nExecStart=/bin/true\nEnvironmentFile=-{d}/env/**/none.env\nEnvironmentFile={d}/env/**.env\n");
    let (_dir, loaded) = load_units(&[("one.service", &unit)]);
    let loaded = loaded.unwrap();
    assert_eq!(loaded.apps[0].env.get("ONE").map(String::as_str), Some("1"));
    for i in 0..65 {
        std::fs::write(env.join(format!("{i}.env")), "").unwrap();
    }
    let unit = format!("[Service]\nExecStart=/bin/true\nEnvironmentFile={d}/env/*.env\n");
    let (message, line) = error(&[("many.service", &unit)]);
    assert!(message.contains("more than 64 files"), "{message}");
    assert_eq!(line, Some(3));
}
