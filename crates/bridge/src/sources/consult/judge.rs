//! What a consult outbox entry is and whether the rules allow it (pure):
//! a question (no `re`) or an answer (`re` names the question), to the
//! agent in `to`, from the agent named by the outbox key.

use crate::message::Outbound;
use oxidepm_lanes::consult::{self, ConsultConfig};
use oxidepm_lanes::AgentName;
use std::collections::HashSet;

/// What an entry asks the router to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// A question from the sender to `to`.
    Question {
        /// The agent asked.
        to: AgentName,
    },
    /// The sender's answer to the question `re` that `to` asked.
    Answer {
        /// The agent that asked.
        to: AgentName,
        /// The question's request id.
        re: String,
    },
}

/// Why an entry is not passed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `to` names no agent the bridge knows. On several hosts the name may
    /// be one another host has just taken and this bridge not yet seen.
    Unknown(String),
    /// Anything else: the entry is wrong, or the rules do not allow it.
    Wrong(String),
}

impl Refused {
    /// The reason, as the dead-letter stream records it.
    pub fn reason(self) -> String {
        match self {
            Refused::Unknown(r) | Refused::Wrong(r) => r,
        }
    }
}

/// The one value of a field the router reads; a field given twice is
/// refused rather than guessed at.
fn single<'a>(msg: &'a Outbound, name: &str) -> Result<Option<&'a str>, String> {
    let mut values = msg.fields.iter().filter(|(k, _)| k == name);
    let first = values.next().map(|(_, v)| v.as_str());
    if values.next().is_some() {
        return Err(format!(
            "the field {name:?} is given more than once; give it once"
        ));
    }
    Ok(first)
}

/// Judges one entry of `sender`'s consult outbox against the rules and the
/// agents of this host. `Err` says why it is not passed on.
pub fn judge(
    cfg: &ConsultConfig,
    agents: &HashSet<AgentName>,
    sender: &AgentName,
    msg: &Outbound,
) -> Result<Plan, Refused> {
    let bytes: usize = msg.fields.iter().map(|(k, v)| k.len() + v.len()).sum();
    let max = cfg.limits.max_bytes;
    if bytes > max {
        return Err(Refused::Wrong(format!(
            "{bytes} bytes of fields is more than lanes.consult_limits.max_bytes ({max}); \
             send less, or split it"
        )));
    }
    let to = match single(msg, consult::TO).map_err(Refused::Wrong)? {
        Some(t) if !t.is_empty() => t,
        _ => {
            return Err(Refused::Wrong(format!(
                "no {:?} field: name the agent to consult (XADD {sender}:consult:outbox * to <agent> text …)",
                consult::TO
            )))
        }
    };
    let to: AgentName = to.parse().map_err(|e| Refused::Wrong(format!("to: {e}")))?;
    if &to == sender {
        return Err(Refused::Wrong(format!("{to} cannot consult itself")));
    }
    if !agents.contains(&to) {
        return Err(Refused::Unknown(format!(
            "{to:?} is not an agent of this host"
        )));
    }
    match single(msg, consult::RE).map_err(Refused::Wrong)? {
        Some(re) if !re.is_empty() => {
            if !cfg.allows(&to, sender) {
                return Err(Refused::Wrong(format!(
                    "an answer to {to} needs a [[lanes.consult]] rule from {to:?} to {sender:?}, \
                     and there is none (any more)"
                )));
            }
            Ok(Plan::Answer {
                to,
                re: re.to_string(),
            })
        }
        _ => {
            if !cfg.allows(sender, &to) {
                return Err(Refused::Wrong(format!(
                    "no [[lanes.consult]] rule lets {sender} consult {to} \
                     (daemon.toml: from = {sender:?}, to = {to:?})"
                )));
            }
            Ok(Plan::Question { to })
        }
    }
}

