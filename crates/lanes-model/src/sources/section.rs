//! What every source's section of the bridge's file has: the source's
//! name, how the section goes with the file's `sources`, and its check;
//! and [`SectionError`], the one error a section's check gives, which
//! names the source and boxes the cause (so that the file's error knows no
//! source in particular).

use std::error::Error;
use std::fmt;

/// A source's section of the bridge's file.
pub trait Section {
    /// The source's name: its key in the file and its name in `sources`.
    const SOURCE: &'static str;
    /// How the section goes with the source being in `sources`.
    const PRESENCE: Presence;
    /// Why the section's values cannot be used.
    type Error: Error + Send + Sync + 'static;

    /// Checks the values against each other and against the sources
    /// served (`sources`).
    fn check(&self, sources: &[String]) -> Result<(), Self::Error>;
}

/// How a section goes with its source being in `sources`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Each needs the other; a missing section needs at least `needs`.
    Required {
        /// The key a section cannot do without.
        needs: &'static str,
    },
    /// Both or neither, said in one sentence.
    Together,
    /// A section is used when it is there; not checked against `sources`.
    Free,
}

/// A section missing, or there for a source not served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    /// The source is served without its section.
    #[error("{name} is a source but there is no {name} section (it needs at least {needs})")]
    NoSection {
        /// The source.
        name: &'static str,
        /// The key a section cannot do without.
        needs: &'static str,
    },
    /// A section for a source not served.
    #[error("there is a {name} section but {name} is not in sources")]
    NotSource {
        /// The source.
        name: &'static str,
    },
    /// One without the other, where both go together.
    #[error("{name} is a source exactly when there is a {name} section: add or remove both")]
    Together {
        /// The source.
        name: &'static str,
    },
}

/// Why a source's section cannot be used: the source and the cause. It
/// reads as the cause alone (each cause names its keys already).
#[derive(Debug)]
pub struct SectionError {
    /// The source.
    pub source_name: &'static str,
    /// Why.
    pub cause: Box<dyn Error + Send + Sync>,
}

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cause.fmt(f)
    }
}

impl Error for SectionError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause.source()
    }
}

/// Checks `section` of source `S` against `sources`: that it is there
/// when it must be, and its values.
pub fn check<S: Section>(section: Option<&S>, sources: &[String]) -> Result<(), SectionError> {
    let fail = |cause: Box<dyn Error + Send + Sync>| SectionError {
        source_name: S::SOURCE,
        cause,
    };
    let served = sources.iter().any(|s| s == S::SOURCE);
    let name = S::SOURCE;
    let missing = match (S::PRESENCE, section.is_some(), served) {
        (Presence::Required { needs }, false, true) => {
            Some(PresenceError::NoSection { name, needs })
        }
        (Presence::Required { .. }, true, false) => Some(PresenceError::NotSource { name }),
        (Presence::Together, true, false) | (Presence::Together, false, true) => {
            Some(PresenceError::Together { name })
        }
        _ => None,
    };
    if let Some(e) = missing {
        return Err(fail(Box::new(e)));
    }
    match section {
        // A Free section is checked wherever it is; the others only with
        // their source (they are refused without it above).
        Some(s) if served || S::PRESENCE == Presence::Free => {
            s.check(sources).map_err(|e| fail(Box::new(e)))
        }
        _ => Ok(()),
    }
}
