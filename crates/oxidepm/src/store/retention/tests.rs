use super::*;
use crate::store::{AuditFilter, NewAudit, Store};
use oxidepm_proto::{Actor, Class};

const DAY: i64 = 24 * 3600 * 1000;

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    (dir, store)
}

/// Prunes until nothing more is due, as the daemon's timer does.
fn prune_all(store: &Store, table: History, keep: Keep, now: i64) -> usize {
    let mut total = 0;
    loop {
        let n = store.prune(table, keep, now, 7).unwrap();
        total += n;
        if n < 7 {
            return total;
        }
    }
}

fn seqs(store: &Store) -> Vec<u64> {
    store
        .audit(&AuditFilter {
            limit: 10_000,
            ..AuditFilter::default()
        })
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect()
}

#[test]
fn the_newest_rows_are_kept_by_count() {
    let (_d, store) = temp_store();
    let now = 100 * DAY;
    for i in 0..50 {
        store.record_audit_at(now - 50 + i, "stop").unwrap();
        store.record_event_at(now - 50 + i, "web").unwrap();
    }
    let keep = Keep {
        max_rows: 20,
        max_age_ms: None,
    };
    assert_eq!(prune_all(&store, History::Audit, keep, now), 30);
    assert_eq!(store.history_rows(History::Audit).unwrap(), 20);
    assert_eq!(seqs(&store), (31..=50).collect::<Vec<_>>());
    // The other table is its own.
    assert_eq!(store.history_rows(History::Events).unwrap(), 50);
    assert_eq!(prune_all(&store, History::Events, keep, now), 30);
    let events = store.events(None, 1000).unwrap();
    assert_eq!(events.first().unwrap().seq, 31);
    // Nothing more is due: a second pass deletes nothing.
    assert_eq!(prune_all(&store, History::Audit, keep, now), 0);
    // New rows push the oldest out, never the new ones.
    store.record_audit_at(now, "start").unwrap();
    assert_eq!(prune_all(&store, History::Audit, keep, now), 1);
    assert_eq!(*seqs(&store).last().unwrap(), 51);
}

#[test]
fn rows_older_than_the_age_limit_go_and_younger_ones_stay() {
    let (_d, store) = temp_store();
    let now = 1000 * DAY;
    // 40 days old down to 1 day old, one a day.
    for age in (1..=40).rev() {
        store.record_audit_at(now - age * DAY, "stop").unwrap();
    }
    let keep = Keep {
        max_rows: 1_000_000,
        max_age_ms: Some(30 * DAY),
    };
    // Older than 30 days: ages 40..=31.
    assert_eq!(prune_all(&store, History::Audit, keep, now), 10);
    let rows = store
        .audit(&AuditFilter {
            limit: 100,
            ..AuditFilter::default()
        })
        .unwrap();
    assert_eq!(rows.len(), 30);
    let oldest = crate::timefmt::parse_rfc3339_ms(&rows[0].at).unwrap();
    assert_eq!(oldest, now - 30 * DAY);
    // No age limit keeps them all.
    let forever = Keep {
        max_rows: 1_000_000,
        max_age_ms: None,
    };
    assert_eq!(
        prune_all(&store, History::Audit, forever, now + 900 * DAY),
        0
    );
}

#[test]
fn a_batch_deletes_at_most_its_size() {
    let (_d, store) = temp_store();
    for i in 0..100 {
        store.record_event_at(i, "web").unwrap();
    }
    let keep = Keep {
        max_rows: 1,
        max_age_ms: None,
    };
    assert_eq!(store.prune(History::Events, keep, 100, 30).unwrap(), 30);
    assert_eq!(store.history_rows(History::Events).unwrap(), 70);
}

#[test]
fn pruned_pages_go_back_to_the_file_system() {
    let (dir, store) = temp_store();
    let path = dir.path().join("state.db");
    let actor = Actor::new(Class::Ai, "flood");
    let message = "x".repeat(900);
    for _ in 0..3000 {
        store
            .record_audit(&NewAudit {
                actor: &actor,
                socket: "daemon",
                op: "delete",
                apps: &["db".to_string()],
                outcome: "E_PROTECTED",
                message: &message,
                via: None,
            })
            .unwrap();
    }
    // Through the WAL into the file, so its size says what it holds.
    store
        .conn
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    let keep = Keep {
        max_rows: 10,
        max_age_ms: None,
    };
    prune_all(&store, History::Audit, keep, 0);
    assert_eq!(store.reclaim(u32::MAX).unwrap(), 0);
    store
        .conn
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after * 4 < full, "{full} bytes before, {after} after");
}

#[test]
fn long_messages_are_cut_so_a_row_stays_small() {
    let (_d, store) = temp_store();
    let actor = Actor::new(Class::Ai, "flood");
    let message = "é".repeat(5000);
    store
        .record_audit(&NewAudit {
            actor: &actor,
            socket: "daemon",
            op: "stop",
            apps: &[],
            outcome: "E_PROTECTED",
            message: &message,
            via: None,
        })
        .unwrap();
    let rows = store
        .audit(&AuditFilter {
            limit: 1,
            ..AuditFilter::default()
        })
        .unwrap();
    let m = &rows[0].message;
    assert!(
        m.len() <= crate::store::MAX_TEXT && m.ends_with('…'),
        "{}",
        m.len()
    );
    assert!(m.starts_with("éé"));
}

#[test]
fn an_existing_database_is_switched_to_incremental_vacuum_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        // As an older oxidepm left it: no auto_vacuum, one row.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE keepme (x INTEGER); INSERT INTO keepme VALUES (7);")
            .unwrap();
        let mode: i64 = conn
            .pragma_query_value(None, "auto_vacuum", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 0);
    }
    let store = Store::open(&path).unwrap();
    let mode: i64 = store
        .conn
        .pragma_query_value(None, "auto_vacuum", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, 2);
    let x: i64 = store
        .conn
        .query_row("SELECT x FROM keepme", [], |r| r.get(0))
        .unwrap();
    assert_eq!(x, 7);
}
