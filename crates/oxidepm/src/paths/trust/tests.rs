use super::*;
use std::os::unix::fs::symlink;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A fresh home `<tmp>/h` (0700) with all its directories.
fn home() -> (tempfile::TempDir, Home) {
    let t = tempfile::tempdir().unwrap();
    let home = Home::at(t.path().join("h"));
    for d in home.dirs() {
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
    }
    (t, home)
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn a_private_home_passes() {
    let (_t, home) = home();
    check_above(home.root()).unwrap();
    check_home(&home).unwrap();
    // What the lanes need: a home and lanes/ others may cross, not list.
    chmod(home.root(), 0o711);
    chmod(&home.lanes_dir(), 0o711);
    std::fs::write(home.state_db(), "").unwrap();
    chmod(&home.state_db(), 0o600);
    std::fs::write(home.config(), "").unwrap();
    chmod(&home.config(), 0o644);
    check_home(&home).unwrap();
}

#[test]
fn a_home_or_directory_others_can_write_is_refused() {
    for dir in home()
        .1
        .dirs()
        .iter()
        .map(|d| d.file_name().unwrap().to_owned())
    {
        for mode in [0o777, 0o770, 0o702, 0o1777] {
            let (_t, home) = home();
            let path = home.dirs().into_iter().find(|d| d.ends_with(&dir)).unwrap();
            chmod(&path, mode);
            let e = check_home(&home).unwrap_err();
            assert!(
                matches!(&e, HomeError::Writable { path: p, .. } if *p == path),
                "{dir:?} {mode:o}: {e}"
            );
            assert!(e.to_string().contains("chmod go-w"), "{e}");
        }
    }
}

#[test]
fn links_in_place_of_directories_and_written_files_are_refused() {
    for name in ["logs", "redis", "secrets", "lanes"] {
        let (t, home) = home();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let path = home.root().join(name);
        std::fs::remove_dir(&path).unwrap();
        symlink(&elsewhere, &path).unwrap();
        let e = check_home(&home).unwrap_err();
        assert!(
            matches!(&e, HomeError::Link { path: p, .. } if *p == path),
            "{e}"
        );
    }
    for file in ["state.db", "state.db-wal", "daemon.log", "daemon.lock"] {
        let (t, home) = home();
        let target = t.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        symlink(&target, home.root().join(file)).unwrap();
        let e = check_home(&home).unwrap_err();
        assert!(matches!(&e, HomeError::Link { .. }), "{file}: {e}");
    }
    // The home itself.
    let (t, home) = home();
    let link = t.path().join("link");
    symlink(home.root(), &link).unwrap();
    let e = check_home(&Home::at(link)).unwrap_err();
    assert!(matches!(&e, HomeError::Link { .. }), "{e}");
}

#[test]
fn a_written_file_others_can_write_or_of_the_wrong_type_is_refused() {
    let (_t, home) = home();
    std::fs::write(home.state_db(), "").unwrap();
    chmod(&home.state_db(), 0o666);
    assert!(matches!(check_home(&home), Err(HomeError::Writable { .. })));
    chmod(&home.state_db(), 0o600);
    std::fs::create_dir(home.daemon_log()).unwrap();
    assert!(matches!(
        check_home(&home),
        Err(HomeError::WrongType { .. })
    ));
}

#[test]
fn daemon_toml_may_be_a_link_to_a_file_only_its_owner_writes() {
    let (t, home) = home();
    let real = t.path().join("daemon.toml");
    std::fs::write(&real, "").unwrap();
    chmod(&real, 0o644);
    symlink(&real, home.config()).unwrap();
    check_home(&home).unwrap();
    chmod(&real, 0o664);
    assert!(matches!(check_home(&home), Err(HomeError::Writable { .. })));
}

#[test]
fn above_the_home_others_may_write_only_in_sticky_directories() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let root = shared.join("h");
    chmod(&shared, 0o1777);
    check_above(&root).unwrap();
    chmod(&shared, 0o777);
    let e = check_above(&root).unwrap_err();
    assert!(
        matches!(&e, HomeError::AboveWritable { path, .. } if *path == shared),
        "{e}"
    );
    // Also when the home and its parents do not exist yet.
    let e = check_above(&shared.join("a/b/h")).unwrap_err();
    assert!(matches!(e, HomeError::AboveWritable { .. }), "{e}");
    // Through a link: its target's directories are checked too.
    chmod(&shared, 0o700);
    let link = t.path().join("link");
    symlink(&shared, &link).unwrap();
    check_above(&link.join("sub/h")).unwrap();
    chmod(&shared, 0o777);
    assert!(check_above(&link.join("sub/h")).is_err());
}

#[test]
fn a_loop_of_links_is_refused() {
    let t = tempfile::tempdir().unwrap();
    symlink(t.path().join("b"), t.path().join("a")).unwrap();
    symlink(t.path().join("a"), t.path().join("b")).unwrap();
    let e = check_above(&t.path().join("a/h")).unwrap_err();
    assert!(matches!(e, HomeError::Loop { .. }), "{e}");
}

#[test]
fn a_home_owned_by_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a directory to another uid");
        return;
    }
    let other = 65534;
    for name in ["", "logs", "secrets"] {
        let (_t, home) = home();
        let path = home.root().join(name);
        std::os::unix::fs::chown(&path, Some(other), None).unwrap();
        let e = check_home(&home).unwrap_err();
        assert!(
            matches!(&e, HomeError::Owner { owner, .. } if *owner == other),
            "{name}: {e}"
        );
        assert!(e.to_string().contains("chown 0"), "{e}");
    }
    // Above the home, and a link on the way owned by another user.
    let t = tempfile::tempdir().unwrap();
    let theirs = t.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(other), None).unwrap();
    let e = check_above(&theirs.join("h")).unwrap_err();
    assert!(matches!(e, HomeError::AboveOwner { owner, .. } if owner == other));
    let mine = t.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    let link = t.path().join("link");
    symlink(&mine, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(other), None).unwrap();
    let e = check_above(&link.join("h")).unwrap_err();
    assert!(matches!(e, HomeError::AboveOwner { owner, .. } if owner == other));
}
