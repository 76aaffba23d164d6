//! The `[lanes]` section of daemon.toml. Each source's table
//! (`[lanes.webhook]`, `[lanes.email]`, `[lanes.discord]`: those of
//! `oxidepm_lanes::with_sources`) is read into the source's one settings
//! type of `oxidepm_lanes::sources`, which the bridge's file holds as is;
//! nothing here names a source.

use oxidepm_lanes::consult::{ConsultLimits, ConsultRule, CONSULT};
use oxidepm_lanes::proxy_config::DEFAULT_MAX_CONNECTIONS;
use oxidepm_lanes::redis_url::Topology;
use oxidepm_lanes::sources::{SecretSpec, SectionError, SourceSettings};
use oxidepm_lanes::stream_key::is_family_name;
use oxidepm_lanes::BridgeConfig;
use oxidepm_lanes::{AgentName, LimitsConfig, NameError, ProxyConfigError};
use oxidepm_lanes::{KeyForm, RedisUrl, TlsFiles};
use oxidepm_proto::{Route, RouteError};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Where lanes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One private Redis run by the daemon (the default).
    #[default]
    Redis,
    /// No lanes: agents run without one.
    Off,
}

/// Defines [`LanesSettings`] with a table for every source of
/// `oxidepm_lanes::with_sources` (where earlier releases had each, so the
/// "expected one of" list of an unknown key keeps its order), and what is
/// done with every source the same way.
macro_rules! lanes_settings {
    (
        early { $($early:ident : $early_ty:ty,)* }
        late { $($late:ident : $late_ty:ty,)* }
    ) => {
        /// Settings of the lanes.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct LanesSettings {
            /// `redis` or `off`.
            #[serde(default)]
            pub backend: Backend,
            /// Redis `appendfsync`: `everysec` (default), `always` or `no`.
            #[serde(default = "everysec")]
            pub appendfsync: String,
            /// Outside channels each agent has an inbox and an outbox for.
            #[serde(default = "default_sources")]
            pub sources: Vec<String>,
            /// Host services agents ask things of.
            #[serde(default = "default_responders")]
            pub responders: Vec<String>,
            /// Commands per second one agent may send through its socket.
            #[serde(default)]
            pub rate_limit: Option<f64>,
            /// Length cap (`MAXLEN ~`) applied to every XADD of an agent.
            #[serde(default)]
            pub maxlen: Option<u64>,
            /// Routes of the bridge (more can be added at runtime).
            #[serde(default)]
            pub routes: Vec<Route>,
            /// Agent that gets messages no route matches (else `bridge:unrouted`).
            #[serde(default)]
            pub default_agent: Option<AgentName>,
            $(
                #[doc = concat!("`[lanes.", stringify!($early), "]`: the ", stringify!($early), " source.")]
                #[serde(default)]
                pub $early: Option<$early_ty>,
            )*
            /// The user the bridge runs as when the daemon runs as root (default
            /// `oxidepm-bridge`, made when missing); unused otherwise.
            #[serde(default)]
            pub bridge_user: Option<String>,
            /// The bridge's bounds.
            #[serde(default)]
            pub bridge: BridgeSettings,
            /// Redis's `maxmemory`, bytes (default: see `lanes::budgets`).
            #[serde(default)]
            pub maxmemory: Option<u64>,
            /// Bytes one agent's outboxes may hold, at most its share of the outbox
            /// budget (default: that share; 0: none; see `lanes::budgets`).
            #[serde(default)]
            pub agent_quota: Option<u64>,
            /// Connections one agent may have open on its lane at once.
            #[serde(default = "default_max_connections")]
            pub max_connections: usize,
            /// `[lanes.limits]`: the proxy's bounds on what clients send.
            #[serde(default)]
            pub limits: LimitsConfig,
            /// The scheme of `OXIDEPM_LANE`: `unix` (default) or the deprecated
            /// `redis+unix` of earlier versions, kept for one release.
            #[serde(default)]
            pub lane_url_scheme: super::layout::LaneUrlScheme,
            /// `[[lanes.consult]]`: which agent may ask which (`from`, `to`). With
            /// at least one rule when the daemon starts, `consult` is a stream
            /// family of every agent and the bridge routes it.
            #[serde(default)]
            pub consult: Vec<ConsultRule>,
            /// `[lanes.consult_limits]`: the bounds of consulting.
            #[serde(default)]
            pub consult_limits: ConsultLimits,
            /// The largest `MAXLEN` a responder app's reply may give (every reply
            /// caps the inbox it goes to); default 1000.
            #[serde(default)]
            pub responder_inbox_maxlen: Option<u64>,
            $(
                #[doc = concat!("`[lanes.", stringify!($late), "]`: the ", stringify!($late), " source.")]
                #[serde(default)]
                pub $late: Option<$late_ty>,
            )*
            /// The largest reply of a responder app, in bytes of field names and
            /// values; default 64 KiB.
            #[serde(default)]
            pub responder_reply_max_bytes: Option<usize>,
            /// A Redis the daemon does not run, shared with other hosts (unset:
            /// the private redis-server).
            #[serde(default)]
            pub redis_url: Option<RedisUrl>,
            /// PEM file of the CA of a `rediss` server's certificate.
            #[serde(default)]
            pub tls_ca_file: Option<PathBuf>,
            /// PEM file of a client certificate, for a server that asks for one.
            #[serde(default)]
            pub tls_cert_file: Option<PathBuf>,
            /// PEM file of the client certificate's key.
            #[serde(default)]
            pub tls_key_file: Option<PathBuf>,
            /// How agents' keys are written: `plain` (default on the private
            /// Redis) or `tagged` (default with `redis_url`; a cluster needs it).
            #[serde(default)]
            pub key_form: Option<KeyForm>,
            /// This host's id on a shared server, `[a-z0-9-]{1,40}` (default: from
            /// the hostname and the home's path).
            #[serde(default)]
            pub host_id: Option<String>,
            /// Seconds a claim of a name in the shared registry lasts unless
            /// renewed (every third of it).
            #[serde(default = "default_lease_secs")]
            pub lease_secs: u64,
        }

        /// The `[lanes.<source>]` tables daemon.toml can have.
        pub const SOURCE_TABLES: &[&str] = &[$(stringify!($early),)* $(stringify!($late),)*];

        impl LanesSettings {
            /// The sources whose table there is and asks the bridge to
            /// serve them.
            pub fn served_tables(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $(if self.$early.as_ref().is_some_and(SourceSettings::served) {
                    v.push(stringify!($early));
                })*
                $(if self.$late.as_ref().is_some_and(SourceSettings::served) {
                    v.push(stringify!($late));
                })*
                v
            }

            /// Every source that has a secret, and its secret.
            pub fn source_secrets() -> Vec<(&'static str, SecretSpec)> {
                let all = [
                    $((stringify!($early), <$early_ty as SourceSettings>::SECRET),)*
                    $((stringify!($late), <$late_ty as SourceSettings>::SECRET),)*
                ];
                all.into_iter().filter_map(|(n, s)| Some((n, s?))).collect()
            }

            /// Checks the sources' settings of the `early` group, then of
            /// the `late` one (where earlier releases checked each).
            fn check_sources(&self, late: bool) -> Result<(), SectionError> {
                if !late {
                    $(check_source(self.$early.as_ref(), &self.sources)?;)*
                } else {
                    $(check_source(self.$late.as_ref(), &self.sources)?;)*
                }
                Ok(())
            }

            /// Puts each source's section into `conf`: its settings as they
            /// are, with its secret's file in `bridge_dir`, when the bridge
            /// serves it.
            pub fn fill_sections(&self, conf: &mut BridgeConfig, bridge_dir: &Path) {
                $(conf.$early = section_of(self.$early.as_ref(), bridge_dir);)*
                $(conf.$late = section_of(self.$late.as_ref(), bridge_dir);)*
            }
        }
    };
}

