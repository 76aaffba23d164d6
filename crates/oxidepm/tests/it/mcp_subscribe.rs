//! Resource subscriptions through the official Python SDK: an app's log
//! resource is updated when the app writes a line and when it restarts.

use crate::harness::Env;
use crate::mcp::{have_sdk, Session};
use serde_json::json;

#[test]
fn a_log_subscription_is_updated_when_the_app_logs_a_line_and_when_it_restarts() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    let flag = env.path("say");
    // Writes a line only when asked, so each update has one cause.
    let body = format!(
        "while :; do if [ -e {f} ]; then rm {f}; echo asked; fi; sleep 0.1; done",
        f = flag.display()
    );
    let script = env.script("quiet", &body);
    env.ok(&["start", "--name", "quiet", "--", &script]);
    let pid = env.pid("quiet");
    let uri = "oxidepm://apps/quiet/log";
    let mut s = Session::start(
        &env,
        json!([
            { "op": "subscribe", "uri": uri },
            { "op": "await_update" },
            { "op": "await_update" },
        ]),
        &[],
    );
    let _init = s.next();
    assert_eq!(s.next()["subscribed"], uri);
    std::fs::write(&flag, "").unwrap();
    assert_eq!(s.next()["updated"], uri, "after a line");
    env.ok(&["restart", "quiet"]);
    assert_ne!(env.pid("quiet"), pid);
    assert_eq!(s.next()["updated"], uri, "after the restart");
}
