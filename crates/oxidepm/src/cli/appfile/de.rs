//! Serde visitors that read an app file in one pass over any of the formats.
//!
//! Hand-written visitors rather than derived ones, so that every check runs
//! while the format's parser still knows where it is (errors get the line of
//! the offending key or value), and so that pm2's `env_<name>` sections can be
//! accepted next to a strict list of fields.

use super::fields::{
    self, DISABLE_LOGS, ENV_SECTION, ERROR_FILE, IGNORED, LOG_FILE, OUT_FILE, PID_FILE,
};
use super::nested::{DependsOn, EnvFiles, Health};
use super::pm2::{self, FileExtras};
use super::resolve::{resolve, RawApp};
use super::values::{
    exec_mode, text, Amount, Bool, EnvMap, Instances, List, OnlyBool, Scalar, Str, Words, WEEK_MS,
};
use oxidepm_proto::AppSpec;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

/// What the parse is doing, kept so that an error can name the app and field.
pub(super) struct Ctx<'a> {
    /// Absolute directory of the app file.
    pub base: &'a Path,
    /// Index of the app being read, if inside one.
    pub app: Cell<Option<usize>>,
    /// Name of the app being read, once its `name` has been read.
    pub app_name: RefCell<Option<String>>,
    /// Path of the field being read, such as `health`, `interval`.
    pub field: RefCell<Vec<String>>,
    /// Names of the apps read so far.
    pub names: RefCell<BTreeSet<String>>,
    /// `instances` of the app being read (1 when not given).
    pub instances: Cell<u32>,
    /// The `env_<name>` section to apply (`--env <name>`).
    pub env: Option<String>,
    /// What pm2's habits added, applied once the apps are read.
    pub extras: RefCell<FileExtras>,
}

impl<'a> Ctx<'a> {
    /// A context for a file in directory `base`.
    pub fn new(base: &'a Path) -> Ctx<'a> {
        Ctx {
            base,
            app: Cell::new(None),
            app_name: RefCell::new(None),
            field: RefCell::new(Vec::new()),
            names: RefCell::new(BTreeSet::new()),
            instances: Cell::new(1),
            env: None,
            extras: RefCell::new(FileExtras::default()),
        }
    }

    /// A context that applies the `env_<name>` sections of `env`.
    pub fn with_env(base: &'a Path, env: Option<&str>) -> Ctx<'a> {
        Ctx {
            env: env.map(str::to_string),
            ..Ctx::new(base)
        }
    }

    /// Reads the value of `key` with `seed`, remembering the key while it is read.
    pub fn value<'de, A: MapAccess<'de>, S: DeserializeSeed<'de>>(
        &self,
        map: &mut A,
        key: &Key,
        seed: S,
    ) -> Result<S::Value, A::Error> {
        self.field.borrow_mut().push(key.name.clone());
        // On error the key stays on the stack for the message.
        let value = map.next_value_seed(seed)?;
        self.field.borrow_mut().pop();
        Ok(value)
    }
}

/// A key that was read and recognised.
pub(super) struct Key {
    pub name: String,
    pub slot: &'static str,
}

/// The kind of table a key is read in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    /// The top level, which also takes `x-*` keys.
    Root,
    /// An app, which also takes pm2's `env_<name>` sections and refused fields.
    App,
    /// Any other table.
    Other,
}

