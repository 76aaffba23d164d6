//! The writer's command line: what the daemon passes, and reads back from
//! `/proc/<pid>/cmdline` to find its writers again after a restart.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

/// The first argument of every writer, whichever program runs it: it marks
/// the process as a log writer in `/proc/<pid>/cmdline`.
pub const MARKER: &str = "__logshim";

/// Why the writer's arguments were refused (they come from the daemon, so
/// this means a daemon and writer of different versions, or a hand-run
/// writer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgsError {
    /// A value that does not parse.
    BadValue {
        /// The option.
        arg: OsString,
        /// Its value.
        value: OsString,
    },
    /// An option at the end, without its value.
    NoValue {
        /// The option.
        arg: OsString,
    },
    /// An option the writer does not know.
    Unknown {
        /// The argument.
        arg: OsString,
    },
    /// A required option is absent (or, for a path, empty).
    Missing {
        /// The option.
        option: &'static str,
    },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::BadValue { arg, value } => {
                write!(f, "log writer: bad {arg:?} value {value:?}")
            }
            ArgsError::NoValue { arg } => write!(f, "log writer: {arg:?} needs a value"),
            ArgsError::Unknown { arg } => write!(f, "log writer: unknown argument {arg:?}"),
            ArgsError::Missing { option } => write!(f, "log writer: {option} is required"),
        }
    }
}

impl std::error::Error for ArgsError {}

/// What one writer writes.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterConfig {
    /// Where the app's stdout goes.
    pub out_path: PathBuf,
    /// Where the app's stderr goes.
    pub err_path: PathBuf,
    /// Prefix each line with the UTC time it was read, to the millisecond.
    pub timestamps: bool,
    /// Rotate before a file would grow past this; 0 means never rotate.
    pub max_bytes: u64,
    /// Rotated files kept (`<path>.1` … `<path>.<keep>`).
    pub keep: u32,
    /// Also send each line to the journal, when set.
    pub journal: Option<JournalTarget>,
    /// Write the log files (false only with a journal: `log_target = "journald"`).
    pub files: bool,
}

/// Where and under what name an app's lines go to the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalTarget {
    /// `SYSLOG_IDENTIFIER` and `OXIDEPM_APP` of each entry: the app's name.
    pub identifier: String,
    /// The journal's socket (the writer starts with an empty environment,
    /// so the daemon passes it).
    pub socket: PathBuf,
}

impl WriterConfig {
    /// Arguments after the marker that `from_args` reads back.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--out".into(),
            self.out_path.clone().into_os_string(),
            "--err".into(),
            self.err_path.clone().into_os_string(),
            "--max-bytes".into(),
            self.max_bytes.to_string().into(),
            "--keep".into(),
            self.keep.to_string().into(),
        ];
        if self.timestamps {
            args.push("--timestamps".into());
        }
        if let Some(j) = &self.journal {
            args.push("--journal".into());
            args.push(j.identifier.clone().into());
            args.push("--journal-socket".into());
            args.push(j.socket.clone().into_os_string());
        }
        if !self.files {
            args.push("--no-files".into());
        }
        args
    }

    /// Parses what `to_args` produced.
    pub fn from_args(args: &[OsString]) -> Result<WriterConfig, ArgsError> {
        fn parse<T: std::str::FromStr>(arg: &OsStr, v: &OsStr) -> Result<T, ArgsError> {
            v.to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ArgsError::BadValue {
                    arg: arg.to_owned(),
                    value: v.to_owned(),
                })
        }
        let (mut out, mut err, mut max_bytes, mut keep) = (None, None, None, None);
        let (mut timestamps, mut files) = (false, true);
        let (mut ident, mut socket) = (None, None);
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "--timestamps" {
                timestamps = true;
                continue;
            }
            if arg == "--no-files" {
                files = false;
                continue;
            }
            let v = it
                .next()
                .ok_or_else(|| ArgsError::NoValue { arg: arg.clone() })?;
            match arg.to_str() {
                Some("--out") => out = Some(PathBuf::from(v)),
                Some("--err") => err = Some(PathBuf::from(v)),
                Some("--max-bytes") => max_bytes = Some(parse(arg, v)?),
                Some("--keep") => keep = Some(parse(arg, v)?),
                Some("--journal") => {
                    ident =
                        Some(
                            v.to_str()
                                .map(str::to_owned)
                                .ok_or_else(|| ArgsError::BadValue {
                                    arg: arg.clone(),
                                    value: v.clone(),
                                })?,
                        )
                }
                Some("--journal-socket") => socket = Some(PathBuf::from(v)),
                _ => return Err(ArgsError::Unknown { arg: arg.clone() }),
            }
        }
        let path = |p: Option<PathBuf>, option: &'static str| match p {
            Some(p) if !p.as_os_str().is_empty() => Ok(p),
            _ => Err(ArgsError::Missing { option }),
        };
        let journal = match (ident, socket) {
            (Some(identifier), socket) => Some(JournalTarget {
                identifier,
                socket: socket.unwrap_or_else(|| PathBuf::from(crate::journal::DEFAULT_SOCKET)),
            }),
            (None, Some(_)) => {
                return Err(ArgsError::Missing {
                    option: "--journal",
                })
            }
            (None, None) => None,
        };
        if !files && journal.is_none() {
            // Output with nowhere to go would be lost: refused.
            return Err(ArgsError::Missing {
                option: "--journal",
            });
        }
        Ok(WriterConfig {
            journal,
            files,
            out_path: path(out, "--out")?,
            err_path: path(err, "--err")?,
            timestamps,
            max_bytes: max_bytes.ok_or(ArgsError::Missing {
                option: "--max-bytes",
            })?,
            keep: keep.ok_or(ArgsError::Missing { option: "--keep" })?,
        })
    }
}
