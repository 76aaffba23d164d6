use super::*;
use crate::cli::appfile::{load_with, to_toml, LoadOptions};
use oxidepm_proto::RestartPolicy;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/supervisord")
}

fn env(name: &str) -> Option<String> {
    (name == "PATH").then(|| "/usr/bin:/bin".to_string())
}

/// Writes `files` (name, text) into a fresh directory and loads the first.
fn load_text(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Loaded, AppFileError>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let result = load_in(&dir.path().join(files[0].0), &env);
    (dir, result)
}

fn error(files: &[(&str, &str)]) -> (String, Option<usize>) {
    match load_text(files).1 {
        Ok(loaded) => panic!("expected an error, got {:?}", loaded.apps),
        Err(e) => (e.to_string(), e.line()),
    }
}

fn has_note(loaded: &Loaded, app: Option<&str>, field: &str, says: &str) -> bool {
    loaded
        .notes
        .iter()
        .any(|n| n.app.as_deref() == app && n.field == field && n.message.contains(says))
}

#[test]
fn the_shop_fixture_maps_every_program() {
    let dir = fixtures();
    let loaded = load_in(&dir.join("supervisord.conf"), &env).unwrap();
    let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["clock_00", "clock_01", "web", "celery"],
        "priority order"
    );
    let here = dir.to_string_lossy();

    let clock = &loaded.apps[1];
    assert_eq!(clock.command, format!("{here}/bin/clock.sh"));
    assert_eq!(clock.args, ["--id", "1"]);
    assert_eq!(clock.cwd.as_deref(), Some(&*here));
    assert_eq!(clock.env["PATH"], "/opt/shop/bin:/usr/bin:/bin");
    assert_eq!(clock.env["GREETING"], "hello, world");
    assert_eq!(clock.env["OUT_DIR"], format!("{here}/out"));
    assert_eq!(clock.restart, RestartPolicy::Always);
    assert_eq!(clock.min_uptime_ms, 0);
    assert_eq!(clock.stop_signal, "SIGINT");
    assert_eq!(clock.kill_timeout_ms, 5000);
    assert_eq!(clock.max_restarts, 3, "supervisord's startretries default");
    assert_eq!(clock.log_keep, 10, "supervisord's backups default");
    assert!(clock.tags.is_empty());
    assert!(has_note(
        &loaded,
        Some("clock_00"),
        "stdout_logfile",
        "/dev/stdout"
    ));
    assert!(has_note(
        &loaded,
        Some("clock_01"),
        "redirect_stderr",
        "own"
    ));
    assert!(has_note(
        &loaded,
        Some("clock_00"),
        "stdout_logfile_maxbytes",
        "never rotate"
    ));

    let web = &loaded.apps[2];
    // Paths are kept as written (`..` and all), as supervisord passes them.
    assert_eq!(web.command, format!("{here}/conf.d/../bin/web.sh"));
    assert_eq!(
        web.args,
        [
            "--bind",
            "127.0.0.1:8000",
            "--workers",
            "3",
            "--access-logfile",
            "-",
            "shop.wsgi:application"
        ]
    );
    assert_eq!(
        web.cwd,
        Some(format!("{here}/conf.d/..")),
        "%(here)s of conf.d"
    );
    assert_eq!(web.restart, RestartPolicy::OnFailure, "unexpected");
    assert_eq!((web.max_restarts, web.kill_timeout_ms), (5, 30_000));
    assert_eq!((web.log_max_bytes, web.log_keep), (10 << 20, 3));
    assert_eq!(web.tags, ["shop"], "[group:shop]");
    assert!(has_note(
        &loaded,
        Some("web"),
        "stdout_logfile",
        "is not written"
    ));
    assert!(has_note(&loaded, Some("web"), "umask", "umask"));

    let celery = &loaded.apps[3];
    assert_eq!(
        celery.args.last().map(String::as_str),
        Some("worker1@%h"),
        "%% is a %"
    );
    assert_eq!(
        (celery.min_uptime_ms, celery.kill_timeout_ms),
        (10_000, 600_000)
    );
    assert_eq!(celery.env["C_FORCE_ROOT"], "false");

    for section in ["[supervisord]", "[unix_http_server]", "[supervisorctl]"] {
        assert!(has_note(&loaded, None, section, ""), "{section}");
    }
    assert!(has_note(&loaded, None, "[rpcinterface:supervisor]", ""));
    assert!(has_note(&loaded, None, "environment", "%(ENV_NAME)s"));
}