/// Reads a key of a table with a fixed set of fields.
pub(super) struct KeySeed<'s> {
    pub keys: &'static [(&'static str, &'static str)],
    pub shown: &'static str,
    pub what: &'static str,
    /// Which table: the top level and apps take some keys outside `keys`.
    pub table: Table,
    /// Slots already filled, with the key that filled them.
    pub seen: &'s BTreeMap<&'static str, String>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} name", self.what)
    }
    fn visit_str<E: de::Error>(self, k: &str) -> Result<Key, E> {
        if let Some(&(name, slot)) = self.keys.iter().find(|(name, _)| *name == k) {
            if let Some(first) = self.seen.get(slot).filter(|_| slot != IGNORED) {
                return Err(E::custom(if first == k {
                    format!("{} {k:?} is given twice", self.what)
                } else {
                    format!("{first:?} and {k:?} are the same {}; keep one", self.what)
                }));
            }
            return Ok(Key {
                name: name.to_string(),
                slot,
            });
        }
        if self.table == Table::Root && k.starts_with("x-") {
            // Room for YAML anchors, as in Compose files.
            return Ok(Key {
                name: k.to_string(),
                slot: IGNORED,
            });
        }
        if self.table == Table::App {
            if let Some(refusal) = fields::app_refused(k) {
                return Err(E::custom(refusal));
            }
            if fields::is_env_section(k) {
                return Ok(Key {
                    name: k.to_string(),
                    slot: ENV_SECTION,
                });
            }
        }
        let hint = fields::suggest(k, self.keys)
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        Err(E::custom(format!(
            "unknown {} {k:?}{hint}; expected one of {}",
            self.what, self.shown
        )))
    }
}

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
        let mut raw = RawApp::default();
        let mut seen = BTreeMap::new();
        // (slot, field as written, path) of log and pid file paths, and
        // `disable_logs`: each gets a note.
        let mut paths: Vec<(&str, String, String)> = Vec::new();
        let millis = Amount::millis(0, WEEK_MS);
        while let Some(key) = map.next_key_seed(KeySeed {
            keys: fields::APP_KEYS,
            shown: fields::APP_SHOWN,
            what: "field",
            table: Table::App,
            seen: &seen,
        })? {
            let m = &mut map;
            match key.slot {
                "name" => {
                    let name = ctx.value(
                        m,
                        &key,
                        Str {
                            check: |s: &str| unique_name(ctx, s),
                            expecting: "an app name",
                        },
                    )?;
                    *ctx.app_name.borrow_mut() = Some(name.clone());
                    raw.name = Some(name);
                }
                "script" => raw.script = Some(ctx.value(m, &key, text())?),
                "args" => raw.args = ctx.value(m, &key, Words)?,
                "cwd" => raw.cwd = Some(ctx.value(m, &key, text())?),
                "env" => raw.env = ctx.value(m, &key, EnvMap)?,
                "env_file" => raw.env_file = ctx.value(m, &key, EnvFiles(ctx))?,
                "interpreter" => raw.interpreter = Some(ctx.value(m, &key, text())?),
                "interpreter_args" => {
                    raw.interpreter_args = Some((key.name.clone(), ctx.value(m, &key, Words)?))
                }
                "autorestart" => raw.autorestart = Some(ctx.value(m, &key, Bool)?),
                "restart" => {
                    raw.restart = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::restart,
                            expecting: "a restart policy",
                        },
                    )?)
                }
                "max_restarts" => {
                    raw.max_restarts = Some(u32_of(ctx.value(
                        m,
                        &key,
                        Amount::count(0, u32::MAX.into()),
                    )?))
                }
                "min_uptime" => raw.min_uptime_ms = Some(ctx.value(m, &key, millis)?),
                "restart_delay" => raw.restart_delay_ms = Some(ctx.value(m, &key, millis)?),
                "exp_backoff_restart_delay" => {
                    raw.exp_backoff_ms = Some(ctx.value(m, &key, millis)?)
                }
                "kill_timeout" => raw.kill_timeout_ms = Some(ctx.value(m, &key, millis)?),
                "stop_signal" => {
                    raw.stop_signal = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::signal,
                            expecting: "a signal name",
                        },
                    )?)
                }
                "max_memory_restart" => {
                    // A limit below what any process needs would restart forever.
                    raw.max_memory_bytes =
                        Some(ctx.value(m, &key, Amount::bytes(1 << 20, u64::MAX))?)
                }
                "cron_restart" => {
                    raw.cron_restart = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::cron,
                            expecting: "a cron expression",
                        },
                    )?)
                }
                "time" => raw.log_timestamps = Some(ctx.value(m, &key, Bool)?),
                "log_max_size" => {
                    raw.log_max_bytes = Some(ctx.value(
                        m,
                        &key,
                        Amount::bytes(oxidepm_proto::MIN_LOG_ROTATE_BYTES, u64::MAX),
                    )?)
                }
                "log_target" => {
                    raw.log_target = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: oxidepm_proto::LogTarget::parse,
                            expecting: "\"files\", \"journald\" or \"both\"",
                        },
                    )?)
                }
                "log_files_kept" => {
                    raw.log_keep = Some(u32_of(ctx.value(
                        m,
                        &key,
                        Amount::count(0, oxidepm_proto::MAX_LOG_KEEP.into()),
                    )?))
                }
                "tags" => {
                    raw.tags = ctx.value(
                        m,
                        &key,
                        List {
                            check: fields::tag,
                            expecting: "a list of tags",
                        },
                    )?
                }
                "namespace" => {
                    raw.namespace = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::tag,
                            expecting: "a namespace",
                        },
                    )?)
                }
                "user" => {
                    raw.user = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::user,
                            expecting: "a user name",
                        },
                    )?)
                }
                "kind" => {
                    raw.kind = Some(ctx.value(
                        m,
                        &key,
                        Str {
                            check: fields::kind,
                            expecting: "an app kind",
                        },
                    )?)
                }
                "protected" => raw.protected = Some(ctx.value(m, &key, Bool)?),
                "autostart" => raw.autostart = Some(ctx.value(m, &key, Bool)?),
                "health" => raw.health = Some(ctx.value(m, &key, Health(ctx))?),
                "depends_on" => raw.depends_on = ctx.value(m, &key, DependsOn)?,
                "instances" => ctx.instances.set(ctx.value(m, &key, Instances)?),
                "exec_mode" => ctx.value(
                    m,
                    &key,
                    Str {
                        check: exec_mode,
                        expecting: "\"fork\"",
                    },
                )?,
                "watch" => ctx.value(
                    m,
                    &key,
                    OnlyBool {
                        allowed: false,
                        refusal:
                            "watch is not supported; run `oxidepm restart` after changing files",
                    },
                )?,
                "shutdown_with_message" => ctx.value(
                    m,
                    &key,
                    OnlyBool {
                        allowed: false,
                        refusal: "shutdown_with_message is not supported: apps are stopped with a \
                              signal (see stop_signal)",
                    },
                )?,
                "port" => raw.port = Some(ctx.value(m, &key, Scalar)?),
                DISABLE_LOGS => {
                    if ctx.value(m, &key, Bool)? {
                        paths.push((key.slot, key.name.clone(), String::new()));
                    }
                }
                OUT_FILE | ERROR_FILE | LOG_FILE | PID_FILE => {
                    let path = ctx.value(m, &key, text())?;
                    paths.push((key.slot, key.name.clone(), path));
                }
                ENV_SECTION => {
                    let section = key.name["env_".len()..].to_string();
                    if ctx.env.as_deref() == Some(section.as_str()) {
                        raw.env_section = ctx.value(m, &key, EnvMap)?;
                    } else {
                        ctx.value(m, &key, PhantomData::<IgnoredAny>)?;
                    }
                    ctx.extras.borrow_mut().env_sections.insert(section);
                }
                _ => {
                    debug_assert!(key.slot == IGNORED);
                    ctx.value(m, &key, PhantomData::<IgnoredAny>)?;
                }
            }
            seen.insert(key.slot, key.name);
        }
        let own_max_size = raw.log_max_bytes.is_some();
        let own_retain = raw.log_keep.is_some();
        let app = resolve(raw, ctx.base, &ctx.names.borrow()).map_err(de::Error::custom)?;
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

/// A count already checked to be in range.
pub(super) fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
