//! The process's limit on open descriptors (RLIMIT_NOFILE).
//!
//! A daemon that holds a pidfd per adopted app and a few descriptors per
//! app it starts runs out at the usual soft limit of 1024 long before the
//! hard limit, which the kernel lets any process raise its soft limit to.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use std::io;

/// The soft and hard limits on open descriptors (`None`: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit in force.
    pub soft: Option<u64>,
    /// What the soft limit may be raised to without privileges.
    pub hard: Option<u64>,
}

/// The current limits.
pub fn get() -> FdLimit {
    let r = getrlimit(Resource::Nofile);
    FdLimit {
        soft: r.current,
        hard: r.maximum,
    }
}

/// Raises the soft limit to the hard one; returns the limits now in force.
pub fn raise_to_hard() -> io::Result<FdLimit> {
    let r = getrlimit(Resource::Nofile);
    if r.current != r.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: r.maximum,
                maximum: r.maximum,
            },
        )?;
    }
    Ok(get())
}

/// Sets the soft limit to `soft` (at most the hard limit); for tests and
/// the benchmark, which imitate a host with a low limit.
pub fn set_soft(soft: u64) -> io::Result<()> {
    let r = getrlimit(Resource::Nofile);
    let soft = r.maximum.map_or(soft, |h| soft.min(h));
    Ok(setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: r.maximum,
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_to_the_hard_limit() {
        let before = get();
        let now = raise_to_hard().unwrap();
        assert_eq!(now.soft, before.hard);
        assert_eq!(now.hard, before.hard);
    }
}