oxidepm_lanes::with_sources!(lanes_settings);

/// Checks one source's settings, the error naming the source.
fn check_source<S: SourceSettings>(
    settings: Option<&S>,
    sources: &[String],
) -> Result<(), SectionError> {
    match settings {
        Some(s) => s.check_settings(sources).map_err(|cause| SectionError {
            source_name: S::NAME,
            cause,
        }),
        None => Ok(()),
    }
}

/// The section of one source's settings, when the bridge serves it.
fn section_of<S: SourceSettings>(settings: Option<&S>, bridge_dir: &Path) -> Option<S::Section> {
    settings
        .filter(|s| s.served())
        .cloned()
        .map(|s| s.section(bridge_dir))
}

/// The default `lease_secs`.
fn default_lease_secs() -> u64 {
    60
}

/// `[lanes.bridge]`: the bridge's bounds (unset: the bridge's defaults).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeSettings {
    /// Largest outbox entry delivered, in bytes (default 1 MiB); a larger
    /// one is dead-lettered without its fields.
    pub max_entry_bytes: Option<usize>,
    /// Bytes of one outbox's entries the bridge holds at once (default
    /// 2 MiB).
    pub buffer_bytes: Option<usize>,
    /// Cap of each dead-letter stream, in entries (default 1,000).
    pub dead_maxlen: Option<u64>,
    /// Bytes of an entry's fields a dead letter keeps (default 4096).
    pub dead_entry_bytes: Option<usize>,
}

