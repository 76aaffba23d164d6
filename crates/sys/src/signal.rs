//! Sending, ignoring and waiting for signals.

use std::io;

pub use nix::sys::signal::Signal;

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: Signal) -> io::Result<()> {
    Ok(nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        sig,
    )?)
}

/// Ignores `sig` from now on (and in children, across exec).
pub fn ignore(sig: Signal) -> io::Result<()> {
    // SAFETY: SIG_IGN installs no handler code, so nothing can run in
    // signal context.
    unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn) }?;
    Ok(())
}

/// Makes this process the leader of a new session (and process group), so
/// that signals to the group or session of the process that started it do
/// not reach it. Fails when it leads a group already.
pub fn new_session() -> io::Result<()> {
    nix::unistd::setsid()?;
    Ok(())
}

/// Sleeps until a signal arrives that runs a handler or ends the process.
pub fn pause() {
    rustix::event::pause();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        kill(child.id(), Signal::SIGKILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}
