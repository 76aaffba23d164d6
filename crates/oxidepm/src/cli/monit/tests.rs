//! The screen drawn on ratatui's test backend at 80×24, and the keys.

use super::model::{Model, Step, LOG_LINES};
use super::source::{Action, Snapshot, Want};
use super::theme::Theme;
use super::view;
use oxidepm_proto::{AppInfo, EventRecord, LanesReport, LogLine};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Color, Modifier};
use ratatui::Terminal;
use serde_json::json;
use std::time::{Duration, Instant};

fn app(id: u64, name: &str, status: &str, pid: Option<u32>) -> AppInfo {
    serde_json::from_value(json!({
        "id": id, "name": name, "pid": pid, "status": status, "restarts": 2,
        "uptime_ms": pid.map(|_| 65_000), "cpu_percent": pid.map(|_| 1.5),
        "memory_bytes": pid.map(|_| 3_250_000), "last_exit_code": null,
        "defined_by": "human:cli", "tags": [], "kind": "app", "protected": false
    }))
    .unwrap()
}

fn event(seq: u64, app_id: u64, app: &str, kind: &str, actor: &str, detail: &str) -> EventRecord {
    serde_json::from_value(json!({
        "seq": seq, "at": "2026-11-30T18:04:11.123Z", "app_id": app_id, "app": app,
        "kind": kind, "actor": actor, "detail": detail
    }))
    .unwrap()
}

fn line(app: &str, text: &str) -> LogLine {
    serde_json::from_value(json!({"app": app, "stream": "out", "line": text})).unwrap()
}

fn snapshot(apps: Vec<AppInfo>) -> Snapshot {
    Snapshot {
        apps: Ok(apps),
        events: vec![
            event(1, 1, "web", "started", "human:cli", "pid 101"),
            event(2, 2, "worker", "errored", "system:daemon", "exit 3"),
        ],
        lanes: None,
        logs: Some(("web".into(), Ok(vec![line("web", "listening on :8080")]))),
        at: Instant::now(),
    }
}

fn model() -> Model {
    let mut m = Model::default();
    m.apply(snapshot(vec![
        app(1, "web", "online", Some(101)),
        app(2, "worker", "errored", None),
    ]));
    m
}

/// The screen as lines of text, and the buffer for styles.
fn render(m: &Model, theme: Theme) -> (Vec<String>, ratatui::buffer::Buffer) {
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| view::draw(f, m, &theme)).unwrap();
    let buf = t.backend().buffer().clone();
    let lines = (0..24)
        .map(|y| (0..80).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect();
    (lines, buf)
}

fn row<'a>(lines: &'a [String], needle: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")))
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn an_80x24_frame_shows_apps_statuses_the_selection_log_and_events() {
    let (lines, _) = render(&model(), Theme { color: true });
    let web = row(&lines, " web ");
    for cell in ["online", "101", "2%", "3.1mb", "1m", "human:cli", "›"] {
        assert!(web.contains(cell), "{cell:?} missing from {web:?}");
    }
    let worker = row(&lines, " worker ");
    assert!(worker.contains("errored") && worker.contains("system:daemon"));
    assert!(!worker.contains('›'), "only the selected app is marked");
    row(&lines, "logs: web (following)");
    row(&lines, "listening on :8080");
    row(&lines, "18:04:11 worker errored by system:daemon exit 3");
    row(&lines, "q quit");
    assert!(lines[0].contains("2 apps") && lines[0].contains("1 errored"));
}

#[test]
fn no_color_leaves_only_reverse_and_bold() {
    let (lines, buf) = render(&model(), Theme { color: false });
    let y = lines.iter().position(|l| l.contains(" web ")).unwrap() as u16;
    assert!(buf[(3, y)].modifier.contains(Modifier::REVERSED));
    for cell in buf.content() {
        assert_eq!(cell.fg, Color::Reset, "no colour with NO_COLOR");
    }
    let (_, coloured) = render(&model(), Theme { color: true });
    assert!(coloured.content().iter().any(|c| c.fg == Color::Red));
}

#[test]
fn control_characters_an_app_prints_are_shown_escaped() {
    let mut s = snapshot(vec![app(1, "web", "online", Some(101))]);
    s.logs = Some((
        "web".into(),
        Ok(vec![line("web", "\x1b]52;c;cHduZWQ=\x07 \x1b[2Kforged")]),
    ));
    let mut m = Model::default();
    m.apply(s);
    let (lines, buf) = render(&m, Theme { color: true });
    row(&lines, "\\x1b]52;c;cHduZWQ=\\x07 \\x1b[2Kforged");
    assert!(buf.content().iter().all(|c| !c.symbol().contains('\x1b')));
}

#[test]
fn a_daemon_that_cannot_be_read_is_said_and_the_apps_stay() {
    let mut m = model();
    let mut s = snapshot(Vec::new());
    s.apps = Err("connection to the daemon failed: refused".into());
    m.apply(s);
    assert_eq!(m.apps.len(), 2, "the last apps read stay");
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "connection to the daemon failed");
}

