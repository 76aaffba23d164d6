//! A request whose change could not be written to state.db. The change is
//! made (memory is the truth, and the store writes it again until it
//! lands), but the caller is told with `E_STORAGE`: a daemon restart before
//! the retry lands would forget it. `ping` and `status` carry the
//! degraded-state warning for as long as anything is owed.

use super::errors::OpError;
use super::Daemon;
use crate::supervise::lock;
use oxidepm_proto::{Reply, Response};

impl Daemon {
    /// Before an operation: state.db checked and caught up, and the count
    /// of failed writes so far.
    pub(super) fn storage_before(&self) -> u64 {
        let mut s = lock(&self.sup);
        s.tend_store();
        s.store.write_failures()
    }

    /// After an operation that may change state: `E_STORAGE` when a write
    /// failed since `before` and is still not on disk.
    pub(super) fn storage_after(
        &self,
        op: &'static str,
        answer: Result<Reply, OpError>,
        before: u64,
    ) -> Result<Reply, OpError> {
        let mut s = lock(&self.sup);
        let caught_up = s.tend_store();
        if caught_up || s.store.write_failures() == before {
            return answer;
        }
        let state = s.store.warning().unwrap_or_default();
        match answer {
            // The operation's own error says more.
            Err(e) => Err(e),
            Ok(_) => Err(OpError::Unsaved { op, state }),
        }
    }

    /// The degraded-state warning, if any, on the final line of `resp`.
    pub(super) fn with_warning(&self, mut resp: Response) -> Response {
        resp.warning = lock(&self.sup).store.warning();
        resp
    }

    /// The degraded-state warning, if any.
    pub(super) fn degraded(&self) -> Option<String> {
        lock(&self.sup).store.warning()
    }
}