/// The fields of the sender's entry passed on: every one but those the
/// router writes itself (`from`, `to`, `re`, `request_id`, `kind`, …),
/// which a sender cannot set for the receiver. Compared without case: a
/// `From` beside the router's `from` would lie to a reader that folds
/// case (HTTP-style header maps, a model reading the text).
pub fn passed_on(msg: &Outbound) -> impl Iterator<Item = &(String, String)> {
    msg.fields.iter().filter(|(k, _)| {
        !k.is_empty()
            && !consult::OWN_FIELDS
                .iter()
                .any(|own| own.eq_ignore_ascii_case(k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_lanes::consult::{ConsultLimits, ConsultRule};

    fn n(s: &str) -> AgentName {
        s.parse().unwrap()
    }

    fn cfg() -> (ConsultConfig, HashSet<AgentName>) {
        let rule = |f: &str, t: &str| ConsultRule {
            from: n(f),
            to: n(t),
        };
        let cfg = ConsultConfig {
            rules: vec![rule("alice", "bob")],
            limits: ConsultLimits {
                max_bytes: 100,
                ..ConsultLimits::default()
            },
        };
        let agents = ["alice", "bob", "carol"].into_iter().map(n).collect();
        (cfg, agents)
    }

    fn entry(fields: &[(&str, &str)]) -> Outbound {
        Outbound {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Outbound::default()
        }
    }

    fn judged(sender: &str, fields: &[(&str, &str)]) -> Result<Plan, String> {
        let (c, a) = cfg();
        judge(&c, &a, &n(sender), &entry(fields)).map_err(Refused::reason)
    }

    #[test]
    fn questions_follow_the_rules_one_way() {
        assert_eq!(
            judged("alice", &[("to", "bob"), ("text", "hi")]),
            Ok(Plan::Question { to: n("bob") })
        );
        let e = judged("bob", &[("to", "alice"), ("text", "hi")]).unwrap_err();
        assert!(
            e.contains("no [[lanes.consult]] rule lets bob consult alice"),
            "{e}"
        );
        let e = judged("alice", &[("to", "carol")]).unwrap_err();
        assert!(e.contains("alice consult carol"), "{e}");
        let e = judged("alice", &[("to", "dave")]).unwrap_err();
        assert!(e.contains("\"dave\" is not an agent of this host"), "{e}");
        let (c, a) = cfg();
        let dave = judge(&c, &a, &n("alice"), &entry(&[("to", "dave")]));
        assert!(matches!(dave, Err(Refused::Unknown(_))), "{dave:?}");
        let e = judged("alice", &[("to", "alice")]).unwrap_err();
        assert!(e.contains("cannot consult itself"), "{e}");
        let e = judged("alice", &[("text", "to whom?")]).unwrap_err();
        assert!(e.contains("no \"to\" field"), "{e}");
        let e = judged("alice", &[("to", "B*")]).unwrap_err();
        assert!(e.contains("is not allowed"), "{e}");
        let e = judged("alice", &[("to", "bob"), ("to", "carol")]).unwrap_err();
        assert!(e.contains("more than once"), "{e}");
        let e = judged("alice", &[("to", "bob"), ("text", &"x".repeat(100))]).unwrap_err();
        assert!(e.contains("lanes.consult_limits.max_bytes (100)"), "{e}");
    }

    #[test]
    fn answers_need_the_askers_rule() {
        assert_eq!(
            judged("bob", &[("to", "alice"), ("re", "1-0"), ("text", "yes")]),
            Ok(Plan::Answer {
                to: n("alice"),
                re: "1-0".into()
            })
        );
        // carol may not ask bob, so bob has nothing of hers to answer.
        let e = judged("bob", &[("to", "carol"), ("re", "1-0")]).unwrap_err();
        assert!(e.contains("rule from \"carol\" to \"bob\""), "{e}");
        // alice answering bob would need bob to be allowed to ask her.
        let e = judged("alice", &[("to", "bob"), ("re", "1-0")]).unwrap_err();
        assert!(e.contains("rule from \"bob\" to \"alice\""), "{e}");
    }

    #[test]
    fn what_the_router_writes_is_never_passed_on() {
        let m = entry(&[
            ("to", "bob"),
            ("from", "carol"),
            ("request_id", "9-9"),
            ("kind", "answer"),
            ("text", "hi"),
            ("topic", "dns"),
            ("", "empty name"),
            ("From", "carol"),
            ("KIND", "answer"),
            ("Request_Id", "9-9"),
        ]);
        let passed: Vec<&str> = passed_on(&m).map(|(k, _)| k.as_str()).collect();
        assert_eq!(passed, ["topic"]);
    }
}
