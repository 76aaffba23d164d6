//! What the daemon says about itself and about the caller.

use crate::access::Caller;
use crate::daemon::Daemon;
use oxidepm_proto::{Identity, Pong};

impl Daemon {
    /// `ping`.
    pub(super) fn ping(&self) -> Pong {
        Pong {
            home: self.home.root().to_path_buf(),
            pid: std::process::id(),
            pong: true,
            protocol: oxidepm_proto::PROTOCOL_VERSION,
            uptime_ms: self.uptime_ms(),
            version: env!("CARGO_PKG_VERSION").into(),
            warning: self.degraded(),
        }
    }
}

/// `whoami`: what was decided about the caller when it connected, and
/// what that decision rests on (`containment`).
pub(super) fn whoami(caller: &Caller, containment: String) -> Identity {
    Identity {
        actor: caller.actor.clone(),
        class: caller.actor.class,
        containment,
        label: caller.actor.label.clone(),
        socket: caller.socket.as_str().into(),
        tier: caller.tier,
    }
}
