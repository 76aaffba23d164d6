//! Files the daemon writes for the lanes' processes (redis.conf, the ACL
//! file, the proxy's and the bridge's configurations): written whole to a
//! temporary file and renamed over the old one, so that a process reading
//! it at any moment reads one version.

use std::path::Path;

/// Writes `data` to `path` in one step (a rename).
pub(super) fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Writes a configuration file of a lanes process.
pub(super) fn write_json(path: &Path, conf: &impl serde::Serialize) -> std::io::Result<()> {
    write_atomic(path, &serde_json::to_vec(conf)?)
}
