use super::*;

fn parse(extra: &str) -> Result<BridgeConfig, String> {
    let text = format!(
        r#"{{"redis_socket": "/r.sock", "password_file": "/pw", "agents": ["alice", "bob"],
            "sources": ["webhook", "email"],
            "webhook": {{"token_file": "/t"}} {extra}}}"#
    );
    let cfg: BridgeConfig = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    cfg.check().map_err(|e| e.to_string())?;
    Ok(cfg)
}

#[test]
fn defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.user, "bridge");
    assert_eq!(c.retry, RetryConfig::default());
    assert_eq!(c.outbox.consumer, "bridge-1");
    let w = c.webhook.unwrap();
    assert_eq!(w.settings.listen.to_string(), "127.0.0.1:8787");
    assert_eq!(w.max_body, 1 << 20);
    assert_eq!(w.settings.limits, WebhookLimits::default());
    assert_eq!(w.settings.limits.first_byte_ms, 2_000);
}

#[test]
fn webhook_limits_are_read_and_none_may_be_zero() {
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["webhook"],
                   "webhook": {"token_file": "/t", "limits": {"max_connections_per_ip": 4}}}"#;
    let c: BridgeConfig = serde_json::from_str(text).unwrap();
    c.check().unwrap();
    let l = c.webhook.unwrap().settings.limits;
    assert_eq!(l.max_connections_per_ip, 4);
    assert_eq!(l.headers_ms, 5_000);
    let text = text.replace("max_connections_per_ip\": 4", "headers_ms\": 0");
    let c: BridgeConfig = serde_json::from_str(&text).unwrap();
    let e = c.check().unwrap_err().to_string();
    assert!(e.contains("webhook.limits.headers_ms"), "{e}");
    let typo = text.replace("headers_ms", "header_ms");
    assert!(serde_json::from_str::<BridgeConfig>(&typo).is_err());
}

#[test]
fn refuses_what_does_not_fit() {
    for bad in [
        r#", "typo": 1"#,
        r#", "retry": {"attempts": 0}"#,
        r#", "outbox": {"max_entry_bytes": 0}"#,
        r#", "inbox_maxlen": 0"#,
    ] {
        assert!(parse(bad).is_err(), "accepted {bad}");
    }
    // A bad name is refused as the file is read, one that is also a
    // source by the check.
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "agents": ["a*"], "sources": []}"#;
    assert!(serde_json::from_str::<BridgeConfig>(text).is_err());
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "agents": ["email"],
                   "sources": ["email"]}"#;
    let c: BridgeConfig = serde_json::from_str(text).unwrap();
    assert!(c.check().unwrap_err().to_string().contains("reserved"));
    assert!(parse(r#", "email": {"maildir": "/m", "smtp": "h:25", "typo": 1}"#).is_err());
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["webhook"],
                   "webhook": {"token_file": "/t", "listen": "0.0.0.0:1"}}"#;
    let c: BridgeConfig = serde_json::from_str(text).unwrap();
    assert!(c.check().unwrap_err().to_string().contains("loopback"));
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["webhook"],
                   "webhook": {"token_file": "/t", "deliver": {"*": "https://x/"}}}"#;
    let c: BridgeConfig = serde_json::from_str(text).unwrap();
    assert!(c.check().unwrap_err().to_string().contains("http://"));
}

#[test]
fn bad_routes_and_an_unknown_default_agent_are_parked_not_refused() {
    let c = parse(
        r#", "default_agent": "carol",
             "routes": [{"source": "webhook", "agent": "alice"},
                        {"source": "webhook", "channel": "c", "agent": "dave"},
                        {"source": "sms", "channel": "c", "agent": "alice"},
                        {"source": "webhook", "channel": "d", "agent": "alice"},
                        {"source": "webhook", "channel": "d", "agent": "bob"}]"#,
    )
    .unwrap();
    let plan = c.route_plan();
    assert_eq!(plan.active.len(), 1);
    assert_eq!(plan.parked.len(), 4);
    assert!(plan.default_parked.is_some());
}

#[test]
fn writes_what_it_reads() {
    let c = parse(
        r#", "routes": [{"source": "email", "address": "a@x", "agent": "alice"}],
             "default_agent": "bob",
             "email": {"maildir": "/m", "smtp": "h:25", "from": {"alice": "a@x"}}"#,
    )
    .unwrap();
    let text = serde_json::to_string(&c).unwrap();
    assert!(!text.contains("channel"), "{text}");
    assert_eq!(serde_json::from_str::<BridgeConfig>(&text).unwrap(), c);
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let r = RetryConfig {
        attempts: 9,
        base_ms: 100,
        max_ms: 1000,
    };
    let ms: Vec<u128> = (1..=6).map(|n| r.backoff(n).as_millis()).collect();
    assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
    assert_eq!(r.backoff(200).as_millis(), 1000);
}