#[test]
fn every_fixture_round_trips_through_toml() {
    let dir = fixtures();
    for file in [
        "supervisord.conf",
        "conf.d/gunicorn.conf",
        "conf.d/celery.conf",
    ] {
        let path = dir.join(file);
        let loaded = load_in(&path, &env).unwrap();
        let text = to_toml::render(&loaded, &path);
        for note in &loaded.notes {
            assert!(
                text.contains(&format!("# {}: ", note.field)),
                "{file}: {note}"
            );
        }
        let out = tempfile::tempdir().unwrap();
        let toml = out.path().join("apps.toml");
        std::fs::write(&toml, &text).unwrap();
        let back = load_with(&toml, &LoadOptions::default()).unwrap();
        assert_eq!(back.apps, loaded.apps, "{file}:\n{text}");
    }
}

#[test]
fn only_selects_generated_processes() {
    let path = fixtures().join("supervisord.conf");
    let options = LoadOptions {
        env: None,
        only: vec!["clock_01".into(), "web".into()],
    };
    let loaded = load_with(&path, &options).unwrap();
    let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["clock_01", "web"]);
    assert!(loaded
        .notes
        .iter()
        .all(|n| n.app.as_deref() != Some("clock_00")));
}

#[test]
fn defaults_are_supervisords() {
    let (_dir, loaded) = load_text(&[("a.conf", "[program:a]\ncommand = sleep 100\n")]);
    let loaded = loaded.unwrap();
    let a = &loaded.apps[0];
    assert_eq!(
        (a.command.as_str(), a.args.as_slice()),
        ("sleep", &["100".to_string()][..])
    );
    assert_eq!(
        a.restart,
        RestartPolicy::OnFailure,
        "autorestart=unexpected"
    );
    assert_eq!(
        (a.max_restarts, a.min_uptime_ms, a.kill_timeout_ms),
        (3, 1000, 10_000)
    );
    assert_eq!((a.stop_signal.as_str(), a.log_keep), ("SIGTERM", 10));
    assert!(a.autostart);
    assert!(has_note(
        &loaded,
        Some("a"),
        "directory",
        "file's directory"
    ));
}

#[test]
fn values_map_one_by_one() {
    let (_dir, loaded) = load_text(&[(
        "a.conf",
        "[program:a]\ncommand = /bin/app \"two words\" 'x y'\nuser = www-data\n\
         autostart = false\nautorestart = false\nexitcodes = 0,2\nstopsignal = QUIT\n\
         stopasgroup = false\nstdout_logfile = NONE\nstderr_logfile_maxbytes = 1KB\n\
         serverurl = AUTO\nstdout_syslog = true\n",
    )]);
    let loaded = loaded.unwrap();
    let a = &loaded.apps[0];
    assert_eq!(a.args, ["two words", "x y"]);
    assert_eq!(a.user.as_deref(), Some("www-data"));
    assert!(!a.autostart);
    assert_eq!(a.restart, RestartPolicy::Never);
    assert_eq!(a.stop_signal, "SIGQUIT");
    assert_eq!(a.log_max_bytes, 1024);
    for (field, says) in [
        ("exitcodes", "0,2"),
        ("stopasgroup", "whole process group"),
        ("stdout_logfile", "NONE"),
        ("serverurl", "oxidepm"),
        ("stdout_syslog", "journald"),
    ] {
        assert!(
            has_note(&loaded, Some("a"), field, says),
            "{field}: {:?}",
            loaded.notes
        );
    }
}

