//! Serde visitors that read an app file in one pass over any of the formats.
//!
//! Hand-written visitors rather than derived ones, so that every check runs
//! while the format's parser still knows where it is (errors get the line of
//! the offending key or value), and so that pm2's `env_<name>` sections can be
//! accepted next to a strict list of fields.

use super::fields::{
    self, DISABLE_LOGS, ENV_SECTION, ERROR_FILE, IGNORED, LOG_FILE, OUT_FILE, PID_FILE,
};
use super::keys::{u32_of, Ctx, Key, KeySeed, Table};
use super::nested::{DependsOn, EnvFiles, Health};
use super::pm2;
use super::resolve::{resolve, RawApp};
use super::values::{
    exec_mode, text, Amount, Bool, Check, EnvMap, Instances, List, OneOrMany, OnlyBool, Scalar,
    Str, Watch, Words, WEEK_MS,
};
use oxidepm_proto::AppSpec;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// The whole file: a table with `apps`, or (YAML, JSON) a list of apps.
pub(super) struct Root<'c, 'a>(pub &'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for Root<'_, '_> {
    type Value = Vec<AppSpec>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<AppSpec>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Root<'_, '_> {
    type Value = Vec<AppSpec>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a table with an \"apps\" list, or a list of apps")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<AppSpec>, E> {
        Ok(Vec::new())
    }
    fn visit_none<E: de::Error>(self) -> Result<Vec<AppSpec>, E> {
        Ok(Vec::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<AppSpec>, A::Error> {
        Apps(self.0).visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<AppSpec>, A::Error> {
        let mut apps = Vec::new();
        let mut seen = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            keys: fields::ROOT_KEYS,
            shown: fields::ROOT_SHOWN,
            what: "top-level key",
            table: Table::Root,
            seen: &seen,
        })? {
            if key.slot == "apps" {
                apps = map.next_value_seed(Apps(self.0))?;
            } else if key.slot == "log_max_size" {
                let max = self.0.value(
                    &mut map,
                    &key,
                    Amount::bytes(oxidepm_proto::MIN_LOG_ROTATE_BYTES, u64::MAX),
                )?;
                self.0.extras.borrow_mut().max_size = Some(max);
            } else if key.slot == "log_files_kept" {
                let keep = self.0.value(
                    &mut map,
                    &key,
                    Amount::count(0, oxidepm_proto::MAX_LOG_KEEP.into()),
                )?;
                self.0.extras.borrow_mut().retain = Some(u32_of(keep));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
            seen.insert(key.slot, key.name);
        }
        Ok(apps)
    }
}

/// The list of apps.
struct Apps<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for Apps<'_, '_> {
    type Value = Vec<AppSpec>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<AppSpec>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Apps<'_, '_> {
    type Value = Vec<AppSpec>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of apps ([[apps]] tables in TOML)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<AppSpec>, A::Error> {
        let mut apps = Vec::new();
        let mut index = 0;
        while let Some(app) = seq.next_element_seed(App { ctx: self.0, index })? {
            index += 1;
            // `instances = N`: N apps <name>-0 … <name>-N-1 of one spec.
            match self.0.instances.replace(1) {
                n if n > 1 => {
                    let base = app.name.clone();
                    apps.extend((0..n).map(|i| oxidepm_proto::instance_spec(&app, &base, i)));
                }
                _ => apps.push(app),
            }
            self.0.app.set(None);
        }
        Ok(apps)
    }
}

/// One app, read into a [`RawApp`] and resolved into an [`AppSpec`].
struct App<'c, 'a> {
    ctx: &'c Ctx<'a>,
    index: usize,
}

impl<'de> DeserializeSeed<'de> for App<'_, '_> {
    type Value = AppSpec;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AppSpec, D::Error> {
        self.ctx.app.set(Some(self.index));
        *self.ctx.app_name.borrow_mut() = None;
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for App<'_, '_> {
    type Value = AppSpec;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an app: a table of fields")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AppSpec, A::Error> {
        let ctx = self.ctx;
        let mut read = AppRead::default();
        let mut seen = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            keys: fields::APP_KEYS,
            shown: fields::APP_SHOWN,
            what: "field",
            table: Table::App,
            seen: &seen,
        })? {
            let m = &mut map;
            let done = program_field(ctx, m, &key, &mut read.raw)?
                || restart_field(ctx, m, &key, &mut read.raw)?
                || log_field(ctx, m, &key, &mut read)?;
            if !done {
                other_field(ctx, m, &key, &mut read.raw)?;
            }
            seen.insert(key.slot, key.name);
        }
        read.finish(ctx)
    }
}

/// An app as its fields are read.
#[derive(Default)]
struct AppRead {
    /// The fields, as given.
    raw: RawApp,
    /// (slot, field as written, path) of log and pid file paths, and
    /// `disable_logs`: each gets a note.
    paths: Vec<(&'static str, String, String)>,
}

impl AppRead {
    /// The app resolved, its name taken, and what pm2's habits add noted.
    fn finish<E: de::Error>(self, ctx: &Ctx) -> Result<AppSpec, E> {
        let AppRead { raw, paths } = self;
        let own_max_size = raw.log_max_bytes.is_some();
        let own_retain = raw.log_keep.is_some();
        let app = resolve(raw, ctx.base, &ctx.names.borrow()).map_err(E::custom)?;
        ctx.names.borrow_mut().insert(app.name.clone());
        let mut extras = ctx.extras.borrow_mut();
        for (slot, field, path) in paths {
            extras
                .notes
                .push(pm2::path_note(slot, &field, &app.name, &path));
        }
        if own_max_size {
            extras.own_max_size.insert(app.name.clone());
        }
        if own_retain {
            extras.own_retain.insert(app.name.clone());
        }
        Ok(app)
    }
}

/// A string field checked by `check`.
fn checked<T>(check: Check<T>, expecting: &'static str) -> Str<Check<T>> {
    Str { check, expecting }
}

/// What runs, where and as whom; false when `key` is none of these.
fn program_field<'de, A: MapAccess<'de>>(
    ctx: &Ctx,
    m: &mut A,
    key: &Key,
    raw: &mut RawApp,
) -> Result<bool, A::Error> {
    match key.slot {
        "name" => {
            let name = ctx.value(
                m,
                key,
                Str {
                    check: |s: &str| unique_name(ctx, s),
                    expecting: "an app name",
                },
            )?;
            *ctx.app_name.borrow_mut() = Some(name.clone());
            raw.name = Some(name);
        }
        "script" => raw.script = Some(ctx.value(m, key, text())?),
        "args" => raw.args = ctx.value(m, key, Words)?,
        "cwd" => raw.cwd = Some(ctx.value(m, key, text())?),
        "env" => raw.env = ctx.value(m, key, EnvMap)?,
        "env_file" => raw.env_file = ctx.value(m, key, EnvFiles(ctx))?,
        "interpreter" => raw.interpreter = Some(ctx.value(m, key, text())?),
        "interpreter_args" => {
            raw.interpreter_args = Some((key.name.clone(), ctx.value(m, key, Words)?))
        }
        "user" => raw.user = Some(ctx.value(m, key, checked(fields::user, "a user name"))?),
        "kind" => raw.kind = Some(ctx.value(m, key, checked(fields::kind, "an app kind"))?),
        "protected" => raw.protected = Some(ctx.value(m, key, Bool)?),
        "tags" => {
            raw.tags = ctx.value(
                m,
                key,
                List {
                    check: fields::tag,
                    expecting: "a list of tags",
                },
            )?
        }
        "namespace" => {
            raw.namespace = Some(ctx.value(m, key, checked(fields::tag, "a namespace"))?)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// When it starts, restarts and stops; false when `key` is none of these.
fn restart_field<'de, A: MapAccess<'de>>(
    ctx: &Ctx,
    m: &mut A,
    key: &Key,
    raw: &mut RawApp,
) -> Result<bool, A::Error> {
    let millis = Amount::millis(0, WEEK_MS);
    match key.slot {
        "autorestart" => raw.autorestart = Some(ctx.value(m, key, Bool)?),
        "restart" => {
            raw.restart = Some(ctx.value(m, key, checked(fields::restart, "a restart policy"))?)
        }
        "max_restarts" => {
            raw.max_restarts = Some(u32_of(ctx.value(
                m,
                key,
                Amount::count(0, u32::MAX.into()),
            )?))
        }
        "min_uptime" => raw.min_uptime_ms = Some(ctx.value(m, key, millis)?),
        "restart_delay" => raw.restart_delay_ms = Some(ctx.value(m, key, millis)?),
        "exp_backoff_restart_delay" => raw.exp_backoff_ms = Some(ctx.value(m, key, millis)?),
        "kill_timeout" => raw.kill_timeout_ms = Some(ctx.value(m, key, millis)?),
        "stop_signal" => {
            raw.stop_signal = Some(ctx.value(m, key, checked(fields::signal, "a signal name"))?)
        }
        "max_memory_restart" => {
            // A limit below what any process needs would restart forever.
            raw.max_memory_bytes = Some(ctx.value(m, key, Amount::bytes(1 << 20, u64::MAX))?)
        }
        "cron_restart" => {
            raw.cron_restart =
                Some(ctx.value(m, key, checked(fields::cron, "a cron expression"))?)
        }
        "autostart" => raw.autostart = Some(ctx.value(m, key, Bool)?),
        "health" => raw.health = Some(ctx.value(m, key, Health(ctx))?),
        "depends_on" => raw.depends_on = ctx.value(m, key, DependsOn)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Where its output goes; false when `key` is none of these.
fn log_field<'de, A: MapAccess<'de>>(
    ctx: &Ctx,
    m: &mut A,
    key: &Key,
    read: &mut AppRead,
) -> Result<bool, A::Error> {
    let raw = &mut read.raw;
    match key.slot {
        "time" => raw.log_timestamps = Some(ctx.value(m, key, Bool)?),
        "log_max_size" => {
            raw.log_max_bytes = Some(ctx.value(
                m,
                key,
                Amount::bytes(oxidepm_proto::MIN_LOG_ROTATE_BYTES, u64::MAX),
            )?)
        }
        "log_target" => {
            raw.log_target = Some(ctx.value(
                m,
                key,
                Str {
                    check: oxidepm_proto::LogTarget::parse,
                    expecting: "\"files\", \"journald\" or \"both\"",
                },
            )?)
        }
        "log_files_kept" => {
            raw.log_keep = Some(u32_of(ctx.value(
                m,
                key,
                Amount::count(0, oxidepm_proto::MAX_LOG_KEEP.into()),
            )?))
        }
        DISABLE_LOGS => {
            if ctx.value(m, key, Bool)? {
                read.paths.push((key.slot, key.name.clone(), String::new()));
            }
        }
        OUT_FILE | ERROR_FILE | LOG_FILE | PID_FILE => {
            let path = ctx.value(m, key, text())?;
            read.paths.push((key.slot, key.name.clone(), path));
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// pm2's fields that oxidepm takes in its own way or refuses, its
/// `env_<name>` sections, and the fields it ignores.
fn other_field<'de, A: MapAccess<'de>>(
    ctx: &Ctx,
    m: &mut A,
    key: &Key,
    raw: &mut RawApp,
) -> Result<(), A::Error> {
    match key.slot {
        "instances" => ctx.instances.set(ctx.value(m, key, Instances)?),
        "exec_mode" => ctx.value(m, key, checked(exec_mode, "\"fork\""))?,
        "watch" => raw.watch = ctx.value(m, key, Watch)?,
        "ignore_watch" => raw.ignore_watch = ctx.value(m, key, OneOrMany)?,
        "watch_delay" => {
            raw.watch_delay_ms =
                Some(ctx.value(m, key, Amount::millis(0, oxidepm_proto::MAX_WATCH_DELAY_MS))?)
        }
        "shutdown_with_message" => ctx.value(
            m,
            key,
            OnlyBool {
                allowed: false,
                refusal: "shutdown_with_message is not supported: apps are stopped with a \
                          signal (see stop_signal)",
            },
        )?,
        "port" => raw.port = Some(ctx.value(m, key, Scalar)?),
        ENV_SECTION => {
            let section = key.name["env_".len()..].to_string();
            if ctx.env.as_deref() == Some(section.as_str()) {
                raw.env_section = ctx.value(m, key, EnvMap)?;
            } else {
                ctx.value(m, key, PhantomData::<IgnoredAny>)?;
            }
            ctx.extras.borrow_mut().env_sections.insert(section);
        }
        _ => {
            debug_assert!(key.slot == IGNORED);
            ctx.value(m, key, PhantomData::<IgnoredAny>)?;
        }
    }
    Ok(())
}

fn unique_name(ctx: &Ctx, name: &str) -> Result<String, String> {
    let name = fields::app_name(name)?;
    if ctx.names.borrow().contains(&name) {
        return Err(format!(
            "app name {name:?} is used by an earlier app of this file; names must be unique"
        ));
    }
    Ok(name)
}
