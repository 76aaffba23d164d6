use super::slots::{make_pool, POOL};
use super::*;
use crate::cgroup;

fn run_in(dir: &Path, prog: &str, args: &[&str], id: Option<&Identity>) -> (u32, String) {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let env = [(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
    let program = Program::new(OsStr::new(prog), args, &env, None).unwrap();
    let cg = cgroup::open_dir(dir).unwrap();
    let setup = Setup {
        stdin: None,
        stdout: w.as_fd(),
        stderr: Some(w.as_fd()),
        cgroup: Some(cg.as_fd()),
        identity: id,
        oom_score_adj: Some(700),
    };
    let pid = spawn(&program, &setup)
        .unwrap()
        .expect("clone3 into a cgroup on this kernel");
    drop(w);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
    assert!(
        matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
        "{status:?}: {out}"
    );
    (pid, out)
}

#[test]
fn a_child_is_born_in_its_cgroup() {
    let Some(sc) = cgroup::tests::scratch() else {
        return;
    };
    // What the program itself reads at its start: it never ran
    // anywhere else.
    let (pid, out) = run_in(&sc.dir, "cat", &["/proc/self/cgroup"], None);
    assert_eq!(
        cgroup::parse_proc_cgroup(&out).as_deref(),
        Some(sc.rel.as_str())
    );
    // In a session of its own.
    let (_, stat) = run_in(&sc.dir, "sh", &["-c", "cat /proc/$$/stat"], None);
    let s = crate::procfs::parse_stat(&stat).unwrap();
    assert_eq!((s.session, s.pgrp), (s.pid, s.pid));
    assert_ne!(s.pid, pid);
    // With the oom_score_adj it was given (raising needs no privilege).
    let (_, adj) = run_in(&sc.dir, "cat", &["/proc/self/oom_score_adj"], None);
    assert_eq!(adj, "700\n");
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped the identity part: not root");
        return;
    }
    let nobody = Identity {
        uid: nix::unistd::Uid::from_raw(65534),
        gid: nix::unistd::Gid::from_raw(65534),
        groups: vec![nix::unistd::Gid::from_raw(65534)],
    };
    let (_, ids) = run_in(&sc.dir, "sh", &["-c", "id -u; id -g; id -G"], Some(&nobody));
    assert_eq!(ids, "65534\n65534\n65534\n");
}

#[test]
fn a_missing_program_or_cwd_is_not_found() {
    let env = [(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
    let none: &[&str] = &[];
    let err = Program::new(OsStr::new("no-such-program-oxidepm"), none, &env, None).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    // A path is used as given; its exec is what fails.
    assert!(Program::new(OsStr::new("/no/such/dir/prog"), none, &env, None).is_ok());
    let Some(sc) = cgroup::tests::scratch() else {
        return;
    };
    // The child's own failures come back through the pipe, and the
    // failed child is reaped: the cgroup empties.
    let cg = cgroup::open_dir(&sc.dir).unwrap();
    let null: OwnedFd = std::fs::File::create("/dev/null").unwrap().into();
    let setup = Setup {
        stdin: None,
        stdout: null.as_fd(),
        stderr: Some(null.as_fd()),
        cgroup: Some(cg.as_fd()),
        identity: None,
        oom_score_adj: None,
    };
    for (prog, cwd) in [
        ("/no/such/dir/prog", None),
        ("true", Some(Path::new("/no/such/cwd"))),
    ] {
        let program = Program::new(OsStr::new(prog), none, &env, cwd).unwrap();
        let err = spawn(&program, &setup).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{prog} {cwd:?}");
    }
    assert!(cgroup::procs(&sc.dir).is_empty());
    assert!(!cgroup::populated(&sc.dir));
}

#[test]
fn a_child_gets_its_three_descriptors_and_none_of_the_many_above() {
    // The slots are taken while few descriptors are open, as at the
    // first spawn of a daemon just started.
    let below = POOL.get_or_init(make_pool).as_ref().expect("a pool").below;
    let env = [(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
    let null = std::fs::File::open("/dev/null").unwrap();
    // Then descriptors this process holds without close-on-exec, many,
    // as a daemon holds its apps' pipes.
    let held: Vec<OwnedFd> = (0..200).map(|_| rustix::io::dup(&null).unwrap()).collect();
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let program = Program::new(
        OsStr::new("sh"),
        &["-c", "echo in; ls /proc/$$/fd"],
        &env,
        None,
    )
    .unwrap();
    let setup = Setup {
        stdin: None,
        stdout: w.as_fd(),
        stderr: None,
        cgroup: None,
        identity: None,
        oom_score_adj: None,
    };
    for _ in 0..2 {
        let pid = spawn(&program, &setup)
            .unwrap()
            .expect("clone3 on this kernel");
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
        assert!(
            matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
            "{status:?}"
        );
    }
    drop(w);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    // Both ran, wrote to the pipe given, and the pipe's only write end
    // left is gone (the read above saw its end).
    assert_eq!(out.matches("in\n").count(), 2, "{out}");
    let listed: Vec<i32> = out
        .lines()
        .filter(|l| *l != "in")
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(held.iter().all(|fd| fd.as_raw_fd() >= below));
    for fd in &held {
        assert!(
            !listed.contains(&fd.as_raw_fd()),
            "{} leaked: {out}",
            fd.as_raw_fd()
        );
    }
    // This process's own table is whole: every held descriptor is open.
    for fd in &held {
        assert!(rustix::io::fcntl_getfd(fd).is_ok());
    }
    assert!(rustix::io::fcntl_getfd(stdio(2)).is_ok());
}
