//! The bridge's per-agent records in the tagged form (a process of its
//! own: the key form is process-wide): under the agent's hash tag, never
//! ending like a stream an agent is granted, and covered by the bridge's
//! grant and by purge's globs.

use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::stream_key::{
    agent_record, agent_record_globs, set_key_form, AgentRecord, KeyForm,
};
use oxidepm_lanes::AgentName;

#[test]
fn records_share_the_agents_slot_and_no_agent_grant_matches_them() {
    set_key_form(KeyForm::Tagged).unwrap();
    let alice: AgentName = "alice".parse().unwrap();
    let bob: AgentName = "bob".parse().unwrap();
    let open = agent_record(&alice, AgentRecord::ConsultOpen { answerer: &bob });
    let channels = agent_record(&alice, AgentRecord::DiscordChannels);
    assert_eq!(open, "{alice}:bridge:consult:bob:open");
    assert_eq!(channels, "{alice}:bridge:discord:channels");
    assert_eq!(oxidepm_lanes::consult::open_key(&alice, &bob), open);
    for k in [&open, &channels] {
        assert!(!k.ends_with(":inbox") && !k.ends_with(":outbox"), "{k}");
    }
    let bridge = AclUser::Bridge.rules(&["webhook".into()]).join(" ");
    for grant in [
        "~{*}:bridge:consult:*:open",
        "~{*}:bridge:discord:channels",
        "%R~oxidepm:routes",
        "(+set +get ~bridge:discord:gateway)",
        "~{*}:*:outbox",
        "%W~{*}:*:inbox",
    ] {
        assert!(bridge.contains(grant), "{grant} missing: {bridge}");
    }
    // No wider key grant than today's plus the records.
    assert!(!bridge.contains("~{*}:bridge:*"), "{bridge}");
    // An agent's own grant names only its inboxes and outboxes.
    let agent = AclUser::Agent(alice.clone())
        .rules(&["webhook".into()])
        .join(" ");
    assert!(!agent.contains("bridge"), "{agent}");
    // Purge takes both sides of its consult records and its channels.
    let globs = agent_record_globs(&alice);
    assert!(globs.contains(&"{alice}:bridge:*".to_string()));
    assert!(globs.contains(&"{*}:bridge:consult:alice:open".to_string()));
}