fn everysec() -> String {
    "everysec".into()
}

fn default_sources() -> Vec<String> {
    vec!["webhook".into(), "email".into()]
}

fn default_responders() -> Vec<String> {
    vec!["ops".into()]
}

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

impl Default for LanesSettings {
    fn default() -> LanesSettings {
        toml::from_str("").expect("defaults parse")
    }
}

impl LanesSettings {
    /// Sources and responders: every stream family an agent has.
    pub fn families(&self) -> Vec<String> {
        let mut v = self.sources.clone();
        v.extend(self.responders.iter().cloned());
        if !self.consult.is_empty() {
            v.push(CONSULT.to_string());
        }
        v
    }

    /// Checks the names and values.
    pub fn check(&self) -> Result<(), SettingsError> {
        for r in &self.routes {
            r.check()?;
            r.agent
                .parse::<AgentName>()
                .map_err(|source| SettingsError::RouteAgent {
                    route: Box::new(r.clone()),
                    source,
                })?;
            if !self.sources.contains(&r.source) {
                return Err(SettingsError::RouteSource {
                    route: Box::new(r.clone()),
                    sources: self.sources.clone(),
                });
            }
        }
        if !matches!(self.appendfsync.as_str(), "everysec" | "always" | "no") {
            return Err(SettingsError::AppendFsync {
                value: self.appendfsync.clone(),
            });
        }
        for s in self.families() {
            if !is_family_name(&s) {
                return Err(SettingsError::FamilyName { name: s });
            }
        }
        if let Some(u) = &self.bridge_user {
            if !is_user_name(u) || u == "root" || u.bytes().all(|b| b == b'0') {
                return Err(SettingsError::BridgeUser { name: u.clone() });
            }
        }
        self.check_sources(false)?;
        self.check_consult()?;
        self.check_sources(true)?;
        let b = &self.bridge;
        if b.max_entry_bytes == Some(0)
            || b.buffer_bytes == Some(0)
            || b.dead_maxlen == Some(0)
            || b.dead_entry_bytes == Some(0)
        {
            return Err(SettingsError::BridgeZero);
        }
        self.check_bounds()?;
        self.check_shared()
    }

    /// The key form in force: `key_form`, else `tagged` with `redis_url`
    /// and `plain` without.
    pub fn key_form(&self) -> KeyForm {
        self.key_form.unwrap_or(if self.redis_url.is_some() {
            KeyForm::Tagged
        } else {
            KeyForm::Plain
        })
    }

