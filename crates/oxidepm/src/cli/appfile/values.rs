//! Value readers shared by the three formats.
//!
//! Each check runs inside the visitor of its value, so that the format's
//! parser attaches the value's own line and column to the error.

use super::text::{check_env_key, parse_duration_ms, parse_size, split_words};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// A second, in milliseconds.
pub(super) const SECOND_MS: u64 = 1000;
/// A day, in milliseconds.
pub(super) const DAY_MS: u64 = 24 * 3600 * SECOND_MS;
/// Longest delay or timeout an app may ask for; beyond it a value is a typo.
pub(super) const WEEK_MS: u64 = 7 * DAY_MS;

/// A string, checked and converted by a function.
pub(super) struct Str<F> {
    pub check: F,
    pub expecting: &'static str,
}

/// A plain function checking a string.
pub(super) type Check<T> = fn(&str) -> Result<T, String>;

/// A `Str` that keeps any non-empty string.
pub(super) fn text() -> Str<Check<String>> {
    Str {
        check: non_empty,
        expecting: "a string",
    }
}

impl<'de, T, F: FnOnce(&str) -> Result<T, String>> DeserializeSeed<'de> for Str<F> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, T, F: FnOnce(&str) -> Result<T, String>> Visitor<'de> for Str<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.check)(v).map_err(E::custom)
    }
}

/// Keeps a string that is neither empty nor holds a NUL byte (which no
/// program argument, path or variable can carry).
pub(super) fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("must not be empty".into());
    }
    no_nul(s)
}

fn no_nul(s: &str) -> Result<String, String> {
    if s.contains('\0') {
        return Err(format!("{s:?} contains a NUL character"));
    }
    Ok(s.to_string())
}

/// What an [`Amount`] counts.
#[derive(Clone, Copy)]
pub(super) enum Unit {
    /// Milliseconds; a string takes units ("5s").
    Millis,
    /// Bytes; a string takes units ("200M").
    Bytes,
    /// A plain count; a string must be its digits.
    Count,
}

/// A number within `min..=max`, from a number or (for durations and sizes) a
/// string with a unit.
#[derive(Clone, Copy)]
pub(super) struct Amount {
    pub unit: Unit,
    pub min: u64,
    pub max: u64,
}

impl Amount {
    /// A duration in milliseconds within `min..=max`.
    pub fn millis(min: u64, max: u64) -> Amount {
        Amount {
            unit: Unit::Millis,
            min,
            max,
        }
    }
    /// A size in bytes within `min..=max`.
    pub fn bytes(min: u64, max: u64) -> Amount {
        Amount {
            unit: Unit::Bytes,
            min,
            max,
        }
    }
    /// A count within `min..=max`.
    pub fn count(min: u64, max: u64) -> Amount {
        Amount {
            unit: Unit::Count,
            min,
            max,
        }
    }

    fn show(self, n: u64) -> String {
        match self.unit {
            Unit::Millis => show_millis(n),
            Unit::Bytes => show_bytes(n),
            Unit::Count => n.to_string(),
        }
    }

    fn in_range<E: de::Error>(self, n: u64) -> Result<u64, E> {
        if n < self.min {
            return Err(E::custom(format!(
                "{} is too small; the minimum is {}",
                self.show(n),
                self.show(self.min)
            )));
        }
        if n > self.max {
            return Err(E::custom(format!(
                "{} is too large; the maximum is {}",
                self.show(n),
                self.show(self.max)
            )));
        }
        Ok(n)
    }
}

