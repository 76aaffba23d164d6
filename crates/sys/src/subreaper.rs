//! Child subreaper: orphans in this process's subtree are re-parented to it
//! instead of to init, so it can still wait for them.

/// Makes this process the reaper of orphans in its subtree.
pub fn become_subreaper() -> std::io::Result<()> {
    Ok(nix::sys::prctl::set_child_subreaper(true)?)
}
