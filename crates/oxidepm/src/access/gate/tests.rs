//! The gate's decisions, on apps held in memory.

use super::*;
use crate::access::peer::PeerInfo;
use crate::access::policy::RefusalKind;
use crate::access::reach::tests::{app, Apps};
use crate::access::reach::SnapshotFacts;
use oxidepm_proto::AppSpec;

fn peer(socket: SocketKind, origin: Origin) -> Peer {
    Peer {
        socket,
        info: PeerInfo {
            pid: None,
            uid: Some(0),
            origin,
        },
    }
}

fn in_app(name: &str, kind: AppKind) -> Origin {
    Origin::App {
        name: name.into(),
        kind,
        defined_by: Actor::new(Class::Human, "cli"),
    }
}

fn agent(name: &str) -> AppFacts {
    let mut a = app(name, &[]);
    a.kind = AppKind::Agent;
    a
}

fn none() -> Apps {
    Apps(vec![], None)
}

fn refusal(e: AuthorizeError) -> RefusalKind {
    match e {
        AuthorizeError::Refused(r) => r.kind(),
        AuthorizeError::Select(s) => panic!("not a refusal: {s}"),
    }
}

#[test]
fn tiers_can_only_be_lowered_and_unowned_labels_get_the_lowest() {
    let mut tiers = Tiers {
        ai: Some(Tier::Admin),
        ..Tiers::default()
    };
    tiers.labels.insert("reader".into(), Tier::Read);
    let mut adapters = BTreeMap::new();
    adapters.insert(
        "chat".to_string(),
        Grant {
            tier: Tier::Admin,
            apps: vec!["@chat".into()],
        },
    );
    let gate = Gate::new(tiers, adapters, BTreeMap::new());
    let apps = Apps(vec![agent("reader"), agent("writer")], None);
    let outside = peer(SocketKind::Daemon, Origin::Outside);
    assert_eq!(gate.caller(&apps, &outside, None).tier, Tier::Admin);
    // A label no agent owns: the lowest configured tier.
    for claim in ["ai:x", "ai:reader-2", "ai:invalid"] {
        assert_eq!(gate.caller(&apps, &outside, Some(claim)).tier, Tier::Read);
    }
    // A defined agent's label from outside its tree is not that agent.
    let c = gate.caller(&apps, &outside, Some("ai:writer"));
    assert_eq!(
        (c.actor.to_string(), c.tier),
        ("ai:unverified".into(), Tier::Read)
    );
    let c = gate.caller(
        &apps,
        &peer(SocketKind::Agent, Origin::Outside),
        Some("ai:writer"),
    );
    assert_eq!(c.actor.to_string(), "ai:unverified");
    // From inside its tree it is, with its own tier and scope.
    let writer = peer(SocketKind::Agent, in_app("writer", AppKind::Agent));
    let c = gate.caller(&apps, &writer, None);
    assert_eq!(
        (c.actor.to_string(), c.tier, c.scope),
        (
            "ai:writer".into(),
            Tier::Control,
            Scope::Only(vec!["writer".into()])
        )
    );
    assert_eq!(gate.lane_caller(&none(), "reader").tier, Tier::Read);
    assert_eq!(gate.lane_caller(&none(), "bot").socket, SocketKind::Lane);
    let adapter = peer(SocketKind::Daemon, in_app("chat", AppKind::Adapter));
    let c = gate.caller(&apps, &adapter, Some("human:root"));
    assert_eq!(
        (c.tier, c.scope),
        (Tier::Manage, Scope::Only(vec!["@chat".into()]))
    );
}