impl<'de> DeserializeSeed<'de> for Amount {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Amount {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self.unit {
            Unit::Millis => "a duration: a number of milliseconds or a string like \"5s\"",
            Unit::Bytes => "a size: a number of bytes or a string like \"200M\"",
            Unit::Count => "a whole number",
        })
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        self.in_range(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.in_range(v),
            Err(_) => Err(E::custom(format!("{v} is negative"))),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        if v.fract() != 0.0 || !v.is_finite() {
            return Err(E::invalid_value(de::Unexpected::Float(v), &self));
        }
        if v < 0.0 {
            return Err(E::custom(format!("{v} is negative")));
        }
        self.in_range(v as u64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        let n = match self.unit {
            Unit::Millis => parse_duration_ms(v),
            Unit::Bytes => parse_size(v),
            // pm2 reads a number given as a string ("10") as the number.
            Unit::Count => match v.trim().parse::<u64>() {
                Ok(n) => Ok(n),
                Err(_) => return Err(E::invalid_type(de::Unexpected::Str(v), &self)),
            },
        };
        self.in_range(n.map_err(E::custom)?)
    }
}

fn show_millis(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

fn show_bytes(b: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if b >> shift > 0 && b.trailing_zeros() >= shift {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b} bytes")
}

/// A scalar (string, number or boolean) read as a string, as pm2 does for
/// `env` values and `args` items.
pub(super) struct Scalar;

impl<'de> DeserializeSeed<'de> for Scalar {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scalar {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, a number or a boolean")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        no_nul(v).map_err(E::custom)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// Program arguments: a list, or a string split like a shell would.
pub(super) struct Words;

impl<'de> DeserializeSeed<'de> for Words {
    type Value = Vec<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Words {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of arguments or a string of them")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
        no_nul(v).map_err(E::custom)?;
        split_words(v).map_err(E::custom)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut words = Vec::new();
        while let Some(word) = seq.next_element_seed(Scalar)? {
            words.push(word);
        }
        Ok(words)
    }
}

/// A list of strings, each checked by a function.
pub(super) struct List<F> {
    pub check: F,
    pub expecting: &'static str,
}

impl<'de, T, F: Fn(&str) -> Result<T, String>> DeserializeSeed<'de> for List<F> {
    type Value = Vec<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T, F: Fn(&str) -> Result<T, String>> Visitor<'de> for List<F> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Str {
            check: &self.check,
            expecting: "a string",
        })? {
            items.push(item);
        }
        Ok(items)
    }
}

/// One string or a list of them.
pub(super) struct OneOrMany;

impl<'de> DeserializeSeed<'de> for OneOrMany {
    type Value = Vec<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OneOrMany {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a path or a list of paths")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
        Ok(vec![non_empty(v).map_err(E::custom)?])
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<String>, A::Error> {
        List {
            check: non_empty,
            expecting: "a path",
        }
        .visit_seq(seq)
    }
}

/// pm2's `watch`: `true` (the cwd), `false`, a path, or a list of paths;
/// `None` when it does not watch.
pub(super) struct Watch;

impl<'de> DeserializeSeed<'de> for Watch {
    type Value = Option<Vec<String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Watch {
    type Value = Option<Vec<String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("true, false, a path or a list of paths")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.then(Vec::new))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        OneOrMany.visit_str(v).map(Some)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        OneOrMany.visit_seq(seq).map(Some)
    }
}

/// The `env` table: variable names to scalar values.
pub(super) struct EnvMap;

impl<'de> DeserializeSeed<'de> for EnvMap {
    type Value = BTreeMap<String, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvMap {
    type Value = BTreeMap<String, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a table of variable names to values")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut env = BTreeMap::new();
        while let Some(key) = map.next_key_seed(Str {
            check: |k: &str| check_env_key(k).map(|()| k.to_string()),
            expecting: "a variable name",
        })? {
            let value = map.next_value_seed(Scalar)?;
            env.insert(key, value);
        }
        Ok(env)
    }
}

/// A boolean for which only `allowed` is accepted; `refusal` explains why.
pub(super) struct OnlyBool {
    pub allowed: bool,
    pub refusal: &'static str,
}

impl<'de> DeserializeSeed<'de> for OnlyBool {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OnlyBool {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.allowed)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if v == self.allowed {
            Ok(())
        } else {
            Err(E::custom(self.refusal))
        }
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(self.refusal))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.refusal))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.refusal))
    }
}

const CLUSTER: &str = "pm2's cluster mode is not supported: oxidepm runs separate processes; \
     give instances a number N (apps <name>-0 … <name>-N-1, each told its number in \
     OXIDEPM_INSTANCE) with a port per instance or SO_REUSEPORT";

/// pm2's `instances`: a number of separate processes, 1 to
/// [`oxidepm_proto::MAX_INSTANCES`] (pm2's "max", 0 and -1 mean one per CPU
/// in cluster mode, which is refused).
pub(super) struct Instances;

impl<'de> DeserializeSeed<'de> for Instances {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Instances {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a number from 1 to {}", oxidepm_proto::MAX_INSTANCES)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        let max = oxidepm_proto::MAX_INSTANCES;
        match u32::try_from(v) {
            // pm2 reads 0 as "one per CPU".
            Ok(0) => Err(E::custom(CLUSTER)),
            Ok(n) if n <= max => Ok(n),
            _ => Err(E::custom(format!(
                "instances = {v} is too many; at most {max}"
            ))),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        self.visit_u64(u64::try_from(v).unwrap_or(0))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u32, E> {
        if v.fract() == 0.0 && v >= 0.0 {
            self.visit_u64(v as u64)
        } else {
            Err(E::custom(format!("instances = {v} is not a whole number")))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        // pm2 accepts "max" and numeric strings from the command line.
        match v.trim().parse::<i64>() {
            Ok(n) => self.visit_i64(n),
            Err(_) => Err(E::custom(CLUSTER)),
        }
    }
}

/// pm2's `-i N` on the command line, read as `instances` in a file is.
pub fn instances_arg(v: &str) -> Result<u32, String> {
    let d = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(v);
    Instances.deserialize(d).map_err(|e| e.to_string())
}

/// pm2's `exec_mode`: only fork mode (separate processes).
pub(super) fn exec_mode(s: &str) -> Result<(), String> {
    match s {
        "fork" | "fork_mode" => Ok(()),
        "cluster" | "cluster_mode" => Err(format!("exec_mode {s:?}: {CLUSTER}")),
        _ => Err(format!(
            "unknown exec_mode {s:?}; only \"fork\" is supported"
        )),
    }
}

/// A boolean, read with a message that names the expected values.
pub(super) struct Bool;

impl<'de> DeserializeSeed<'de> for Bool {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_bool(self)
    }
}

impl<'de> Visitor<'de> for Bool {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("true or false")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }
}
