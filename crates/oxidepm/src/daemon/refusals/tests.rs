use super::*;
use oxidepm_proto::Class;

const LIMITS: Limits = Limits {
    window_ms: 60_000,
    per_kind: 10,
    total: 25,
    max_kinds: 4,
};

fn kind(label: &str, op: &str) -> Kind {
    Kind {
        actor: Actor::new(Class::Ai, label),
        socket: "daemon".into(),
        op: op.into(),
        code: "E_PROTECTED".into(),
    }
}

fn flood(r: &mut Refusals, k: &Kind, n: u64, at: i64) -> u64 {
    (0..n)
        .filter(|_| r.admit(k.clone(), at) == Verdict::Write)
        .count() as u64
}

#[test]
fn a_flood_of_one_kind_writes_the_first_few_and_counts_the_rest() {
    let mut r = Refusals::new(LIMITS);
    let k = kind("assistant", "delete");
    assert_eq!(flood(&mut r, &k, 20_000, 1_000), 10);
    // Still open: nothing to say yet.
    assert!(r.close_due(30_000).is_empty());
    let s = r.close_due(61_000);
    assert_eq!(
        s,
        vec![Summary {
            kind: k.clone(),
            more: 19_990,
            first_ms: 1_000,
            last_ms: 1_000,
            others: false,
        }]
    );
    // A new window writes again.
    assert_eq!(flood(&mut r, &k, 3, 62_000), 3);
    assert!(r.close_all().is_empty(), "nothing was counted");
}

#[test]
fn a_window_found_over_by_the_next_refusal_is_summarised() {
    let mut r = Refusals::new(LIMITS);
    let k = kind("assistant", "delete");
    flood(&mut r, &k, 12, 0);
    assert_eq!(r.admit(k.clone(), 60_000), Verdict::Write);
    let s = r.close_due(60_001);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].more, 2);
}

#[test]
fn kinds_are_apart_and_all_kinds_share_one_cap() {
    let mut r = Refusals::new(LIMITS);
    let a = kind("a", "delete");
    let b = kind("a", "stop");
    let c = kind("c", "stop");
    assert_eq!(flood(&mut r, &a, 100, 0), 10);
    assert_eq!(flood(&mut r, &b, 100, 0), 10);
    // 20 of the 25 written across kinds: c gets what is left.
    assert_eq!(flood(&mut r, &c, 100, 0), 5);
    let s = r.close_all();
    let more: u64 = s.iter().map(|s| s.more).sum();
    assert_eq!(more, 300 - 25, "every refusal is written or counted");
}

#[test]
fn actors_beyond_those_followed_are_counted_together() {
    let mut r = Refusals::new(Limits {
        total: 1000,
        ..LIMITS
    });
    // A client changing its claim on every request.
    let mut written = 0;
    for i in 0..1000 {
        written += flood(&mut r, &kind(&format!("x{i}"), "delete"), 1, 0);
    }
    // Four followed one by one, then the rest under one kind.
    assert_eq!(written, 4 + 10);
    let s = r.close_all();
    assert_eq!(s.len(), 1);
    assert!(s[0].others);
    assert_eq!(s[0].kind.actor, Actor::system(OTHERS));
    assert_eq!(s[0].more, 1000 - 14);
}

#[test]
fn counts_read_with_thousands_separators() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1234), "1,234");
    assert_eq!(thousands(19_990), "19,990");
    assert_eq!(thousands(1_234_567), "1,234,567");
}

#[test]
fn the_next_window_due_is_the_earliest_open_one_and_none_when_all_are_closed() {
    let mut r = Refusals::new(LIMITS);
    assert_eq!(r.next_due(), None, "nothing open: the timer sleeps");
    r.admit(kind("a", "delete"), 1_000);
    r.admit(kind("b", "delete"), 5_000);
    assert_eq!(r.next_due(), Some(61_000));
    r.close_due(61_000);
    assert_eq!(r.next_due(), Some(65_000));
    r.close_due(65_000);
    assert_eq!(r.next_due(), None);
    // A window found over by a refusal waits to be written: due at once.
    let k = kind("c", "stop");
    flood(&mut r, &k, 12, 0);
    r.admit(k, 70_000);
    assert_eq!(r.next_due(), Some(i64::MIN));
}
