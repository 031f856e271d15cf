//! Network namespaces: which one a thread is in, bringing its loopback up,
//! and opening a listening socket inside the namespace of another process
//! (the worker's end of a call's proxy).
//!
//! Guarantees: a namespace is named by its `(st_dev, st_ino)`, the identity
//! `setns(2)` documents, never by a path alone; [`listen_in_netns_of`]
//! changes the namespace of one short-lived thread of its own, never of a
//! thread of the caller's or a runtime's, and that thread ends before it
//! returns.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sched::CloneFlags;

/// A network namespace's identity: `(st_dev, st_ino)` of its nsfs file.
pub type NetnsId = (u64, u64);

/// The network namespace of the calling thread.
pub fn current_netns() -> io::Result<NetnsId> {
    let meta = nix::sys::stat::stat("/proc/thread-self/ns/net")?;
    Ok((meta.st_dev, meta.st_ino))
}

/// Sets `IFF_UP` on the loopback interface of the calling thread's network
/// namespace (a new namespace has `lo` down, so not even `127.0.0.1`
/// works until then). Needs `CAP_NET_ADMIN` over the namespace.
pub fn loopback_up() -> io::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let sock: OwnedFd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: an all-zero ifreq is a valid value (a C struct of integers,
    // arrays and a union of them); the name is written below within its
    // IFNAMSIZ bytes and stays NUL-terminated.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags member of
    // `req`, a live local of the size the kernel expects.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS just wrote `ifru_flags`, so that member is the
    // one that holds a value.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the name and flags of `req`, a live local.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `work` in the network namespace of the process `pid` (an unreaped
/// child of the caller, so the pid is still that process), on a thread of
/// its own that enters the namespace and ends with `work`. The namespace
/// must not be the caller's own (checked, so nothing meant for a call's
/// namespace is ever done to the host's).
pub fn in_netns_of<T: Send + 'static>(
    pid: libc::pid_t,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let ns: OwnedFd = std::fs::File::open(format!("/proc/{pid}/ns/net"))?.into();
    let target = {
        let meta = nix::sys::stat::fstat(ns.as_raw_fd())?;
        (meta.st_dev, meta.st_ino)
    };
    if target == current_netns()? {
        return Err(io::Error::other(
            "the launcher is in the worker's own network namespace",
        ));
    }
    let thread = std::thread::Builder::new()
        .name("tono-netns".into())
        .spawn(move || -> io::Result<T> {
            nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)?;
            work()
        })?;
    thread
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// A listening TCP socket on `addr` inside the network namespace of the
/// process `pid` ([`in_netns_of`]), with the namespace's loopback brought
/// up first. The socket stays in the namespace it was made in, wherever it
/// is used from.
pub fn listen_in_netns_of(pid: libc::pid_t, addr: SocketAddr) -> io::Result<TcpListener> {
    in_netns_of(pid, move || {
        loopback_up()?;
        // std's bind: CLOEXEC, SO_REUSEADDR, then listen.
        TcpListener::bind(addr)
    })
}
