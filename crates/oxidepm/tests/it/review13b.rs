//! Attacks on `start` like pm2 and the read commands, second review: each
//! test is what a user or another account does, and checks what changed.

use crate::harness::{bin, test_user, Env};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the CLI as `uid`/`gid` with home `home`.
fn as_user(uid: u32, gid: u32, home: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
        ])
        .arg(bin("oxidepm"))
        .args(args)
        .env("OXIDEPM_HOME", home)
        .env_remove("OXIDEPM_SOCKET")
        .env_remove("OXIDEPM_ACTOR")
        .output()
        .unwrap()
}

/// Ends the daemon another user started in `home`, however the test ends.
struct TheirDaemon {
    uid: u32,
    gid: u32,
    home: PathBuf,
}

impl Drop for TheirDaemon {
    fn drop(&mut self) {
        let _ = as_user(self.uid, self.gid, &self.home, &["kill"]);
    }
}

/// Root points OXIDEPM_HOME at a home another account owns, where that
/// account runs a daemon: the daemon's owner would receive root's apps
/// (their environment included) and could answer root's reads with
/// anything. The CLI talks to a daemon of its own uid or root's only.
#[test]
fn root_does_not_talk_to_another_users_daemon() {
    let Some((uid, gid)) = test_user("oxpm-r2-other") else {
        eprintln!("skipped: needs root to create a second user");
        return;
    };
    let env = Env::new();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let home = env.path("theirs");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    let _guard = TheirDaemon {
        uid,
        gid,
        home: home.clone(),
    };
    let o = as_user(
        uid,
        gid,
        &home,
        &["start", "--name", "theirs", "--", "sleep", "100000"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let file = env.path("mine.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"mine\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\
         env = { SECRET = \"root-s3cret\" }\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    for args in [
        vec!["start", file.to_str().unwrap()],
        vec!["status"],
        vec!["logs", "theirs", "--lines", "5"],
    ] {
        let o = env
            .cmd()
            .env("OXIDEPM_HOME", &home)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "root's {args:?} was answered by uid {uid}"
        );
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("theirs"),
            "root's {args:?} printed the other daemon's answer"
        );
    }
    // Their daemon never received root's app.
    let o = as_user(uid, gid, &home, &["status", "--json"]);
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        listed.contains("theirs") && !listed.contains("mine"),
        "{listed}"
    );
}
