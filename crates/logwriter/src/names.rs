//! The names of a log's files: the log, its rotated copies, its drop count.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;

/// `<name>.<i>`, the name of the i-th most recent rotated file.
pub fn rotated_name(name: &OsStr, i: u32) -> OsString {
    let mut s = name.to_os_string();
    s.push(format!(".{i}"));
    s
}

/// `<name>.dropped`: the bytes a log lost to failed writes, in total (one
/// decimal number and a newline).
pub fn dropped_name(name: &OsStr) -> OsString {
    let mut s = name.to_os_string();
    s.push(".dropped");
    s
}

/// A log's directory and its name in it.
pub fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            Ok((dir, name))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file in a directory", path.display()),
        )),
    }
}