#[test]
fn includes_are_followed_from_the_main_file_only() {
    let (_dir, loaded) = load_text(&[
        ("main.conf", "[include]\nfiles = more/*.ini none/*.conf\n"),
        (
            "more/b.ini",
            "[program:b]\ncommand=true\n[include]\nfiles=../x/*.conf\n",
        ),
        ("more/a.ini", "[program:a]\ncommand=true\n"),
        ("x/c.conf", "[program:c]\ncommand=true\n"),
    ]);
    let loaded = loaded.unwrap();
    let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(has_note(&loaded, None, "[include]", "not followed"));
    assert!(has_note(&loaded, None, "[include]", "no file matches"));

    let mut files = vec![(
        "main.conf".to_string(),
        "[include]\nfiles=d/*.conf\n".to_string(),
    )];
    for i in 0..=MAX_INCLUDED {
        files.push((
            format!("d/{i}.conf"),
            format!("[program:p{i}]\ncommand=true\n"),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let (message, line) = error(&files);
    assert!(message.contains("more than 256 files"), "{message}");
    assert_eq!(line, Some(2));
}

/// Files of a case: (name, text).
type Files<'a> = &'a [(&'a str, &'a str)];

#[test]
fn errors_name_the_line_and_what_to_do() {
    let cases: &[(Files, &str, Option<usize>)] = &[
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nenvironment=X=%(ENV_NOT_SET_HERE)s\n")],
            "NOT_SET_HERE is not set in the environment",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nnumprocs=0\n")],
            "must be at least 1",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nnumprocs=2\n")],
            "needs %(process_num) in process_name",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\n\nautorestart=sometimes\n")],
            "not true, false or unexpected",
            Some(4),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nautostart=maybe\n")],
            "not a boolean",
            Some(3),
        ),
        (&[("a.conf", "\n[program:a]\nuser=x\n")], "has no command", Some(2)),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app \"open\n")],
            "check its quotes",
            Some(2),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nenvironment=A=1,B\n")],
            "expected KEY=value",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nstopsignal=STOP\n")],
            "unknown signal",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nstopwaitsecs=soon\n")],
            "not a whole number",
            Some(3),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app %(nope)s\n")],
            "unknown name \"nope\"",
            Some(2),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=/bin/app\nprocess_name=x\n[program:b]\ncommand=/bin/app\nprocess_name=x\n")],
            "process name \"x\" is used twice",
            Some(4),
        ),
        (
            &[("a.conf", "[program:a]\ncommand=x\n[group:g]\nprograms=a,zzz\n")],
            "no [program:zzz] defines",
            Some(4),
        ),
        (&[("a.conf", "[program:a]\ncommand=x\n[include]\n")], "no files = setting", Some(3)),
        (&[("a.conf", "[supervisord]\nnodaemon=true\n")], "no [program:x] section", None),
        (&[("a.conf", "[program:a b]\ncommand=x\n")], "may only contain", Some(1)),
        (&[("a.conf", "command=x\n")], "outside any section", Some(1)),
    ];
    for (files, says, line) in cases {
        let (message, at) = error(files);
        assert!(message.contains(says), "{files:?}: {message}");
        assert_eq!(at, *line, "{files:?}: {message}");
    }
    let (message, _) = error(&[
        ("a.conf", "[include]\nfiles=b.conf\n"),
        ("b.conf", "[program:b]\ncommand=x\nstartsecs=-1\n"),
    ]);
    assert!(
        message.contains("b.conf:3:"),
        "the included file is named: {message}"
    );
}

#[test]
fn an_include_glob_through_symlink_loops_ends_quickly() {
    // Two links back to their own directory: a recursive walk would see
    // 2^depth paths. supervisord (Python's glob without recursive=True)
    // reads ** as *, one directory level.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("supervisord.conf");
    std::fs::write(
        &conf,
        "[include]\nfiles = loop/**/*.conf loop/**/none.conf\n[program:a]\ncommand = /bin/sleep 1\n",
    )
    .unwrap();
    let l = dir.path().join("loop");
    std::fs::create_dir(&l).unwrap();
    std::os::unix::fs::symlink(".", l.join("a")).unwrap();
    std::os::unix::fs::symlink(".", l.join("b")).unwrap();
    std::fs::create_dir(l.join("sub")).unwrap();
    std::fs::write(
        l.join("sub/x.conf"),
        "[program:x]\ncommand = /bin/sleep 1\n",
    )
    .unwrap();
    let loaded = load_in(&conf, &env).unwrap();
    let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a", "x"]);
}