    /// The TLS files as the lanes processes take them.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
        }
    }

    /// The settings of a shared server fit together.
    fn check_shared(&self) -> Result<(), SettingsError> {
        let tls = self.tls_files();
        let url_tls = self.redis_url.as_ref().is_some_and(|u| u.tls);
        if !tls.is_empty() && !url_tls {
            return Err(SettingsError::Shared(
                "tls_ca_file, tls_cert_file and tls_key_file are for a TLS server: \
                 set redis_url to a rediss:// (or rediss+sentinel://, rediss+cluster://) URL, \
                 or remove them"
                    .into(),
            ));
        }
        tls.check()
            .map_err(|e| SettingsError::Shared(e.to_string()))?;
        for f in [&self.tls_ca_file, &self.tls_cert_file, &self.tls_key_file]
            .into_iter()
            .flatten()
        {
            if !f.is_absolute() {
                return Err(SettingsError::Shared(format!(
                    "TLS file {}: give an absolute path",
                    f.display()
                )));
            }
        }
        let cluster = self
            .redis_url
            .as_ref()
            .is_some_and(|u| matches!(u.topology, Topology::Cluster { .. }));
        if cluster && self.key_form() == KeyForm::Plain {
            return Err(SettingsError::Shared(
                "key_form = \"plain\" cannot work on a Redis Cluster: an agent's keys must \
                 share one slot (one XREADGROUP reads all its inboxes); remove key_form or set \
                 \"tagged\""
                    .into(),
            ));
        }
        if let Some(h) = &self.host_id {
            if !is_host_id(h) {
                return Err(SettingsError::Shared(format!(
                    "host_id = {h:?}: use 1 to 40 of a-z, 0-9 and '-'"
                )));
            }
        }
        if self.lease_secs < 3 || self.lease_secs > 86_400 {
            return Err(SettingsError::Shared(format!(
                "lease_secs = {}: use 3 to 86400 (the lease is renewed every third of it)",
                self.lease_secs
            )));
        }
        Ok(())
    }

    /// `consult` is no source or responder of its own, no rule names one
    /// (no agent can be named like one), and the bounds are positive.
    fn check_consult(&self) -> Result<(), SettingsError> {
        if self
            .sources
            .iter()
            .chain(&self.responders)
            .any(|f| f == CONSULT)
        {
            return Err(SettingsError::ConsultFamily);
        }
        let families = self.families();
        for r in &self.consult {
            for side in [&r.from, &r.to] {
                side.check_families(&families)
                    .map_err(|source| SettingsError::ConsultRule {
                        rule: r.to_string(),
                        source,
                    })?;
            }
        }
        self.consult_limits
            .check()
            .map_err(SettingsError::ConsultLimits)
    }

    /// Checks that the bounds can be met.
    fn check_bounds(&self) -> Result<(), SettingsError> {
        let min = super::budgets::MIN_MAXMEMORY;
        if let Some(m) = self.maxmemory.filter(|m| *m < min) {
            return Err(SettingsError::MaxMemory { value: m, min });
        }
        if let Some(q) = self.agent_quota.filter(|q| *q > 0) {
            let budget = super::budgets::outbox_budget(self);
            if q > budget {
                return Err(SettingsError::AgentQuota {
                    value: q,
                    budget,
                    maxmemory: super::budgets::maxmemory(self),
                });
            }
        }
        if self.max_connections == 0 {
            return Err(SettingsError::MaxConnections);
        }
        if self.responder_inbox_maxlen == Some(0) {
            return Err(SettingsError::ResponderInboxMaxlen);
        }
        if self.responder_reply_max_bytes == Some(0) {
            return Err(SettingsError::ResponderReplyMaxBytes);
        }
        self.limits.validate().map_err(SettingsError::Limits)
    }
}

impl From<&LanesSettings> for super::budgets::Asked {
    fn from(s: &LanesSettings) -> Self {
        super::budgets::Asked {
            maxmemory: s.maxmemory,
            agent_quota: s.agent_quota,
        }
    }
}

/// Whether `s` can be a host id: 1 to 40 of `[a-z0-9-]`.
pub fn is_host_id(s: &str) -> bool {
    (1..=40).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The default host id: the hostname (as far as it is `[a-z0-9-]`, at
/// most 31 bytes) and 8 hex digits of a hash of the home's path, so two
/// homes on one machine are two hosts.
pub fn default_host_id(hostname: &str, home: &std::path::Path) -> String {
    let mut name: String = hostname
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(31)
        .collect();
    name = name.trim_matches('-').to_string();
    if name.is_empty() {
        name = "host".into();
    }
    // FNV-1a: stable across builds and versions, unlike std's hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in home.as_os_str().as_encoded_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{name}-{h:08x}")
}

/// A user name useradd takes without `--badname` (`[a-z_][a-z0-9_-]*`, at
/// most 32 bytes), or a uid.
fn is_user_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b.iter().all(u8::is_ascii_digit)
            || ((b[0].is_ascii_lowercase() || b[0] == b'_')
                && b.iter().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-'
                })))
}

