//! Reading a config file (an app file, an env file, a supervisord include, a
//! systemd unit or `EnvironmentFile=`) in bounded time and memory: a FIFO
//! or a device (`EnvironmentFile=/dev/zero`, a unit that is a link to one)
//! is refused instead of waited on or read forever, and so is a file past
//! [`MAX_CONFIG_BYTES`].

use super::AppFileError;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest config file read; real ones are a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The regular file at `path`, opened for reading (with its metadata),
/// or why not: a FIFO, socket or device is refused without waiting.
pub fn regular_file(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), AppFileError> {
    // Non-blocking, so that opening a FIFO with no writer does not wait.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| AppFileError::new(path, format!("cannot read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| AppFileError::new(path, format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(AppFileError::new(
            path,
            "is not a regular file (a FIFO, socket or device); give the path of a file",
        ));
    }
    Ok((file, meta))
}

/// The text of the regular file at `path`, at most [`MAX_CONFIG_BYTES`].
pub fn config_text(path: &Path) -> Result<String, AppFileError> {
    let (file, meta) = regular_file(path)?;
    let too_big = || {
        AppFileError::new(
            path,
            format!(
                "is larger than {} MiB, more than any config file needs; check the path",
                MAX_CONFIG_BYTES >> 20
            ),
        )
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    // Bounded again: the file may grow while it is read.
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| AppFileError::new(path, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        AppFileError::new(
            path,
            format!(
                "is not UTF-8 text (invalid byte at offset {}); save it as UTF-8",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::appfile::{load_with, read_env_file, LoadOptions};

    #[test]
    fn a_fifo_a_device_or_a_huge_file_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("web.service");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let huge = dir.path().join("huge.conf");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        for p in [&fifo, &zero, &huge] {
            let e = load_with(p, &LoadOptions::default()).unwrap_err();
            let m = e.to_string();
            assert!(
                m.contains("not a regular file") || m.contains("larger than"),
                "{m}"
            );
        }
        // A systemd unit's EnvironmentFile= and an app file's env_file.
        let unit = dir.path().join("api.service");
        std::fs::write(
            &unit,
            "[Service]\nExecStart=/bin/sleep 1\nEnvironmentFile=/dev/zero\n",
        )
        .unwrap();
        assert!(load_with(&unit, &LoadOptions::default()).is_err());
        assert!(read_env_file(&fifo).is_err());
        assert!(read_env_file(Path::new("/dev/zero")).is_err());
        let text = dir.path().join("ok.env");
        std::fs::write(&text, "A=1\n").unwrap();
        assert_eq!(config_text(&text).unwrap(), "A=1\n");
    }
}
