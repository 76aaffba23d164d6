//! The kernel's process events (netlink proc connector): fork, exec and exit,
//! each stamped by the kernel with CLOCK_MONOTONIC nanoseconds. Listening
//! needs CAP_NET_ADMIN in the initial namespaces; without it, `open` fails
//! or no event arrives, and callers do without.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_HDR: usize = 16;
const CN_MSG: usize = 20;

const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// One process event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `parent` (a process, by tgid) created `child` (`child_pid == child_tgid` for a process, not a thread).
    Fork {
        /// Kernel time, CLOCK_MONOTONIC ns.
        ts: u64,
        /// Process (tgid) that forked.
        parent: u32,
        /// New task id.
        child_pid: u32,
        /// New task's process id.
        child_tgid: u32,
    },
    /// Process `tgid` executed a new program.
    Exec {
        /// Kernel time, CLOCK_MONOTONIC ns.
        ts: u64,
        /// Process id.
        tgid: u32,
    },
    /// Task `pid` of process `tgid` exited.
    Exit {
        /// Kernel time, CLOCK_MONOTONIC ns.
        ts: u64,
        /// Task id.
        pid: u32,
        /// Process id.
        tgid: u32,
    },
}

/// A subscription to process events.
pub struct ProcEvents {
    fd: OwnedFd,
}

impl ProcEvents {
    /// Subscribes; fails without the privilege to open the socket.
    pub fn open() -> io::Result<ProcEvents> {
        use rustix::net::{self, netlink, AddressFamily, SocketFlags, SocketType};
        let fd = net::socket_with(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            Some(netlink::CONNECTOR),
        )?;
        let size = 8 << 20;
        if net::sockopt::set_socket_recv_buffer_size_force(&fd, size).is_err() {
            let _ = net::sockopt::set_socket_recv_buffer_size(&fd, size);
        }
        net::bind(&fd, &netlink::SocketAddrNetlink::new(0, CN_IDX_PROC))?;
        let mut msg = Vec::with_capacity(NLMSG_HDR + CN_MSG + 4);
        msg.extend_from_slice(&((NLMSG_HDR + CN_MSG + 4) as u32).to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        net::send(&fd, &msg, net::SendFlags::empty())?;
        Ok(ProcEvents { fd })
    }

    /// The next event, waiting at most `timeout`; None on timeout.
    pub fn next(&self, timeout: Duration) -> io::Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match crate::poll::readable(&self.fd, left) {
                Ok(false) => return Ok(None),
                Ok(true) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let (n, _) =
                rustix::net::recv(&self.fd, &mut buf[..], rustix::net::RecvFlags::empty())?;
            if let Some(ev) = parse(&buf[..n]) {
                return Ok(Some(ev));
            }
        }
    }

    /// Discards every event already queued.
    pub fn drain(&self) -> io::Result<()> {
        while self.next(Duration::ZERO)?.is_some() {}
        Ok(())
    }
}

fn parse(b: &[u8]) -> Option<Event> {
    let u32_at =
        |o: usize| -> Option<u32> { Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?)) };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?)) };
    if u32_at(NLMSG_HDR)? != CN_IDX_PROC || u32_at(NLMSG_HDR + 4)? != CN_VAL_PROC {
        return None;
    }
    let ev = NLMSG_HDR + CN_MSG;
    let what = u32_at(ev)?;
    let ts = u64_at(ev + 8)?;
    let data = ev + 16;
    Some(match what {
        PROC_EVENT_FORK => Event::Fork {
            ts,
            parent: u32_at(data + 4)?,
            child_pid: u32_at(data + 8)?,
            child_tgid: u32_at(data + 12)?,
        },
        PROC_EVENT_EXEC => Event::Exec {
            ts,
            tgid: u32_at(data + 4)?,
        },
        PROC_EVENT_EXIT => Event::Exit {
            ts,
            pid: u32_at(data)?,
            tgid: u32_at(data + 4)?,
        },
        _ => return None,
    })
}
