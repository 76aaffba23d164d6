use super::*;
use std::fs;

fn spec(paths: &[&str], ignore: &[&str]) -> WatchSpec {
    WatchSpec {
        paths: paths.iter().map(|s| s.to_string()).collect(),
        ignore: ignore.iter().map(|s| s.to_string()).collect(),
        delay_ms: 10,
    }
}

#[test]
fn dependencies_and_version_control_are_never_watched() {
    let ig = Ignore::new(&spec(&[], &[])).unwrap();
    assert!(ig.ignores(Path::new("node_modules")));
    assert!(ig.ignores(Path::new("web/node_modules/left-pad/index.js")));
    assert!(ig.ignores(Path::new(".git/HEAD")));
    assert!(ig.ignores(Path::new("app/__pycache__/x.pyc")));
    assert!(!ig.ignores(Path::new("src/index.js")));
    assert!(!ig.ignores(Path::new(".env")));
}

#[test]
fn a_name_matches_any_component_and_a_path_pattern_the_path() {
    let ig = Ignore::new(&spec(&[], &["*.log", "tmp/*", "dist/"])).unwrap();
    assert!(ig.ignores(Path::new("out.log")));
    assert!(ig.ignores(Path::new("logs/today.log")));
    assert!(ig.ignores(Path::new("tmp/x")));
    assert!(
        ig.ignores(Path::new("tmp/x/y")),
        "under an ignored directory"
    );
    assert!(
        !ig.ignores(Path::new("src/tmp/x")),
        "a path pattern is anchored"
    );
    assert!(ig.ignores(Path::new("dist")));
    assert!(ig.ignores(Path::new("web/dist/a.js")));
    assert!(!ig.ignores(Path::new("src/app.js")));
}

#[test]
fn a_pattern_that_is_not_a_glob_is_refused_with_its_name() {
    let e = Ignore::new(&spec(&[], &["a[b"])).unwrap_err();
    assert!(e.contains("\"a[b\""), "{e}");
}

#[test]
fn a_change_restarts_a_running_app_and_starts_one_that_ended_by_itself() {
    assert_eq!(on_change(Status::Online, false, false), OnChange::Restart);
    for st in [Status::Errored, Status::Stopped] {
        assert_eq!(on_change(st, false, false), OnChange::Start);
        assert_eq!(
            on_change(st, true, false),
            OnChange::Nothing,
            "a request stopped it"
        );
    }
    for st in [Status::Starting, Status::Stopping] {
        assert_eq!(on_change(st, false, false), OnChange::Nothing);
    }
    assert_eq!(on_change(Status::Online, false, true), OnChange::Nothing);
}

#[test]
fn the_tree_leaves_out_ignored_directories_and_links() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    fs::create_dir_all(root.join("src/lib")).unwrap();
    fs::create_dir_all(root.join("node_modules/a/b")).unwrap();
    fs::create_dir_all(root.join("logs")).unwrap();
    std::os::unix::fs::symlink("/", root.join("everything")).unwrap();
    let (_fd, t) = Tree::new(&spec(&[], &["logs"]), root, None).unwrap();
    // The root, src and src/lib.
    assert_eq!(t.dirs, 3);
    let rels: Vec<_> = t.watched.values().map(|(_, r)| r.clone()).collect();
    assert!(rels.contains(&PathBuf::from("src/lib")), "{rels:?}");
    assert!(!rels
        .iter()
        .any(|r| r.starts_with("node_modules") || r.starts_with("everything")));
}

#[test]
fn a_tree_larger_than_the_bound_is_refused_whole_with_what_to_narrow() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..=MAX_WATCHED_DIRS {
        fs::create_dir(d.path().join(format!("d{i}"))).unwrap();
    }
    let e = match Tree::new(&spec(&[], &[]), d.path(), None) {
        Err(e) => e,
        Ok(_) => panic!("a tree over the bound was watched"),
    };
    assert!(matches!(e, WatchError::TooMany { .. }), "{e}");
    assert!(e.to_string().contains("ignore_watch"), "{e}");
}

#[test]
fn a_missing_path_is_an_error_that_names_it() {
    let d = tempfile::tempdir().unwrap();
    let e = match Tree::new(&spec(&["nope"], &[]), d.path(), None) {
        Err(e) => e,
        Ok(_) => panic!("a missing path was watched"),
    };
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn changes_are_named_from_the_cwd_and_new_directories_are_watched() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    fs::create_dir(root.join("src")).unwrap();
    let (_fd, mut t) = Tree::new(&spec(&[], &[]), root, None).unwrap();
    let wd_of = |t: &Tree, rel: &str| {
        t.watched
            .iter()
            .find(|(_, (_, r))| r == Path::new(rel))
            .map(|(wd, _)| wd.clone())
            .unwrap()
    };
    let src = wd_of(&t, "src");
    assert_eq!(
        t.change(&src, EventMask::MODIFY, Some(Path::new("a.js"))),
        Some("src/a.js".to_string())
    );
    assert_eq!(
        t.change(&src, EventMask::MODIFY, Some(Path::new("x.pyc"))),
        Some("src/x.pyc".into())
    );
    let top = wd_of(&t, "");
    assert_eq!(
        t.change(&top, EventMask::CREATE, Some(Path::new("node_modules"))),
        None,
        "ignored"
    );
    fs::create_dir_all(root.join("new/deeper")).unwrap();
    let before = t.dirs;
    assert!(t
        .change(
            &top,
            EventMask::CREATE | EventMask::ISDIR,
            Some(Path::new("new"))
        )
        .is_some());
    assert_eq!(t.dirs, before + 2, "new and new/deeper are watched");
}

#[test]
fn a_directory_swapped_for_a_link_is_not_entered() {
    let d = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    fs::create_dir_all(elsewhere.path().join("secret/deeper")).unwrap();
    let root = d.path();
    let (_fd, mut t) = Tree::new(&spec(&[], &[]), root, None).unwrap();
    let top = t
        .watched
        .iter()
        .find(|(_, (_, r))| r.as_os_str().is_empty())
        .map(|(wd, _)| wd.clone())
        .unwrap();
    // Created as a directory, a link by the time the walk comes to it.
    std::os::unix::fs::symlink(elsewhere.path(), root.join("new")).unwrap();
    let before = t.dirs;
    t.change(
        &top,
        EventMask::CREATE | EventMask::ISDIR,
        Some(Path::new("new")),
    );
    assert_eq!(t.dirs, before, "nothing behind the link is watched");
}
