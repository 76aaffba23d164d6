use super::*;

#[test]
fn parses_the_documented_form() {
    let cfg: ProxyConfig = serde_json::from_str(
        r#"{ "upstream": "/r.sock", "lanes_dir": "/l", "agents": [
             {"name":"alice","password_file":"/s/a","uid":1001,"socket_mode":384,
              "rate_limit": null, "maxlen": null} ] }"#,
    )
    .unwrap();
    cfg.validate().unwrap();
    assert!(cfg.check_peer_uid);
    assert_eq!(cfg.limits.max_pipeline, 1024);
    assert_eq!(cfg.limits.max_bulk, 1 << 20);
    assert!(cfg.families.is_empty(), "no family unless listed");
    let a = cfg.agent("alice").unwrap();
    assert_eq!(
        (a.uid, a.socket_mode, a.max_connections, a.quota),
        (Some(1001), 0o600, 16, None)
    );
}

#[test]
fn rejects_bad_names() {
    for name in ["a*", "Alice", "bridge"] {
        let text = format!(
            r#"{{"upstream":"/r","lanes_dir":"/l","agents":[{{"name":"{name}","password_file":"/p"}}]}}"#
        );
        let e = serde_json::from_str::<ProxyConfig>(&text).unwrap_err();
        assert!(e.to_string().contains("agent name"), "{name}: {e}");
    }
}

#[test]
fn writes_what_it_reads() {
    let mut a = AgentConfig::new("alice".parse().unwrap(), "/s/agent_alice".into());
    a.uid = Some(1001);
    a.rate_limit = Some(2.5);
    let cfg = ProxyConfig::new(PathBuf::from("/r.sock"), "/l".into(), vec![a]);
    let text = serde_json::to_string(&cfg).unwrap();
    assert_eq!(serde_json::from_str::<ProxyConfig>(&text).unwrap(), cfg);
    let minimal: ProxyConfig = serde_json::from_str(
        r#"{"upstream":"/r.sock","lanes_dir":"/l","agents":[
            {"name":"alice","password_file":"/s/agent_alice","uid":1001,"rate_limit":2.5}]}"#,
    )
    .unwrap();
    assert_eq!(minimal, cfg);
    assert_eq!(
        agent_socket(&cfg.lanes_dir, &cfg.agents[0].name),
        Path::new("/l/alice.sock")
    );
}

#[test]
fn rejects_typos() {
    assert!(serde_json::from_str::<ProxyConfig>(
        r#"{"upstream":"/r","lanes_dir":"/l","agents":[{"name":"a","password_file":"/p","ratelimit":5}]}"#
    )
    .is_err());
}

#[test]
fn rejects_duplicates_and_zero_limits() {
    let mut cfg: ProxyConfig = serde_json::from_str(
        r#"{"upstream":"/r","lanes_dir":"/l","agents":[
            {"name":"a","password_file":"/p"},{"name":"a","password_file":"/q"}]}"#,
    )
    .unwrap();
    assert!(cfg.validate().is_err());
    cfg.agents.pop();
    cfg.validate().unwrap();
    cfg.agents[0].maxlen = Some(0);
    assert!(cfg.validate().is_err());
    cfg.agents[0].maxlen = None;
    cfg.agents[0].quota = Some(0);
    assert!(cfg.validate().is_err());
}

#[test]
fn rejects_bounds_that_cannot_be_met() {
    let mut cfg = ProxyConfig::new(PathBuf::from("/r"), "/l".into(), Vec::new());
    cfg.validate().unwrap();
    cfg.limits.lane_buffer = cfg.limits.max_command - 1;
    assert!(matches!(
        cfg.validate(),
        Err(ProxyConfigError::LaneBuffer { .. })
    ));
    cfg.limits = LimitsConfig {
        command_timeout_ms: 0,
        ..LimitsConfig::default()
    };
    assert_eq!(cfg.validate(), Err(ProxyConfigError::Limits));
    cfg.limits = LimitsConfig {
        max_consumers: 0,
        ..LimitsConfig::default()
    };
    assert_eq!(cfg.validate(), Err(ProxyConfigError::Limits));
    for limits in [
        LimitsConfig {
            max_transaction_commands: 0,
            ..LimitsConfig::default()
        },
        LimitsConfig {
            max_transaction_bytes: 0,
            ..LimitsConfig::default()
        },
    ] {
        cfg.limits = limits;
        assert_eq!(cfg.validate(), Err(ProxyConfigError::Limits));
    }
    cfg.limits = LimitsConfig {
        reply_buffer: 100,
        ..LimitsConfig::default()
    };
    assert!(cfg.validate().is_err());
    cfg.limits = LimitsConfig::default();
    for bad in [&["webhook", "webhook"][..], &["a*"], &["a:b"], &[""]] {
        cfg.families = bad.iter().map(|s| s.to_string()).collect();
        assert!(cfg.validate().is_err(), "{bad:?}");
    }
    cfg.families = vec!["webhook".into(), "ops".into()];
    cfg.validate().unwrap();
    cfg.meter_interval_ms = 0;
    assert!(cfg.validate().is_err());
}

#[test]
fn a_name_is_one_lanes() {
    let r = ResponderConfig::new("echo".parse().unwrap(), "/s/resp_echo".into());
    validate_responders(std::slice::from_ref(&r), &[]).unwrap();
    assert!(validate_responders(&[r.clone(), r.clone()], &[]).is_err());
    let a = AgentConfig::new("echo".parse().unwrap(), "/s/agent_echo".into());
    assert!(validate_responders(std::slice::from_ref(&r), &[a]).is_err());
    assert_eq!(crate::responder::group("echo"), "echo");
}