/// Why the `[lanes]` settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A route is malformed.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A route names an agent that cannot be one.
    #[error("route {}: {source}", .route.describe())]
    RouteAgent {
        /// The route.
        route: Box<Route>,
        /// Why its agent is not a name.
        source: NameError,
    },
    /// A route's source is not among `lanes.sources`.
    #[error("route {}: {:?} is not one of lanes.sources {:?}", .route.describe(), .route.source, .sources)]
    RouteSource {
        /// The route.
        route: Box<Route>,
        /// The lanes' sources.
        sources: Vec<String>,
    },
    /// `appendfsync` is none of Redis's values.
    #[error("lanes.appendfsync = {value:?}: use everysec, always or no")]
    AppendFsync {
        /// The value as given.
        value: String,
    },
    /// `bridge_user` is not a user name, or is root.
    #[error("lanes.bridge_user = {name:?}: use the name of a user of its own (a-z, 0-9, '_', '-', at most 32, not root)")]
    BridgeUser {
        /// The value as given.
        name: String,
    },
    /// A bound of `[lanes.bridge]` is 0.
    #[error(
        "lanes.bridge: max_entry_bytes, buffer_bytes, dead_maxlen and dead_entry_bytes must be positive (leave one out for its default)"
    )]
    BridgeZero,
    /// A source or responder name cannot be a stream family.
    #[error("lanes source or responder {name:?}: use 1 to 32 of a-z, 0-9, '_' and '-'")]
    FamilyName {
        /// The name as given.
        name: String,
    },
    /// `maxmemory` too small for Redis to work in.
    #[error("lanes.maxmemory = {value}: Redis needs at least {min} bytes")]
    MaxMemory {
        /// The value as given.
        value: u64,
        /// The least accepted.
        min: u64,
    },
    /// `agent_quota` more than every outbox together may hold.
    #[error(
        "lanes.agent_quota = {value} bytes is more than the outbox budget of {budget} bytes \
         (half of lanes.maxmemory = {maxmemory}), which every agent's outboxes share; the \
         other half is kept for inboxes, replies and the bridge. Lower agent_quota, raise \
         maxmemory, or remove agent_quota: each agent then gets its share of the budget"
    )]
    AgentQuota {
        /// The value as given.
        value: u64,
        /// The outbox budget.
        budget: u64,
        /// Redis's `maxmemory`.
        maxmemory: u64,
    },
    /// `max_connections` 0.
    #[error("lanes.max_connections must be at least 1")]
    MaxConnections,
    /// `responder_inbox_maxlen` 0.
    #[error("lanes.responder_inbox_maxlen must be at least 1 (leave it out for 1000)")]
    ResponderInboxMaxlen,
    /// `responder_reply_max_bytes` 0.
    #[error("lanes.responder_reply_max_bytes must be at least 1 (leave it out for 65536)")]
    ResponderReplyMaxBytes,
    /// `[lanes.limits]` cannot be met.
    #[error("lanes.{0}")]
    Limits(#[source] ProxyConfigError),
    /// `consult` listed as a source or responder.
    #[error("\"consult\" is not a source or responder to list: agents consult each other through [[lanes.consult]] rules; remove it from lanes.sources and lanes.responders")]
    ConsultFamily,
    /// A consult rule names a source or responder.
    #[error("[[lanes.consult]] rule {rule}: {source}")]
    ConsultRule {
        /// The rule.
        rule: String,
        /// Why a side cannot be an agent.
        source: NameError,
    },
    /// A bound of `[lanes.consult_limits]` cannot be met.
    #[error("lanes.consult_limits.{0}")]
    ConsultLimits(#[source] oxidepm_lanes::consult::LimitError),
    /// The shared server's settings do not fit together.
    #[error("lanes: {0}")]
    Shared(String),
    /// A source's table (`[lanes.<source>]`) cannot be used.
    #[error(transparent)]
    Source(#[from] SectionError),
}
