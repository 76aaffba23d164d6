//! What the configuration says of the upstream as a whole: the key form
//! of a running proxy never changes, a cluster needs the tagged form.

use super::harness::Agent;
use super::{alice, Value};

#[test]
fn a_reload_to_another_key_form_changes_nothing() {
    let (redis, proxy) = alice();
    // This test process runs in the plain form, like the proxy before.
    proxy.write_config(
        &[Agent::new("alice"), Agent::new("bob")],
        r#""key_form": "tagged""#,
    );
    let report = proxy.proxy.reload().unwrap();
    assert!(report.added.is_empty(), "{report}");
    assert!(report.failed.iter().any(|(n, _)| n == "bob"), "{report}");
    assert_eq!(proxy.proxy.agents(), ["alice"]);
    // Alice's lane goes on in the plain form.
    let mut a = proxy.client("alice");
    let id = a.cmd(&["XADD", "discord:outbox", "*", "text", "still plain"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    let seen = redis
        .bridge()
        .cmd(&["XRANGE", "alice:discord:outbox", "-", "+"]);
    assert!(
        seen.strings().contains(&"still plain".to_string()),
        "{seen:?}"
    );
    assert_eq!(
        redis.admin().cmd(&["EXISTS", "{alice}:discord:outbox"]),
        Value::Int(0)
    );
}