#[test]
fn lanes_show_each_agents_counts_and_the_bridges_rates() {
    let report = |routed: i64| -> LanesReport {
        serde_json::from_value(json!({
            "agents": [{"acl_user": "agent_alice", "agent": "alice", "socket": "/x",
                "streams": [
                    {"key": "alice:discord:inbox", "length": 7, "pending": 2},
                    {"key": "alice:discord:outbox", "length": 3, "pending": 0},
                    {"key": "alice:discord:outbox:dead", "length": 1, "pending": 0}]}],
            "bridge": {"counters": {"dead": 1, "delivered": 5, "pending": 0, "retried": 0,
                "routed": routed, "unrouted": 0, "unrouted_stream": 0},
                "default_agent": null, "routes": []}
        }))
        .unwrap()
    };
    let mut m = model();
    let t0 = Instant::now();
    let mut s = snapshot(m.apps.clone());
    s.lanes = Some(Ok(report(10)));
    s.at = t0;
    m.apply(s);
    let mut s = snapshot(m.apps.clone());
    s.lanes = Some(Ok(report(30)));
    s.at = t0 + Duration::from_secs(2);
    m.apply(s);
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "routed 10.0/s");
    let alice = row(&lines, "alice");
    let cells: Vec<&str> = alice.split_whitespace().collect();
    assert_eq!(cells[1..5], ["7", "2", "3", "1"], "{alice}");
}

#[test]
fn arrows_move_the_selection_within_the_apps_and_ask_for_its_log() {
    let mut m = model();
    assert_eq!(m.key(key(KeyCode::Up)), Step::Stay, "already at the top");
    let want = Want {
        logs: Some(("worker".into(), LOG_LINES)),
    };
    assert_eq!(m.key(key(KeyCode::Down)), Step::Want(want));
    assert_eq!(
        m.key(key(KeyCode::Down)),
        Step::Stay,
        "already at the bottom"
    );
    assert_eq!(m.selected_app(), Some("worker"));
}

#[test]
fn the_selection_follows_its_app_when_apps_come_and_go() {
    let mut m = model();
    m.key(key(KeyCode::Down));
    m.apply(snapshot(vec![
        app(3, "api", "online", Some(7)),
        app(1, "web", "online", Some(101)),
        app(2, "worker", "errored", None),
    ]));
    assert_eq!(m.selected_app(), Some("worker"));
    m.apply(snapshot(vec![app(1, "web", "online", Some(101))]));
    assert_eq!(m.selected_app(), Some("web"), "gone: the last app left");
}

#[test]
fn r_and_s_act_on_the_selected_app_and_say_so() {
    let mut m = model();
    assert_eq!(
        m.key(key(KeyCode::Char('r'))),
        Step::Act(Action::Restart("web".into()))
    );
    m.key(key(KeyCode::Down));
    assert_eq!(
        m.key(key(KeyCode::Char('s'))),
        Step::Act(Action::Stop("worker".into()))
    );
    m.status = Some(Err("E_PROTECTED: worker is protected".into()));
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "✗ E_PROTECTED: worker is protected");
}

#[test]
fn with_no_app_r_and_s_send_nothing() {
    let mut m = Model::default();
    assert_eq!(m.key(key(KeyCode::Char('r'))), Step::Stay);
    assert_eq!(m.key(key(KeyCode::Char('s'))), Step::Stay);
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "no apps");
}

#[test]
fn f_pauses_and_resumes_the_log_tail() {
    let mut m = model();
    assert_eq!(
        m.key(key(KeyCode::Char('f'))),
        Step::Want(Want { logs: None })
    );
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "logs: web (paused)");
    row(&lines, "listening on :8080");
    assert_eq!(
        m.key(key(KeyCode::Char('f'))),
        Step::Want(Want {
            logs: Some(("web".into(), LOG_LINES))
        })
    );
}

#[test]
fn q_esc_and_ctrl_c_quit() {
    let mut m = model();
    assert_eq!(m.key(key(KeyCode::Char('q'))), Step::Quit);
    assert_eq!(m.key(key(KeyCode::Esc)), Step::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(m.key(ctrl_c), Step::Quit);
    assert_eq!(m.key(key(KeyCode::Char('x'))), Step::Stay);
}

#[test]
fn a_crowded_host_still_shows_every_pane_and_the_log_at_80x24() {
    let apps: Vec<AppInfo> = (1..=12)
        .map(|i| app(i, &format!("app{i}"), "online", Some(100 + i as u32)))
        .collect();
    let mut s = snapshot(apps);
    s.logs = Some((
        "app1".into(),
        Ok((0..30)
            .map(|i| line("app1", &format!("line {i}")))
            .collect()),
    ));
    s.lanes = Some(Ok(serde_json::from_value(json!({
        "agents": (0..6).map(|i| json!({"acl_user": format!("agent_a{i}"), "agent": format!("a{i}"),
            "socket": "/x", "streams": []})).collect::<Vec<_>>(),
        "bridge": {"counters": {}, "default_agent": null, "routes": []}
    }))
    .unwrap()));
    let mut m = Model::default();
    m.apply(s);
    let (lines, _) = render(&m, Theme { color: false });
    for pane in ["┌apps", "┌logs: app1", "┌events", "┌lanes", "q quit"] {
        row(&lines, pane);
    }
    for i in 25..30 {
        row(&lines, &format!("line {i}"));
    }
    row(&lines, "› app1");
    for _ in 0..11 {
        m.key(key(KeyCode::Down));
    }
    let (lines, _) = render(&m, Theme { color: false });
    row(&lines, "› app12");
}

#[test]
fn stdout_and_stderr_tails_are_merged_by_their_timestamps() {
    let mut s = snapshot(vec![app(1, "web", "online", Some(101))]);
    let err = |t: &str| -> LogLine {
        serde_json::from_value(json!({"app": "web", "stream": "err", "line": t})).unwrap()
    };
    s.logs = Some((
        "web".into(),
        Ok(vec![
            line("web", "2026-11-30T18:00:01.000Z out one"),
            line("web", "2026-11-30T18:00:03.000Z out two"),
            err("2026-11-30T18:00:02.000Z err one"),
        ]),
    ));
    let mut m = Model::default();
    m.apply(s);
    let text: Vec<&str> = m.logs.iter().map(|l| &l.line[25..]).collect();
    assert_eq!(text, ["out one", "err one", "out two"]);
}
