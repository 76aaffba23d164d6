//! The users of oxidepm's own processes are theirs alone. The bridge's
//! user reads the bridge's Redis password, the webhook token and the
//! Discord token; a responder's uid owns its lane socket, from which every
//! agent's requests are read and answered. An app given one of those
//! users would hold all of that, so no app but the process itself runs
//! as it: whoever defines it (a person too) is refused with the reason.
//! (The daemon's own uid under a root daemon is kept from agents by
//! `agents_share_uid` and from whatever a non-human defines by the gate.)

use super::bridge_user::DEFAULT_BRIDGE_USER;
use super::error::OwnUserTaken;
use super::handle::Lanes;
use super::responders::other_uid;
use super::Error;
use crate::supervise::{lock, Shared};
use oxidepm_proto::{AppKind, AppSpec};

/// One app as the check weighs it: name, kind, the uid it runs as when it
/// is not the daemon's, and its `user` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsAs {
    /// The app's name.
    pub name: String,
    /// Its kind.
    pub kind: AppKind,
    /// Its uid, when it is not the daemon's (and resolves).
    pub uid: Option<u32>,
    /// Its `user`, as its spec names it.
    pub user: Option<String>,
}

/// The bridge's user under a root daemon: its name, and its uid once it
/// exists (it is made when the lanes first need it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeRunsAs {
    /// Its name.
    pub name: String,
    /// Its uid, when the user exists.
    pub uid: Option<u32>,
}

const BRIDGE_HOLDS: &str = "it reads the bridge's Redis password, the webhook token and the \
                            Discord token";
const RESPONDER_HOLDS: &str = "its uid owns the responder's lane socket, where every agent's \
                               requests are read and answered";

/// Refuses an app among `specs` that would run as the bridge's user, and a
/// responder sharing its uid with any app that is not a responder, once
/// `specs` replace what `defined` holds of their names. Only pairs with
/// one of `specs` in them: an old state blocks nothing else.
pub fn check(
    defined: &[RunsAs],
    specs: &[RunsAs],
    bridge: Option<&BridgeRunsAs>,
) -> Result<(), OwnUserTaken> {
    let shown = |a: &RunsAs| match (&a.user, a.uid) {
        (Some(u), Some(uid)) if u.parse::<u32>().is_err() => format!("user {u:?} (uid {uid})"),
        (Some(u), None) => format!("user {u:?}"),
        (_, Some(uid)) => format!("uid {uid}"),
        (None, None) => "the daemon's user".to_string(),
    };
    if let Some(b) = bridge {
        let is_bridge = |a: &&RunsAs| {
            a.user.as_deref() == Some(b.name.as_str()) || (a.uid.is_some() && a.uid == b.uid)
        };
        if let Some(a) = specs.iter().find(is_bridge) {
            return Err(OwnUserTaken {
                app: a.name.clone(),
                user: shown(a),
                whose: "the bridge".into(),
                holds: BRIDGE_HOLDS,
            });
        }
    }
    let mut all: Vec<&RunsAs> = defined
        .iter()
        .filter(|d| !specs.iter().any(|s| s.name == d.name))
        .collect();
    all.extend(specs.iter());
    let new = |n: &str| specs.iter().any(|s| s.name == n);
    for r in all.iter().filter(|a| a.kind == AppKind::Responder) {
        let Some(uid) = r.uid else { continue };
        let other = all.iter().find(|a| {
            a.kind != AppKind::Responder && a.uid == Some(uid) && (new(&a.name) || new(&r.name))
        });
        if let Some(a) = other {
            // The one being defined is the one refused.
            let (app, owner) = if new(&a.name) { (*a, *r) } else { (*r, *a) };
            let whose = match owner.kind {
                AppKind::Responder => format!("responder {:?}", owner.name),
                AppKind::Agent => format!("agent {:?}", owner.name),
                AppKind::Adapter => format!("adapter {:?}", owner.name),
                _ => format!("app {:?}", owner.name),
            };
            return Err(OwnUserTaken {
                app: app.name.clone(),
                user: shown(app),
                whose,
                holds: RESPONDER_HOLDS,
            });
        }
    }
    Ok(())
}