#[test]
fn an_agent_grant_names_its_apps_and_tier() {
    let mut agents = BTreeMap::new();
    agents.insert(
        "alice".to_string(),
        AgentGrant {
            tier: Some(Tier::Admin),
            apps: vec!["@shop".into()],
        },
    );
    let gate = Gate::new(Tiers::default(), BTreeMap::new(), agents);
    let c = gate.lane_caller(&none(), "alice");
    assert_eq!(
        (c.tier, c.scope),
        (
            Tier::Manage,
            Scope::Only(vec!["alice".into(), "@shop".into()])
        )
    );
    let c = gate.lane_caller(&none(), "bob");
    assert_eq!(
        (c.tier, c.scope),
        (Tier::Control, Scope::Only(vec!["bob".into()]))
    );
    let apps = Apps(
        vec![agent("alice"), agent("bob"), app("cart", &["shop"])],
        None,
    );
    let alice = gate.lane_caller(&none(), "alice");
    let bob = gate.lane_caller(&none(), "bob");
    let mut touched = Vec::new();
    let logs = |t: &str| Op::logs_tail(t.into(), 10);
    let stop = |t: &str| Op::Stop { target: t.into() };
    assert!(gate
        .authorize(&apps, &alice, &logs("alice"), &mut touched)
        .is_ok());
    assert!(gate
        .authorize(&apps, &alice, &logs("cart"), &mut touched)
        .is_ok());
    assert!(gate
        .authorize(&apps, &alice, &stop("@shop"), &mut touched)
        .is_ok());
    let e = gate
        .authorize(&apps, &alice, &logs("bob"), &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    let e = gate
        .authorize(&apps, &bob, &stop("alice"), &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    let e = gate
        .authorize(&apps, &bob, &stop("all"), &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
}

#[test]
fn no_socket_or_claim_takes_an_adapter_out_of_its_grant() {
    let (gate, _) = bots_adapter();
    let made_by_chat = Origin::App {
        name: "helper".into(),
        kind: AppKind::App,
        defined_by: Actor::new(Class::Adapter, "chat"),
    };
    let grant = Scope::Only(vec!["@bots".into()]);
    for (socket, origin) in [
        (SocketKind::Agent, in_app("chat", AppKind::Adapter)),
        (SocketKind::Agent, made_by_chat.clone()),
        (SocketKind::Daemon, made_by_chat),
    ] {
        let c = gate.caller(&none(), &peer(socket, origin.clone()), Some("ai:x"));
        assert_eq!(c.scope, grant, "{socket:?} {origin:?}");
        assert!(c.tier <= Tier::Manage);
    }
}

#[test]
fn a_request_over_several_apps_is_refused_whole() {
    let gate = Gate::default();
    let mut db = app("db", &[]);
    db.protected = true;
    let apps = Apps(vec![app("web", &[]), db], None);
    let ai = gate.caller(&none(), &peer(SocketKind::Agent, Origin::Outside), None);
    let mut touched = Vec::new();
    let stop = Op::Stop {
        target: "all".into(),
    };
    let e = gate.authorize(&apps, &ai, &stop, &mut touched).unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Protected);
    assert_eq!(touched, ["web", "db"]);
    let web = Op::Stop {
        target: "web".into(),
    };
    assert!(gate.authorize(&apps, &ai, &web, &mut touched).is_ok());
}

fn bots_adapter() -> (Gate, Caller) {
    let mut adapters = BTreeMap::new();
    adapters.insert(
        "chat".to_string(),
        Grant {
            tier: Tier::Manage,
            apps: vec!["@bots".into()],
        },
    );
    let gate = Gate::new(Tiers::default(), adapters, BTreeMap::new());
    let chat = peer(SocketKind::Daemon, in_app("chat", AppKind::Adapter));
    let c = gate.caller(&none(), &chat, None);
    (gate, c)
}

#[test]
fn an_adapter_is_held_to_its_grant_before_and_after() {
    let (gate, chat) = bots_adapter();
    let apps = Apps(vec![app("web", &[]), app("bot", &["bots"])], None);
    let mut touched = Vec::new();
    // Redefining a person's app with the granted tag.
    let mut evil = AppSpec::new("web", "sh", vec![]);
    evil.tags = vec!["bots".into()];
    let op = Op::Define {
        apps: vec![evil],
        update: true,
    };
    let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    // Its own app: it may change the command, not the kind or the uid
    // (naming the uid it runs as already is no change).
    let mut mine = AppSpec::new("bot", "sh", vec![]);
    mine.tags = vec!["bots".into()];
    let op = Op::Define {
        apps: vec![mine.clone()],
        update: true,
    };
    assert!(gate.authorize(&apps, &chat, &op, &mut touched).is_ok());
    mine.user = Some("root".into());
    let op = Op::Define {
        apps: vec![mine.clone()],
        update: true,
    };
    assert!(gate.authorize(&apps, &chat, &op, &mut touched).is_ok());
    mine.user = Some("alice".into());
    let op = Op::Define {
        apps: vec![mine.clone()],
        update: true,
    };
    let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    // Moving its app out of the grant is refused too.
    let moved = AppSpec::new("bot", "sh", vec![]);
    let op = Op::Define {
        apps: vec![moved],
        update: true,
    };
    assert!(gate.authorize(&apps, &chat, &op, &mut touched).is_err());
    // No selector: the apps in its grant.
    let only = gate
        .authorize(&apps, &chat, &Op::Flush { target: None }, &mut touched)
        .unwrap();
    assert_eq!(only, Some(vec!["bot".to_string()]));
    // A human is not narrowed.
    let human = gate.caller(&none(), &peer(SocketKind::Daemon, Origin::Outside), None);
    let only = gate
        .authorize(&apps, &human, &Op::Flush { target: None }, &mut touched)
        .unwrap();
    assert_eq!(only, None);
}

#[test]
fn a_start_through_a_dependency_is_held_to_the_grant() {
    let (gate, chat) = bots_adapter();
    let mut bot = app("bot", &["bots"]);
    bot.running = false;
    bot.idle = true;
    bot.depends_on = vec!["db".into()];
    let mut db = app("db", &[]);
    db.running = false;
    db.idle = true;
    let apps = Apps(vec![bot, db], None);
    let mut touched = Vec::new();
    let op = Op::Start {
        target: "bot".into(),
    };
    let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    assert_eq!(touched, ["bot", "db"]);
}

#[test]
fn a_protected_app_a_person_stopped_is_started_by_a_person_only() {
    let gate = Gate::default();
    let ai = gate.caller(&none(), &peer(SocketKind::Agent, Origin::Outside), None);
    let human = gate.caller(&none(), &peer(SocketKind::Daemon, Origin::Outside), None);
    let mut db = app("db", &[]);
    db.protected = true;
    db.running = false;
    db.idle = true;
    db.stopped_by = Some(Class::Human);
    let mut web = app("web", &[]);
    web.running = false;
    web.idle = true;
    web.depends_on = vec!["db".into()];
    let apps = Apps(vec![db.clone(), web], None);
    let mut touched = Vec::new();
    for target in ["db", "web", "all"] {
        let op = Op::Start {
            target: target.into(),
        };
        let e = gate.authorize(&apps, &ai, &op, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Protected, "{target}");
        assert!(gate.authorize(&apps, &human, &op, &mut touched).is_ok());
    }
    // Stopped by the daemon (it exited, or it crashed): any AI may.
    db.stopped_by = None;
    let apps = Apps(vec![db], None);
    let op = Op::Start {
        target: "db".into(),
    };
    assert!(gate.authorize(&apps, &ai, &op, &mut touched).is_ok());
}

#[test]
fn a_resurrect_does_not_start_a_protected_app_a_person_stopped() {
    let (gate, chat) = bots_adapter();
    let mut db = app("db", &["bots"]);
    db.protected = true;
    db.running = false;
    db.idle = true;
    db.stopped_by = Some(Class::Human);
    let human = Actor::new(Class::Human, "cli");
    let snap = SnapshotFacts {
        saved_by: Some(human.clone()),
        apps: vec![(AppSpec::new("db", "x", vec![]), human)],
    };
    let apps = Apps(vec![db], Some(snap));
    let mut touched = Vec::new();
    let op = Op::Resurrect { name: None };
    let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Protected);
    assert_eq!(touched, ["db"]);
}

#[test]
fn save_and_resurrect_stay_with_what_is_ones_own() {
    let (gate, chat) = bots_adapter();
    let human = Actor::new(Class::Human, "cli");
    let mut touched = Vec::new();
    let snap =
        |by: Option<Actor>, apps: Vec<(AppSpec, Actor)>| SnapshotFacts { saved_by: by, apps };
    let bots = Apps(
        vec![app("bot", &["bots"])],
        Some(snap(Some(human.clone()), vec![])),
    );
    let save = Op::Save { name: None };
    let e = gate
        .authorize(&bots, &chat, &save, &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied, "a person's snapshot");
    let unknown = Apps(vec![], Some(snap(None, vec![])));
    assert!(gate
        .authorize(&unknown, &chat, &save, &mut touched)
        .is_err());
    let own = Apps(vec![], Some(snap(Some(chat.actor.clone()), vec![])));
    assert!(gate.authorize(&own, &chat, &save, &mut touched).is_ok());
    let fresh = Apps(vec![], None);
    assert!(gate.authorize(&fresh, &chat, &save, &mut touched).is_ok());
    // A person's app that is gone is not brought back by the adapter.
    let mut gone = AppSpec::new("gone", "x", vec![]);
    gone.tags = vec!["bots".into()];
    let deleted = Apps(
        vec![],
        Some(snap(Some(human.clone()), vec![(gone.clone(), human)])),
    );
    let res = Op::Resurrect { name: None };
    let e = gate
        .authorize(&deleted, &chat, &res, &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    let mine = Apps(vec![], Some(snap(None, vec![(gone, chat.actor.clone())])));
    let only = gate.authorize(&mine, &chat, &res, &mut touched).unwrap();
    assert_eq!(only, Some(vec!["gone".to_string()]));
}

/// Alice, an agent of her own uid (1001) with `tier = "manage"` and
/// `apps = ["@support"]`, as the README offers it; the daemon is root.
fn manager_alice() -> (Gate, Caller, Apps) {
    let mut agents = BTreeMap::new();
    agents.insert(
        "alice".to_string(),
        AgentGrant {
            tier: Some(Tier::Manage),
            apps: vec!["@support".into()],
        },
    );
    let gate = Gate::new(Tiers::default(), BTreeMap::new(), agents);
    let mut alice = agent("alice");
    alice.user = Some("alice".into());
    let mut desk = app("desk", &["support"]);
    desk.user = Some("alice".into());
    let snapshot = SnapshotFacts {
        saved_by: Some(Actor::new(Class::Ai, "alice")),
        apps: vec![(support("old", None), Actor::new(Class::Ai, "alice"))],
    };
    let apps = Apps(vec![alice, app("web", &["support"]), desk], Some(snapshot));
    let c = gate.lane_caller(&apps, "alice");
    (gate, c, apps)
}

fn define(spec: AppSpec) -> Op {
    Op::Define {
        apps: vec![spec],
        update: true,
    }
}

fn support(name: &str, user: Option<&str>) -> AppSpec {
    let mut s = AppSpec::new(
        name,
        "sh",
        vec!["-c".into(), "cat secrets/webhook_token".into()],
    );
    s.tags = vec!["support".into()];
    s.user = user.map(Into::into);
    s
}

#[test]
fn a_manage_grant_defines_apps_as_its_holder_only() {
    let (gate, alice, apps) = manager_alice();
    assert_eq!(alice.uid, Some(1001));
    let mut touched = Vec::new();
    // No user: hers (the define writes it down), never the daemon's.
    for ok in [
        support("new", None),
        support("new", Some("alice")),
        support("new", Some("1001")),
    ] {
        assert!(gate
            .authorize(&apps, &alice, &define(ok), &mut touched)
            .is_ok());
    }
    // Root, another agent's uid, the bridge's, a user that is none.
    for user in ["root", "0", "bob", "bridge", "ghost"] {
        let e = gate
            .authorize(
                &apps,
                &alice,
                &define(support("new", Some(user))),
                &mut touched,
            )
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied, "{user}");
    }
    // A person's app inside her grant runs as root: she may not change it,
    // not even to run as herself.
    for user in [None, Some("alice"), Some("root")] {
        let e = gate
            .authorize(&apps, &alice, &define(support("web", user)), &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied, "{user:?}");
    }
    // Her own app in her grant: she changes its command.
    assert!(gate
        .authorize(&apps, &alice, &define(support("desk", None)), &mut touched)
        .is_ok());
    // Scaling the person's app would make more root processes.
    let scale = |t: &str| Op::Scale {
        target: t.into(),
        instances: 3,
    };
    assert!(gate
        .authorize(&apps, &alice, &scale("web"), &mut touched)
        .is_err());
    // Her snapshot's app without a user ran as the daemon, and would again.
    let e = gate
        .authorize(&apps, &alice, &Op::Resurrect { name: None }, &mut touched)
        .unwrap_err();
    assert_eq!(refusal(e), RefusalKind::Denied);
    // A person does all of it.
    let human = gate.caller(&none(), &peer(SocketKind::Daemon, Origin::Outside), None);
    assert_eq!(human.uid, None);
    for op in [define(support("web", Some("root"))), scale("web")] {
        assert!(gate.authorize(&apps, &human, &op, &mut touched).is_ok());
    }
}

#[test]
fn an_agent_is_its_app_s_uid_and_anyone_else_the_peer_s() {
    let (gate, _, apps) = manager_alice();
    // In her tree (a set-uid program there is still alice).
    let mut inside = peer(SocketKind::Daemon, in_app("alice", AppKind::Agent));
    inside.info.uid = Some(0);
    let c = gate.caller(&apps, &inside, None);
    assert_eq!(
        (c.actor.to_string(), c.uid),
        ("ai:alice".to_string(), Some(1001))
    );
    // Anyone on agent.sock is the uid the kernel says it is.
    let mut outside = peer(SocketKind::Agent, Origin::Outside);
    outside.info.uid = Some(1002);
    let c = gate.caller(&apps, &outside, None);
    assert_eq!(c.uid, Some(1002));
}
