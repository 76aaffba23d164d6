//! Examples shown at the end of `--help`, for the commands people type
//! most.

/// `oxidepm --help`.
pub const MAIN: &str = "\
Examples:
  oxidepm start --name web -- node server.js    run a command as an app
  oxidepm start apps.toml                       the apps of a file (.toml, .yaml, .json, ...)
  oxidepm status                                every app
  oxidepm logs web -f                           follow an app's log
  oxidepm completions bash > /etc/bash_completion.d/oxidepm
  oxidepm man > /usr/local/share/man/man1/oxidepm.1

Exit status: 0 done, 1 refused or failed, 2 wrong arguments, 3 no daemon is
running (read commands never start one) or an app is not running (status APP),
4 no such app (status APP). Set NO_COLOR or pass --no-color for no colour.";

/// `oxidepm start --help`.
pub const START: &str = "\
Examples:
  oxidepm start --name web -- node server.js --port 8080
  oxidepm start --name api --env PORT=3000 --restart on-failure -- ./api
  oxidepm start apps.toml                 every app of the file, or none
  oxidepm start web                       an app defined before
  oxidepm start @backend                  every app tagged backend";

/// `oxidepm stop --help`.
pub const STOP: &str = "\
Examples:
  oxidepm stop web
  oxidepm stop all
  oxidepm stop apps.toml                  the apps the file defines

A target that is an existing app file (by its extension) is read as that
file, as pm2 does; to name an app called like a file here, use its id.";

/// `oxidepm restart --help`.
pub const RESTART: &str = "\
Examples:
  oxidepm restart web
  oxidepm restart @backend
  oxidepm restart apps.toml               the apps the file defines";

/// `oxidepm status --help`.
pub const STATUS: &str = "\
Examples:
  oxidepm status
  oxidepm status web && echo running      0 running, 3 not running, 4 unknown
  oxidepm status --json | jq '.[].name'";

/// `oxidepm show --help`.
pub const SHOW: &str = "\
Examples:
  oxidepm show web
  oxidepm show web -n 50                  with its last 50 log lines";

/// `oxidepm logs --help`.
pub const LOGS: &str = "\
Examples:
  oxidepm logs                            every app, merged by time
  oxidepm logs web -n 100
  oxidepm logs web --since 10m
  oxidepm logs --since 2026-11-30T10:00:00Z --until 2026-11-30T11:00:00Z
  oxidepm logs web --json                 one object a line, the time in `at`
  oxidepm logs web --grep timeout -C 2    the newest 15 lines saying timeout, 2 around each
  oxidepm logs --grep 'status=5[0-9]+' --regex -n 100 --since 1d

--since and --until read the stamps the log writer puts before each line
(log_timestamps, on by default); a line without one goes with the stamped
line before it, and a log with no stamps at all has no line in a window.";

/// `oxidepm audit --help`.
pub const AUDIT: &str = "\
Examples:
  oxidepm audit --since 1h
  oxidepm audit --actor ai --since 1h     every AI actor, any label
  oxidepm audit --actor human:alice --app web";
