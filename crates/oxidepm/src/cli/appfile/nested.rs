//! Readers of the app fields that are tables or lists of tables, and of
//! `env_file`, which reads files while its value is at hand.

use super::fields;
use super::keys::{u32_of, Ctx, Key, KeySeed, Table};
use super::resolve::absolutize;
use super::values::{non_empty, Amount, List, OneOrMany, Str, DAY_MS, SECOND_MS, WEEK_MS};
use oxidepm_proto::{Dependency, DependencyCondition, HealthProbe, HealthSpec};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// `env_file`: one or more env files, read and merged in order.
pub(super) struct EnvFiles<'c, 'a>(pub &'c Ctx<'a>);

impl EnvFiles<'_, '_> {
    fn load<E: de::Error>(&self, paths: Vec<String>) -> Result<BTreeMap<String, String>, E> {
        let mut env = BTreeMap::new();
        for path in paths {
            let vars = super::read_env_file(&absolutize(self.0.base, &path))
                .map_err(|e| E::custom(format!("cannot load env file: {e}")))?;
            env.extend(vars);
        }
        Ok(env)
    }
}

impl<'de> DeserializeSeed<'de> for EnvFiles<'_, '_> {
    type Value = BTreeMap<String, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EnvFiles<'_, '_> {
    type Value = BTreeMap<String, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a path or a list of paths")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let paths = OneOrMany.visit_str(v)?;
        self.load(paths)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let paths = OneOrMany.visit_seq(seq)?;
        self.load(paths)
    }
}

/// `health`.
pub(super) struct Health<'c, 'a>(pub &'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for Health<'_, '_> {
    type Value = HealthSpec;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<HealthSpec, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Health<'_, '_> {
    type Value = HealthSpec;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a health check: a table with http, tcp or command")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HealthSpec, A::Error> {
        let ctx = self.0;
        let mut read = HealthRead::default();
        let mut seen = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            keys: fields::HEALTH_KEYS,
            shown: fields::HEALTH_SHOWN,
            what: "health field",
            table: Table::Other,
            seen: &seen,
        })? {
            read.field(ctx, &mut map, &key)?;
            seen.insert(key.slot, key.name);
        }
        read.finish()
    }
}

/// A health check as its fields are read (the defaults until then).
struct HealthRead {
    http: Option<String>,
    tcp: Option<String>,
    command: Option<Vec<String>>,
    expect_status: Option<u16>,
    interval_ms: u64,
    timeout_ms: u64,
    retries: u32,
    start_period_ms: u64,
}

impl Default for HealthRead {
    fn default() -> HealthRead {
        HealthRead {
            http: None,
            tcp: None,
            command: None,
            expect_status: None,
            interval_ms: 5 * SECOND_MS,
            timeout_ms: 2 * SECOND_MS,
            retries: 3,
            start_period_ms: 0,
        }
    }
}

