//! Every raw syscall of the crate that needs `unsafe`, each wrapped once.
//!
//! Nothing outside this file says `unsafe`. Each block states why it is
//! sound. Ids cross this boundary as [`nix::unistd::Uid`]/[`nix::unistd::Gid`]
//! newtypes; errors as [`nix::errno::Errno`] / [`std::io::Error`].

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;

use nix::errno::Errno;

/// The fd on which the launcher reads its plan.
pub const PLAN_FD: RawFd = 3;
/// The fd on which the launcher reports its status (CLOEXEC in the launcher).
pub const STATUS_FD: RawFd = 4;

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

/// Arranges for the child of `cmd` to find `plan` at [`PLAN_FD`] and
/// `status` at [`STATUS_FD`], without the CLOEXEC flag, and nothing else
/// new. Both must be at fds above [`STATUS_FD`] so that the first `dup2`
/// cannot clobber the second source.
pub fn map_launch_fds(cmd: &mut Command, plan: &OwnedFd, status: &OwnedFd) {
    use std::os::unix::process::CommandExt;
    let (plan, status) = (plan.as_raw_fd(), status.as_raw_fd());
    assert!(
        plan > STATUS_FD && status > STATUS_FD,
        "launch fds must be above {STATUS_FD}"
    );
    // SAFETY: the closure runs in the child between fork and exec. It calls
    // only dup2, which is async-signal-safe, allocates nothing and takes no
    // lock; it captures two integers by value. The parent keeps `plan` and
    // `status` open until `spawn` returns, so the sources are valid fds.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(plan, PLAN_FD) < 0 || libc::dup2(status, STATUS_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new fd or -1; it
    // does not touch our memory.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us, and nothing else owns
    // it; `OwnedFd` will close it exactly once.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// `pidfd_send_signal(2)`: signals the process behind `pidfd`, which cannot
/// be a reused pid.
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: the syscall takes a valid fd we own, a signal number, a null
    // siginfo (allowed) and flags 0; it does not touch our memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A CLOEXEC pipe whose two ends are both at fds above [`STATUS_FD`], so
/// that [`map_launch_fds`] can place them without clobbering.
pub fn pipe_above_status() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((dup_above(&r)?, dup_above(&w)?))
}

fn dup_above(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let raw = nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(STATUS_FD + 1),
    )?;
    // SAFETY: F_DUPFD_CLOEXEC just returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Registers a pidfd with the tokio reactor, to await the process's exit.
pub fn watch_pidfd(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open fd, it is moved into the AsyncFd
    // and so stays open and refers to the same pidfd for the AsyncFd's whole
    // lifetime, and its `as_raw_fd` always returns that same number.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| e.into_parts().1)
}

/// Opens the single name `name` in the folder `dir` without following any
/// symlink: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the
/// kernel has it (5.6+), else `openat` with `O_NOFOLLOW` (equivalent for one
/// component). `O_CLOEXEC` is always added.
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
        Err(Errno::ENOSYS) => nix::fcntl::openat(Some(dir.as_raw_fd()), name, flags, mode)?,
        other => other?,
    };
    // SAFETY: the kernel just returned this fd to us and nothing else owns
    // it; `OwnedFd` closes it exactly once.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
