use super::*;
use oxidepm_proto::Class;

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    (dir, store)
}

#[test]
fn apps_round_trip_and_survive_reopen() {
    let (dir, store) = temp_store();
    let spec = AppSpec::new("web", "sleep", vec!["10".into()]);
    let human = Actor::new(Class::Human, "cli");
    let id = store.insert_app(&spec, &human).unwrap();
    let rt = Runtime {
        desired_running: true,
        status: Status::Online,
        pid: Some(42),
        pid_start: Some(7),
        boot_id: Some("b".into()),
        restarts: 3,
        started_at_ms: Some(1),
        last_exit: None,
        run_id: Some(9),
        stopped_by: Some(Class::Human),
    };
    store.save_runtime(id, &rt).unwrap();
    drop(store);
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let apps = store.load_apps().unwrap();
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].spec, spec);
    assert_eq!(apps[0].runtime, rt);
    assert_eq!(apps[0].defined_by, human);
    assert!(store.insert_app(&spec, &human).is_err(), "names are unique");
}

#[test]
fn events_and_audit_filters() {
    let (_dir, store) = temp_store();
    let ai = Actor::new(Class::Ai, "assistant");
    for i in 0..5 {
        store
            .record_event(1, "web", "started", &ai, &format!("{i}"))
            .unwrap();
    }
    store
        .record_event(2, "db", "stopped", &Actor::system("crash"), "")
        .unwrap();
    let ev = store.events(Some(&[1]), 3).unwrap();
    assert_eq!(ev.len(), 3);
    assert_eq!(ev[2].detail, "4", "oldest first, most recent kept");
    assert_eq!(store.events(None, 100).unwrap().len(), 6);
    let apps = vec!["web".to_string()];
    store
        .record_audit(&NewAudit {
            actor: &ai,
            socket: "agent",
            op: "stop",
            apps: &apps,
            outcome: "E_PROTECTED",
            message: "no",
            via: None,
        })
        .unwrap();
    let f = AuditFilter {
        app: Some("web".into()),
        actor: Some("ai:assistant".into()),
        since_ms: None,
        limit: 10,
        ..Default::default()
    };
    assert_eq!(store.audit(&f).unwrap().len(), 1);
    // A class alone takes every label of it, and no other class whose
    // name it begins.
    let class = |c: &str| AuditFilter {
        actor: Some(c.into()),
        limit: 10,
        ..Default::default()
    };
    assert_eq!(store.audit(&class("ai")).unwrap().len(), 1);
    assert!(store.audit(&class("a")).unwrap().is_empty());
    assert!(store.audit(&class("human")).unwrap().is_empty());
    let past = AuditFilter {
        until_ms: Some(0),
        limit: 10,
        ..Default::default()
    };
    assert!(store.audit(&past).unwrap().is_empty());
    let f = AuditFilter {
        app: Some("db".into()),
        limit: 10,
        ..Default::default()
    };
    assert!(store.audit(&f).unwrap().is_empty());
}

#[test]
fn snapshots_remember_who_saved_them() {
    let (_dir, store) = temp_store();
    let chat = Actor::new(Class::Adapter, "chat");
    assert_eq!(store.snapshot_saved_by("default").unwrap(), None);
    store.save_snapshot("default", &[], &chat).unwrap();
    assert_eq!(
        store.snapshot_saved_by("default").unwrap(),
        Some(Some(chat))
    );
    // A snapshot saved before oxidepm recorded who saved it.
    store
        .conn
        .execute("UPDATE snapshots SET saved_by = NULL", [])
        .unwrap();
    assert_eq!(store.snapshot_saved_by("default").unwrap(), Some(None));
}

#[test]
fn a_version_2_state_is_migrated_with_nobody_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        // The tables of schema version 2 that version 3 changes.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE apps (
               id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
               spec TEXT NOT NULL, defined_by TEXT NOT NULL, created_at INTEGER NOT NULL,
               desired INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL,
               pid INTEGER, pid_start INTEGER, boot_id TEXT,
               restarts INTEGER NOT NULL DEFAULT 0,
               started_at INTEGER, last_exit INTEGER, run_id INTEGER);
             CREATE TABLE snapshots (name TEXT PRIMARY KEY, at INTEGER NOT NULL, apps TEXT NOT NULL);
             INSERT INTO snapshots VALUES ('default', 0, '[]');
             PRAGMA user_version = 2;",
        )
        .unwrap();
        let spec = serde_json::to_string(&AppSpec::new("web", "sleep", vec![])).unwrap();
        conn.execute(
            "INSERT INTO apps (name, spec, defined_by, created_at, status) VALUES ('web', ?1, 'human:cli', 0, 'stopped')",
            params![spec],
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let apps = store.load_apps().unwrap();
    assert_eq!(apps[0].runtime.stopped_by, None);
    assert_eq!(store.snapshot_saved_by("default").unwrap(), Some(None));
}
