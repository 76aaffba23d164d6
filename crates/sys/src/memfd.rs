//! A payload too large for one datagram, handed over as a sealed memory
//! file: how systemd-journald takes entries bigger than its socket's
//! datagram limit (the native protocol's "memfd" path).

use std::io::{self, IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
use rustix::net::{
    sendmsg_addr, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
};

/// Writes `data` into a new memory file, seals it against any change
/// (journald refuses an unsealed one: the sender could rewrite it while it
/// is read), and sends only its descriptor to the socket at `path`.
pub fn send_sealed(socket: &UnixDatagram, path: &Path, data: &[u8]) -> io::Result<()> {
    let fd = memfd_create(
        "oxidepm-journal",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(data)?;
    fcntl_add_seals(
        &file,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    let fds = [file.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "no room for the descriptor in the control buffer",
        ));
    }
    let no_data: [IoSlice<'_>; 0] = [];
    sendmsg_addr(socket, &addr, &no_data, &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Whether a send failed because the datagram exceeds the socket's limit
/// (the cue to send it as a memory file instead).
pub fn too_large(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::MSGSIZE.raw_os_error())
}

/// Receives one datagram from `socket` as journald does: its bytes, or,
/// when it carries a descriptor and no bytes, the whole file behind it.
pub fn recv_payload(socket: &UnixDatagram) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    // A datagram can hold at most this much on Linux (the socket limits are below it).
    let mut buf = vec![0u8; 256 * 1024];
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let got = rustix::net::recvmsg(
        socket,
        &mut iov,
        &mut control,
        rustix::net::RecvFlags::CMSG_CLOEXEC,
    )?;
    let n = got.bytes;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(it) = msg {
            fds.extend(it);
        }
    }
    match fds.pop() {
        Some(fd) if n == 0 => {
            let mut f = std::fs::File::from(fd);
            let mut data = Vec::new();
            std::io::Seek::rewind(&mut f)?;
            f.read_to_end(&mut data)?;
            Ok(data)
        }
        _ => {
            buf.truncate(n);
            Ok(buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};
    use std::os::fd::OwnedFd;

    #[test]
    fn the_receiver_gets_a_sealed_file_with_the_payload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        let payload = vec![b'x'; 300_000];
        send_sealed(&tx, &path, &payload).unwrap();

        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let mut buf = [0u8; 16];
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let got =
            rustix::net::recvmsg(&rx, &mut iov, &mut control, rustix::net::RecvFlags::empty())
                .unwrap();
        assert_eq!(got.bytes, 0);
        let mut fds: Vec<OwnedFd> = Vec::new();
        for msg in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(it) = msg {
                fds.extend(it);
            }
        }
        assert_eq!(fds.len(), 1);
        let seals = rustix::fs::fcntl_get_seals(&fds[0]).unwrap();
        assert!(seals.contains(SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW));
        let mut f = std::fs::File::from(fds.pop().unwrap());
        f.rewind().unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, payload);
    }
}
