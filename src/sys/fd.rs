//! File descriptors: closing every inherited one, taking ownership of one
//! the worker placed, and opening one name beneath a folder fd without
//! following any symlink.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// Closes every fd from `first` up, with `close_range(2)`.
pub fn close_fds_from(first: u32) -> Result<(), Errno> {
    // SAFETY: close_range only closes descriptors; it takes plain integers
    // and touches no memory of ours. No Rust object owns an fd >= `first` in
    // the launcher at the point it is called (only stdio, the plan fd, which
    // is already closed, and the status fd, which is below `first`).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    Errno::result(rc).map(drop)
}

/// Takes ownership of an inherited fd, if it is open.
pub fn take_inherited_fd(fd: RawFd) -> Option<File> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).ok()?;
    // SAFETY: F_GETFD just proved `fd` is open, and nothing else in this
    // process owns it: it was placed by the worker at exec and no Rust object
    // was created for it before this call, which happens once per fd.
    Some(unsafe { File::from_raw_fd(fd) })
}

/// Opens the single name `name` in the folder `dir` without following any
/// symlink: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the
/// kernel has it (5.6+), else `openat` with `O_NOFOLLOW` (equivalent for one
/// component only: a path of several components is refused with `ENOSYS`
/// there, never walked through links). `O_CLOEXEC` is always added.
pub fn open_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    flags: nix::fcntl::OFlag,
    mode: nix::sys::stat::Mode,
) -> io::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let how = OpenHow::new()
        .flags(flags)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let raw = match nix::fcntl::openat2(dir.as_raw_fd(), name, how) {
        Err(Errno::ENOSYS) if !name.to_bytes().contains(&b'/') => {
            nix::fcntl::openat(Some(dir.as_raw_fd()), name, flags, mode)?
        }
        other => other?,
    };
    // SAFETY: the kernel just returned this fd to us and nothing else owns
    // it; `OwnedFd` closes it exactly once.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// What `poll` reports on `fd` now, without waiting: its `revents` for
/// `events` (0 when nothing is ready, or on an error of poll itself).
pub(super) fn poll_now(fd: RawFd, events: libc::c_short) -> libc::c_short {
    let mut poll = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: poll reads and writes one pollfd, a live local, and does not
    // wait (timeout 0).
    let rc = unsafe { libc::poll(&mut poll, 1, 0) };
    if rc > 0 {
        poll.revents
    } else {
        0
    }
}

/// Whether nobody holds the read end of the pipe whose write end is `fd`
/// any more (`poll` reports `POLLERR` on such a write end at once).
pub fn reader_gone(fd: RawFd) -> bool {
    poll_now(fd, libc::POLLOUT) & libc::POLLERR != 0
}

/// Whether reading `fd` would block now (nothing to read, no end of file).
pub fn nothing_to_read(fd: RawFd) -> bool {
    poll_now(fd, libc::POLLIN) == 0
}
