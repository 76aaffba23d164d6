//! The kernel's listening TCP sockets, asked through netlink sock_diag.
//!
//! `/proc/net/tcp` is the other way to know them, but each read of it walks
//! the kernel's whole table of TCP connections (a millisecond and more on a
//! host with much memory, however few sockets there are). A dump asked for
//! the listening state only walks the table of listeners.

use std::io;

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const TCP_LISTEN: u32 = 10;
/// The request: inet_diag_req_v2 (family, protocol, ext, pad, states, id).
const REQ: usize = 56;
/// An answer's fixed part: inet_diag_msg, up to and with its inode.
const MSG: usize = 72;
/// At most this many answer bytes are read, whatever the kernel has: a
/// host with more listeners than this holds is told in part, not without
/// bound (each listener is about 80 bytes).
const MAX_BYTES: usize = 8 << 20;

/// One listening TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    /// The socket's inode, as `/proc/<pid>/fd` links name it (`socket:[N]`).
    pub inode: u64,
    /// The local port.
    pub port: u16,
    /// The user that created the socket.
    pub uid: u32,
}

/// Every listening TCP socket (IPv4 and IPv6) of this network namespace.
pub fn listening_tcp() -> io::Result<Vec<Listener>> {
    let mut out = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        dump(family as u8, &mut out)?;
    }
    Ok(out)
}

fn request(family: u8) -> Vec<u8> {
    let mut msg = Vec::with_capacity(NLMSG_HDR + REQ);
    msg.extend_from_slice(&((NLMSG_HDR + REQ) as u32).to_ne_bytes());
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    msg.push(family);
    msg.push(libc::IPPROTO_TCP as u8);
    msg.push(0); // no extensions
    msg.push(0);
    msg.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    msg.resize(NLMSG_HDR + REQ, 0); // any socket id
    msg
}

fn dump(family: u8, out: &mut Vec<Listener>) -> io::Result<()> {
    use rustix::net::{self, netlink, AddressFamily, RecvFlags, SendFlags, SocketFlags};
    let fd = net::socket_with(
        AddressFamily::NETLINK,
        net::SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    net::send(&fd, &request(family), SendFlags::empty())?;
    let mut buf = vec![0u8; 32 << 10];
    let mut read = 0usize;
    loop {
        let (n, _) = net::recv(&fd, &mut buf[..], RecvFlags::empty())?;
        read += n;
        if n == 0 || parse(&buf[..n], out)? || read > MAX_BYTES {
            return Ok(());
        }
    }
}

/// Adds the listeners of one datagram; true once the dump is done.
fn parse(mut b: &[u8], out: &mut Vec<Listener>) -> io::Result<bool> {
    let u16_at = |b: &[u8], o: usize| b.get(o..o + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    };
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0).unwrap_or(0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Ok(true);
        }
        let msg = &b[..len];
        match u16_at(msg, 4) {
            Some(NLMSG_DONE) => return Ok(true),
            Some(NLMSG_ERROR) => {
                let code = u32_at(msg, NLMSG_HDR).map_or(0, |c| c as i32);
                return match code {
                    0 => Ok(true),
                    c => Err(io::Error::from_raw_os_error(-c)),
                };
            }
            Some(SOCK_DIAG_BY_FAMILY) if msg.len() >= NLMSG_HDR + MSG => {
                let m = &msg[NLMSG_HDR..];
                // The port is in network byte order, the rest in the host's.
                out.push(Listener {
                    port: u16::from_be_bytes([m[4], m[5]]),
                    uid: u32_at(m, 64).unwrap_or(u32::MAX),
                    inode: u64::from(u32_at(m, 68).unwrap_or(0)),
                });
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        b = b.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_listener_of_this_process_is_found_with_its_port_and_inode() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        let found = listening_tcp().unwrap();
        let me = found.iter().find(|s| s.inode == inode).expect("listed");
        assert_eq!(me.port, port);
        assert_eq!(me.uid, rustix::process::getuid().as_raw());
        drop(l);
        assert!(!listening_tcp().unwrap().iter().any(|s| s.inode == inode));
    }

    #[test]
    fn a_connection_is_not_a_listener_and_ipv6_is_asked_too() {
        let l = TcpListener::bind("[::1]:0");
        let Ok(l) = l else { return }; // no IPv6 on this host
        let port = l.local_addr().unwrap().port();
        let _c = std::net::TcpStream::connect(("::1", port)).unwrap();
        let found = listening_tcp().unwrap();
        assert_eq!(found.iter().filter(|s| s.port == port).count(), 1);
    }

    #[test]
    fn a_truncated_or_garbled_answer_ends_without_panicking() {
        let mut out = Vec::new();
        for bytes in [
            &[][..],
            &[1, 2, 3],
            &[255; 15],
            &[0; 16],
            &[200, 0, 0, 0, 20, 0],
        ] {
            let _ = parse(bytes, &mut out);
        }
        let mut msg = vec![0u8; NLMSG_HDR + 10];
        msg[..4].copy_from_slice(&((NLMSG_HDR + 10) as u32).to_ne_bytes());
        msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        assert!(!parse(&msg, &mut out).unwrap());
        assert!(out.is_empty());
    }
}
