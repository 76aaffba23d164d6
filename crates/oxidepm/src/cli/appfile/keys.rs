//! What every reader of an app file's tables shares: the parse's context,
//! kept so that an error can name the app and field, and the reader of a
//! table's keys (a fixed set of fields, with a hint for a misspelt one).

use super::fields::{self, ENV_SECTION, IGNORED};
use super::pm2::FileExtras;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
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

/// A count already checked to be in range.
pub(super) fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