#[test]
fn the_consult_section_goes_with_the_consult_source() {
    let both =
        r#", "consult": {"rules": [{"from": "alice", "to": "bob"}], "limits": {"max_open": 2}}"#;
    let text = both.to_string();
    let e = parse(&text).unwrap_err();
    assert!(e.contains("consult is a source exactly when"), "{e}");
    let with_source = |extra: &str| {
        let t = format!(
            r#"{{"redis_socket": "/r", "password_file": "/p", "agents": ["alice", "bob"],
                "sources": ["consult"] {extra}}}"#
        );
        let c: BridgeConfig = serde_json::from_str(&t).map_err(|e| e.to_string())?;
        c.check().map_err(|e| e.to_string())?;
        Ok::<_, String>(c)
    };
    let c = with_source(both).unwrap();
    let consult = c.consult.unwrap();
    assert_eq!(consult.limits.max_open, 2);
    assert!(consult.allows(&"alice".parse().unwrap(), &"bob".parse().unwrap()));
    let e = with_source("").unwrap_err();
    assert!(e.contains("consult is a source exactly when"), "{e}");
    let e = with_source(r#", "consult": {"limits": {"max_bytes": 0}}"#).unwrap_err();
    assert!(e.contains("consult.limits.max_bytes"), "{e}");
    let e =
        with_source(r#", "consult": {"rules": [{"from": "alice", "to": "alice"}]}"#).unwrap_err();
    assert!(e.contains("does not consult itself"), "{e}");
}

#[test]
fn the_webhook_never_relays_consult_outboxes() {
    let t = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["webhook", "consult"],
                "webhook": {"token_file": "/t", "relay": ["consult"]}, "consult": {}}"#;
    let c: BridgeConfig = serde_json::from_str(t).unwrap();
    let e = c.check().unwrap_err().to_string();
    assert!(e.contains("webhook.relay names \"consult\""), "{e}");
}

#[test]
fn a_source_section_is_its_settings_as_they_are() {
    let c = parse("").unwrap();
    let w = c.webhook.clone().unwrap();
    assert_eq!(
        w,
        WebhookConfig::of(WebhookSettings::default(), "/t".into())
    );
    // One flat section: the settings' keys beside the file's own.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["webhook"]["listen"], "127.0.0.1:8787");
    assert_eq!(v["webhook"]["token_file"], "/t");
    assert!(v["webhook"].get("settings").is_none(), "{v}");
    let typo = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["webhook"],
                   "webhook": {"token_file": "/t", "lisen": "127.0.0.1:1"}}"#;
    assert!(serde_json::from_str::<BridgeConfig>(typo).is_err());
    // `enabled` is daemon.toml's switch: the file has the section instead.
    let mut d = DiscordConfig::new("/d".into());
    d.settings.enabled = true;
    let v = serde_json::to_value(&d).unwrap();
    assert!(v.get("enabled").is_none(), "{v}");
    assert_eq!(v["max_text_bytes"], 16 << 10);
    let typo = r#"{"token_file": "/d", "max_text_byte": 1}"#;
    assert!(serde_json::from_str::<DiscordConfig>(typo).is_err());
}

#[test]
fn a_section_error_names_its_source() {
    let text = r#"{"redis_socket": "/r", "password_file": "/p", "sources": ["discord"]}"#;
    let c: BridgeConfig = serde_json::from_str(text).unwrap();
    match c.check().unwrap_err() {
        BridgeConfigError::Section(e) => {
            assert_eq!(e.source_name, "discord");
            assert_eq!(
                e.to_string(),
                "discord is a source but there is no discord section (it needs at least token_file)"
            );
        }
        e => panic!("{e}"),
    }
}

#[test]
fn the_sections_keep_their_places_in_the_file() {
    let mut c = BridgeConfig::new(PathBuf::from("/r.sock"), "/p".into());
    c.webhook = Some(WebhookConfig::new(
        "127.0.0.1:1".parse().unwrap(),
        "/t".into(),
    ));
    c.email = Some(serde_json::from_str(r#"{"maildir":"/m","smtp":"h:1"}"#).unwrap());
    c.discord = Some(DiscordConfig::new("/d".into()));
    c.consult = Some(serde_json::from_str("{}").unwrap());
    c.shared_routes = true;
    let text = serde_json::to_string(&c).unwrap();
    // Where earlier releases wrote each key, so the file stays the same.
    let keys = [
        "redis",
        "key_form",
        "password_file",
        "user",
        "agents",
        "sources",
        "routes",
        "default_agent",
        "webhook",
        "email",
        "retry",
        "outbox",
        "inbox_maxlen",
        "consult",
        "discord",
        "shared_routes",
    ];
    let at: Vec<usize> = keys
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k}: {text}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(c.sections(), ["webhook", "email", "consult", "discord"]);
    let e = serde_json::from_str::<BridgeConfig>(
        r#"{"redis":"unix:///r","password_file":"/p","bogus":1}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("expected one of `redis`, `redis_socket`, `tls`, `key_form`, `password_file`, `user`, `agents`, `sources`, `routes`, `default_agent`, `webhook`, `email`, `retry`, `outbox`, `inbox_maxlen`, `consult`, `discord`, `shared_routes`"),
        "{e}"
    );
}