impl HealthRead {
    /// Reads the value of one field.
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        ctx: &Ctx,
        m: &mut A,
        key: &Key,
    ) -> Result<(), A::Error> {
        match key.slot {
            "http" => {
                self.http = Some(ctx.value(
                    m,
                    key,
                    Str {
                        check: fields::http_url,
                        expecting: "an http:// URL",
                    },
                )?)
            }
            "tcp" => {
                self.tcp = Some(ctx.value(
                    m,
                    key,
                    Str {
                        check: fields::tcp_addr,
                        expecting: "\"host:port\"",
                    },
                )?)
            }
            "command" => {
                self.command = Some(ctx.value(
                    m,
                    key,
                    List {
                        check: non_empty,
                        expecting: "a list: the program and its arguments",
                    },
                )?)
            }
            "expect_status" => {
                let status = ctx.value(m, key, Amount::count(100, 599))?;
                self.expect_status = Some(u16::try_from(status).unwrap_or(u16::MAX));
            }
            "interval" => self.interval_ms = ctx.value(m, key, Amount::millis(100, DAY_MS))?,
            "timeout" => self.timeout_ms = ctx.value(m, key, Amount::millis(1, DAY_MS))?,
            "retries" => self.retries = u32_of(ctx.value(m, key, Amount::count(1, 100))?),
            "start_period" => {
                self.start_period_ms = ctx.value(m, key, Amount::millis(0, WEEK_MS))?
            }
            _ => unreachable!("HEALTH_KEYS has no other slot"),
        }
        Ok(())
    }

    /// The check, once its fields are all read: exactly one probe, and
    /// `expect_status` only with http.
    fn finish<E: de::Error>(self) -> Result<HealthSpec, E> {
        let checks: Vec<&str> = [
            ("http", self.http.is_some()),
            ("tcp", self.tcp.is_some()),
            ("command", self.command.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        match checks.as_slice() {
            [_] => {}
            [] => {
                return Err(E::custom(
                    "a health check needs one of http, tcp or command",
                ))
            }
            _ => {
                return Err(E::custom(format!(
                    "a health check takes one of http, tcp or command, not {}",
                    checks.join(" and ")
                )))
            }
        }
        if self.expect_status.is_some() && self.http.is_none() {
            return Err(E::custom("expect_status applies only to http checks"));
        }
        let probe = match (self.http, self.tcp, self.command) {
            (Some(url), _, _) => HealthProbe::Http(url),
            (_, Some(addr), _) => HealthProbe::Tcp(addr),
            (_, _, Some(cmd)) if cmd.is_empty() => {
                return Err(E::custom(
                    "the health command is empty; give the program and its arguments",
                ))
            }
            (_, _, Some(cmd)) => HealthProbe::Command(cmd),
            (None, None, None) => unreachable!("exactly one probe was checked above"),
        };
        Ok(HealthSpec {
            probe,
            expect_status: self.expect_status,
            interval_ms: self.interval_ms,
            timeout_ms: self.timeout_ms,
            retries: self.retries,
            start_period_ms: self.start_period_ms,
        })
    }
}

/// `depends_on`: a list of app names or of `{app, condition}` tables.
pub(super) struct DependsOn;

impl<'de> DeserializeSeed<'de> for DependsOn {
    type Value = Vec<Dependency>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Dependency>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DependsOn {
    type Value = Vec<Dependency>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of app names or of {app, condition} tables")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Dependency>, A::Error> {
        let mut deps: Vec<Dependency> = Vec::new();
        while let Some(dep) = seq.next_element_seed(DependencySeed)? {
            if deps.iter().any(|d| d.app == dep.app) {
                return Err(de::Error::custom(format!(
                    "{:?} is listed twice in depends_on",
                    dep.app
                )));
            }
            deps.push(dep);
        }
        Ok(deps)
    }
}

/// One entry of `depends_on`.
struct DependencySeed;

impl<'de> DeserializeSeed<'de> for DependencySeed {
    type Value = Dependency;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Dependency, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DependencySeed {
    type Value = Dependency;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an app name or an {app, condition} table")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Dependency, E> {
        Ok(Dependency {
            app: fields::app_name(v).map_err(E::custom)?,
            condition: DependencyCondition::Started,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dependency, A::Error> {
        let mut app = None;
        let mut condition = DependencyCondition::Started;
        let mut seen = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            keys: fields::DEP_KEYS,
            shown: fields::DEP_SHOWN,
            what: "depends_on field",
            table: Table::Other,
            seen: &seen,
        })? {
            if key.slot == "app" {
                app = Some(map.next_value_seed(Str {
                    check: fields::app_name,
                    expecting: "an app name",
                })?);
            } else {
                condition = map.next_value_seed(Str {
                    check: fields::condition,
                    expecting: "a condition",
                })?;
            }
            seen.insert(key.slot, key.name);
        }
        let app = app.ok_or_else(|| de::Error::custom("a depends_on entry needs \"app\""))?;
        Ok(Dependency { app, condition })
    }
}
