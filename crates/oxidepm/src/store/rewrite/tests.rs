use super::*;
use crate::store::Runtime;
use oxidepm_proto::{Actor, AppSpec, Status};
use std::process::Command;

fn running(pid: u32, run: i64) -> Runtime {
    Runtime {
        desired_running: true,
        status: Status::Online,
        pid: Some(pid),
        pid_start: Some(11),
        boot_id: Some("boot".into()),
        restarts: 2,
        started_at_ms: Some(5),
        last_exit: None,
        run_id: Some(run),
        stopped_by: None,
    }
}

/// What memory would hold: the apps as loaded, with `rt` for app `id`.
fn image_of(store: &Store, id: u64, rt: &Runtime) -> Image {
    let mut apps = store.load_apps().unwrap();
    for a in &mut apps {
        if a.id == id {
            a.runtime = rt.clone();
        }
    }
    Image {
        apps,
        sessions: vec![SessionRow {
            app_id: id,
            sid: 4242,
            leader_start: 11,
        }],
        boot_id: "boot".into(),
    }
}

/// `chattr ±i` on the database and its WAL files; false where the file
/// system or the user cannot.
fn immutable(db: &Path, on: bool) -> bool {
    let flag = if on { "+i" } else { "-i" };
    ["", "-wal", "-shm"].iter().all(|s| {
        let p = format!("{}{s}", db.display());
        !Path::new(&p).exists()
            || Command::new("chattr")
                .args([flag, &p])
                .status()
                .is_ok_and(|s| s.success())
    })
}

#[test]
fn a_deleted_db_is_rewritten_from_memory_with_the_same_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, db, human, web) = with_web(dir.path());
    let gone = store
        .insert_app(&AppSpec::new("gone", "sleep", vec![]), &human)
        .unwrap();
    store.delete_app(gone).unwrap();
    let run = start_run(&store, web, 4242, &human);
    store
        .record_event(web, "web", "started", &human, "pid 4242")
        .unwrap();
    let rt = running(4242, run);
    store.save_runtime(web, &rt).unwrap();
    assert!(store.check_file(true));
    for s in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{s}", db.display()));
    }
    // Still written, into the unlinked file: only the check tells.
    store.save_runtime(web, &rt).unwrap();
    assert!(!store.check_file(true));
    assert!(store.pending());
    let image = image_of(&store, web, &rt);
    store.catch_up(&image).unwrap();
    assert!(!store.pending());
    assert!(store.warning().unwrap().contains("rewritten from memory"));
    drop(store);
    let store = Store::open(&db).unwrap();
    let apps = store.load_apps().unwrap();
    assert_eq!(apps.len(), 1);
    assert_eq!((apps[0].id, &apps[0].runtime), (web, &rt));
    // The old file's record came along, and no id is handed out twice.
    assert_eq!(store.events(None, 10).unwrap().len(), 1);
    assert_eq!(store.sessions("boot").unwrap().len(), 1);
    let next = store
        .insert_app(&AppSpec::new("new", "sleep", vec![]), &human)
        .unwrap();
    assert!(next > gone, "app id {next} reused");
    assert!(start_run(&store, next, 1, &human) > run);
}

#[test]
fn a_truncated_db_is_rewritten_from_memory_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, db, human, web) = with_web(dir.path());
    let run = start_run(&store, web, 77, &human);
    let rt = running(77, run);
    store.save_runtime(web, &rt).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&db)
        .unwrap();
    assert!(!store.check_file(true));
    let image = image_of(&store, web, &rt);
    store.catch_up(&image).unwrap();
    drop(store);
    let store = Store::open(&db).unwrap();
    let apps = store.load_apps().unwrap();
    assert_eq!((apps[0].id, &apps[0].runtime), (web, &rt));
}

#[test]
fn failed_writes_are_owed_until_a_retry_lands_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, db, human, web) = with_web(dir.path());
    if !immutable(&db, true) {
        immutable(&db, false);
        eprintln!("skipped: chattr +i is not possible here (needs root and a file system with attributes)");
        return;
    }
    let before = store.write_failures();
    let run = start_run(&store, web, 99, &human);
    let rt = running(99, run);
    let failed = store.save_runtime(web, &rt).is_err();
    let _ = store.record_event(web, "web", "started", &human, "pid 99");
    let image = image_of(&store, web, &rt);
    let retried = store.catch_up(&image);
    immutable(&db, false);
    assert!(failed, "a write to an immutable state.db succeeded");
    assert!(store.write_failures() > before);
    assert!(retried.is_err());
    assert!(store.pending());
    let w = store.warning().unwrap();
    assert!(w.contains("state.db") && w.contains("chattr -i"), "{w}");
    store.catch_up(&image).unwrap();
    assert!(!store.pending());
    assert!(store.warning().is_none());
    drop(store);
    let store = Store::open(&db).unwrap();
    assert_eq!(store.load_apps().unwrap()[0].runtime, rt);
    assert_eq!(store.events(None, 10).unwrap().len(), 1);
    let runs: i64 = store
        .conn
        .query_row("SELECT count(*) FROM runs WHERE id = ?1", [run], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(runs, 1, "the run keeps the id memory has");
}

#[test]
fn a_db_overwritten_in_place_is_rewritten_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, db, human, web) = with_web(dir.path());
    let run = start_run(&store, web, 5, &human);
    let rt = running(5, run);
    store.save_runtime(web, &rt).unwrap();
    // Same inode, same size, garbage inside.
    let len = std::fs::metadata(&db).unwrap().len() as usize;
    std::fs::write(&db, vec![0x33; len]).unwrap();
    let image = image_of(&store, web, &rt);
    assert!(!store.check_file(true));
    store.catch_up(&image).unwrap();
    let aside = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.db.lost-") && !n.ends_with("-wal"))
        .count();
    assert_eq!(aside, 1, "what stood at the name is kept");
    drop(store);
    let store = Store::open(&db).unwrap();
    assert_eq!(store.load_apps().unwrap()[0].runtime, rt);
}

/// A run recorded as the daemon records one: its intent, then its pid.
fn start_run(store: &Store, app: u64, pid: u32, actor: &Actor) -> i64 {
    let mut rt = store
        .load_apps()
        .unwrap()
        .into_iter()
        .find(|a| a.id == app)
        .unwrap()
        .runtime;
    let run = store.begin_run(app, actor, &mut rt).unwrap();
    let _ = store.run_forked(run, pid);
    run
}

/// A store in `dir` (its state.db) with app "web" defined, the actor that
/// defined it and the app's id.
fn with_web(dir: &Path) -> (Store, std::path::PathBuf, Actor, u64) {
    let db = dir.join("state.db");
    let store = Store::open(&db).unwrap();
    let human = Actor::system("t");
    let web = store
        .insert_app(&AppSpec::new("web", "sleep", vec![]), &human)
        .unwrap();
    (store, db, human, web)
}