impl Lanes {
    /// Checks `specs`, about to be defined, against the users of oxidepm's
    /// own processes (see the module).
    pub fn check_own_users(&self, shared: &Shared, specs: &[AppSpec]) -> Result<(), Error> {
        let runs = |name: &str, kind: AppKind, user: &Option<String>| RunsAs {
            name: name.to_string(),
            kind,
            uid: other_uid(user.as_deref()),
            user: user.clone(),
        };
        let specs: Vec<RunsAs> = specs
            .iter()
            .map(|s| runs(&s.name, s.kind, &s.user))
            .collect();
        let responder = specs.iter().any(|s| s.kind == AppKind::Responder);
        let with_uid = specs.iter().any(|s| s.uid.is_some());
        // Only what can pair with the specs is looked up: every app for a
        // responder, else the responders.
        let defined: Vec<RunsAs> = if responder || with_uid {
            let s = lock(shared);
            s.apps()
                .filter(|a| a.spec.user.is_some())
                .filter(|a| responder || a.spec.kind == AppKind::Responder)
                .map(|a| runs(&a.spec.name, a.spec.kind, &a.spec.user))
                .collect()
        } else {
            Vec::new()
        };
        let bridge = nix::unistd::geteuid().is_root().then(|| {
            let name = self
                .settings
                .bridge_user
                .clone()
                .unwrap_or_else(|| DEFAULT_BRIDGE_USER.to_string());
            let uid = other_uid(Some(&name));
            BridgeRunsAs { name, uid }
        });
        check(&defined, &specs, bridge.as_ref()).map_err(Error::OwnUser)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, kind: AppKind, uid: Option<u32>, user: Option<&str>) -> RunsAs {
        RunsAs {
            name: name.into(),
            kind,
            uid,
            user: user.map(Into::into),
        }
    }

    #[test]
    fn the_bridge_s_user_is_the_bridge_s_alone() {
        let bridge = BridgeRunsAs {
            name: "oxidepm-bridge".into(),
            uid: Some(998),
        };
        for kind in [
            AppKind::Agent,
            AppKind::Adapter,
            AppKind::App,
            AppKind::Responder,
        ] {
            for (uid, user) in [
                (Some(998), "oxidepm-bridge"),
                (Some(998), "998"),
                (None, "oxidepm-bridge"),
            ] {
                let a = app("alice", kind, uid, Some(user));
                let e = check(&[], &[a], Some(&bridge)).unwrap_err();
                let m = e.to_string();
                assert!(
                    m.contains("the bridge") && m.contains("webhook token"),
                    "{m}"
                );
            }
        }
        let own = app("alice", AppKind::Agent, Some(1001), Some("alice"));
        assert!(check(&[], &[own], Some(&bridge)).is_ok());
        // A daemon that is not root runs the bridge as itself.
        let a = app("alice", AppKind::Agent, Some(998), Some("oxidepm-bridge"));
        assert!(check(&[], &[a], None).is_ok());
    }

    #[test]
    fn a_responder_s_uid_is_its_own() {
        let responder = app("helpdesk", AppKind::Responder, Some(1500), Some("desk"));
        for kind in [AppKind::Agent, AppKind::Adapter, AppKind::App] {
            let other = app("web", kind, Some(1500), Some("desk"));
            // Either one defined after the other is refused, named.
            let e = check(
                std::slice::from_ref(&responder),
                std::slice::from_ref(&other),
                None,
            )
            .unwrap_err();
            assert_eq!(e.app, "web");
            assert!(e.whose.contains("helpdesk"), "{e}");
            let e = check(
                std::slice::from_ref(&other),
                std::slice::from_ref(&responder),
                None,
            )
            .unwrap_err();
            assert_eq!(e.app, "helpdesk");
            assert!(e.to_string().contains("lane socket"), "{e}");
        }
        // Another uid, the daemon's, or two responders of one uid: fine.
        let other = app("web", AppKind::App, Some(1501), Some("web"));
        assert!(check(std::slice::from_ref(&responder), &[other], None).is_ok());
        let daemons = app("web", AppKind::App, None, None);
        assert!(check(std::slice::from_ref(&responder), &[daemons], None).is_ok());
        let twin = app("helpdesk2", AppKind::Responder, Some(1500), Some("desk"));
        assert!(check(std::slice::from_ref(&responder), &[twin], None).is_ok());
        // Redefining the responder as the other user frees the old pairing.
        let old = app("web", AppKind::App, Some(1500), Some("desk"));
        let moved = app("web", AppKind::App, Some(1501), Some("web"));
        assert!(check(&[responder, old], &[moved], None).is_ok());
    }
}
