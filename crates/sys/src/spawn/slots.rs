//! The low descriptors a child's own are moved to before it is cloned,
//! so that it can keep only the low part of the daemon's table (see
//! [`super::spawn`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Groups of four low descriptors (stdin, stdout and stderr sources, and
/// the error pipe), placeholders on /dev/null, that a spawn moves its
/// child's descriptors to; one group per spawn under way.
pub(super) struct Pool {
    null: OwnedFd,
    free: std::sync::Mutex<Vec<[OwnedFd; 4]>>,
    /// One more than the highest slot: the child keeps what is below.
    pub(super) below: RawFd,
}

/// Groups in the pool: more than the spawns ever under way at once (a
/// spawn finding none copies the whole table, as before).
const GROUPS: usize = 12;

/// The pool, made at the first spawn, while the daemon holds few
/// descriptors; `None` if it could not be made.
pub(super) static POOL: std::sync::OnceLock<Option<Pool>> = std::sync::OnceLock::new();

/// A group taken from the pool, for one spawn.
pub(super) struct LowSlots {
    pub(super) pool: &'static Pool,
    fds: Option<[OwnedFd; 4]>,
}

impl LowSlots {
    pub(super) fn take() -> Option<LowSlots> {
        let pool = POOL.get_or_init(make_pool).as_ref()?;
        let fds = pool.free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        Some(LowSlots {
            pool,
            fds: Some(fds),
        })
    }

    /// Copies `sources` onto the slots (close-on-exec); their numbers.
    pub(super) fn place(&self, sources: [BorrowedFd; 4]) -> io::Result<[RawFd; 4]> {
        let slots = self.fds.as_ref().expect("taken with its slots");
        let mut raw = [0; 4];
        for ((src, slot), r) in sources.iter().zip(slots).zip(&mut raw) {
            // SAFETY: `slot` is ours; dup3 replaces what it names (a
            // placeholder) with `src`, atomically.
            let mut target = unsafe { OwnedFd::from_raw_fd(slot.as_raw_fd()) };
            let placed = rustix::io::dup3(src, &mut target, rustix::io::DupFlags::CLOEXEC);
            std::mem::forget(target);
            placed?;
            *r = slot.as_raw_fd();
        }
        Ok(raw)
    }

    /// Puts the placeholders back on the slots and the group back in the
    /// pool (a group that cannot be restored is dropped from it).
    pub(super) fn give_back(mut self) {
        let Some(slots) = self.fds.take() else { return };
        let mut ok = true;
        for slot in &slots {
            // SAFETY: as in `place`.
            let mut target = unsafe { OwnedFd::from_raw_fd(slot.as_raw_fd()) };
            ok &= rustix::io::dup3(&self.pool.null, &mut target, rustix::io::DupFlags::CLOEXEC)
                .is_ok();
            std::mem::forget(target);
        }
        if ok {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slots);
        }
    }
}

pub(super) fn make_pool() -> Option<Pool> {
    let null: OwnedFd = std::fs::File::open("/dev/null").ok()?.into();
    let mut groups = Vec::with_capacity(GROUPS);
    let mut below = 0;
    for _ in 0..GROUPS {
        let mut g = Vec::with_capacity(4);
        for _ in 0..4 {
            let fd = rustix::io::fcntl_dupfd_cloexec(&null, 3).ok()?;
            below = below.max(fd.as_raw_fd() + 1);
            g.push(fd);
        }
        groups.push(g.try_into().ok()?);
    }
    Some(Pool {
        null,
        free: std::sync::Mutex::new(groups),
        below,
    })
}
