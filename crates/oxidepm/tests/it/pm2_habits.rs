//! Small habits of pm2 and supervisorctl users: a group named without
//! `@`, `status` of an app file, and a `kill` that says what it did.

use crate::harness::Env;

#[test]
fn a_tag_named_bare_an_app_file_in_status_and_kill_say_what_they_mean() {
    let env = Env::new();
    env.ok(&[
        "start", "--name", "web-1", "--tag", "front", "--", "sleep", "1000",
    ]);
    // supervisorctl's `stop front:*` habit: the tag is named, not selected.
    let e = env.fails(&["stop", "front"]);
    assert!(e.contains("E_NOT_FOUND") && e.contains("`@front`"), "{e}");
    assert_eq!(env.app("web-1")["status"], "online", "nothing was stopped");
    let e = env.fails(&["stop", "nothing-like-it"]);
    assert!(!e.contains('@'), "no hint without such a tag: {e}");

    // `status <file>` as `restart <file>`: the file's apps.
    let file = env.path("apps.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"a\"\nscript = \"sleep\"\nargs = [\"1000\"]\n\
         [[apps]]\nname = \"b\"\nscript = \"sleep\"\nargs = [\"1000\"]\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    env.ok(&["start", file]);
    let listed = env.json(&["status", file]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"], "{listed}");

    let said = env.ok(&["kill"]);
    assert_eq!(
        said.trim(),
        "every app is stopped and the daemon has exited"
    );
}
