//! Every raw syscall of the crate that needs `unsafe`, each wrapped once.
//!
//! Nothing outside this file says `unsafe`. Each block states why it is
//! sound. Ids cross this boundary as [`nix::unistd::Uid`]/[`nix::unistd::Gid`]
//! newtypes; errors as [`nix::errno::Errno`] / [`std::io::Error`].

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

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

/// Where one of the launcher's standard streams comes from.
#[derive(Debug, Clone, Copy)]
pub enum StdioFrom<'a> {
    /// This fd of the worker's (above [`STATUS_FD`]).
    Fd(BorrowedFd<'a>),
    /// The worker's own stream of the same number.
    Inherit,
}

/// Owns a `posix_spawn_file_actions_t` and destroys it once.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: an all-zero value is a valid place for init to write to;
        // init fully initialises it before any other use.
        let mut fa = FileActions(unsafe { std::mem::zeroed() });
        // SAFETY: `fa.0` is a live, writable file-actions object.
        spawn_result(unsafe { libc::posix_spawn_file_actions_init(&mut fa.0) })?;
        Ok(fa)
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: `self.0` was initialised by `new`; the call only records
        // two integers in it.
        spawn_result(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }

    fn chdir(&mut self, dir: &CStr) -> io::Result<()> {
        // SAFETY: `self.0` was initialised by `new`; glibc copies the
        // NUL-terminated path, which is valid for the call.
        spawn_result(unsafe {
            libc::posix_spawn_file_actions_addchdir_np(&mut self.0, dir.as_ptr())
        })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised by `new` and destroyed only here, once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// Owns a `posix_spawnattr_t` and destroys it once.
struct SpawnAttr(libc::posix_spawnattr_t);

impl SpawnAttr {
    /// Every signal at its default disposition and none blocked in the
    /// child: the worker ignores SIGPIPE and tokio blocks or handles others,
    /// and an ignored disposition or a mask would survive `execve`.
    fn default_signals() -> io::Result<Self> {
        // SAFETY: as for `FileActions::new`.
        let mut attr = SpawnAttr(unsafe { std::mem::zeroed() });
        // SAFETY: `attr.0` is a live, writable attribute object.
        spawn_result(unsafe { libc::posix_spawnattr_init(&mut attr.0) })?;
        // SAFETY: both sets are local values written fully by the
        // sigemptyset/sigfillset calls before they are read; the setters copy
        // them into the initialised `attr.0`.
        unsafe {
            let (mut all, mut none): (libc::sigset_t, libc::sigset_t) =
                (std::mem::zeroed(), std::mem::zeroed());
            libc::sigfillset(&mut all);
            libc::sigemptyset(&mut none);
            spawn_result(libc::posix_spawnattr_setsigdefault(&mut attr.0, &all))?;
            spawn_result(libc::posix_spawnattr_setsigmask(&mut attr.0, &none))?;
            let flags = libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK;
            spawn_result(libc::posix_spawnattr_setflags(
                &mut attr.0,
                flags as libc::c_short,
            ))?;
        }
        Ok(attr)
    }
}

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialised by `default_signals` and destroyed only here.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// posix_spawn's functions return an error number instead of setting errno.
fn spawn_result(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Starts the launcher at `path` with `posix_spawn` — glibc's is
/// `clone(CLONE_VM | CLONE_VFORK)`, so none of the worker's memory is copied
/// (a `fork` of a 20 MB worker costs milliseconds here) and no code of ours
/// runs in the child. The child gets argv `[path]`, an empty environment,
/// cwd `/`, default signals, `stdio` on fds 0–2, `plan` at [`PLAN_FD`] and
/// `status` at [`STATUS_FD`] (dup2 clears their CLOEXEC), and nothing else:
/// every other worker fd is CLOEXEC. Every source fd must be above
/// [`STATUS_FD`], so that no dup2 clobbers a later source. Returns the pid;
/// the caller must reap it.
pub fn spawn_launcher(
    path: &CStr,
    stdio: [StdioFrom<'_>; 3],
    plan: BorrowedFd<'_>,
    status: BorrowedFd<'_>,
) -> io::Result<libc::pid_t> {
    let mut actions = FileActions::new()?;
    for (target, from) in (0..).zip(stdio) {
        if let StdioFrom::Fd(fd) = from {
            actions.dup2(above_status(fd.as_raw_fd())?, target)?;
        }
    }
    actions.dup2(above_status(plan.as_raw_fd())?, PLAN_FD)?;
    actions.dup2(above_status(status.as_raw_fd())?, STATUS_FD)?;
    actions.chdir(c"/")?;
    let attr = SpawnAttr::default_signals()?;
    let argv = [path.as_ptr().cast_mut(), std::ptr::null_mut()];
    let envp = [std::ptr::null_mut::<libc::c_char>()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: `path`, `argv` and `envp` are NUL-terminated and outlive the
    // call; `actions` and `attr` are initialised; posix_spawn writes only
    // `pid`. The child runs no code of ours: glibc applies the actions and
    // execs, or exits 127.
    spawn_result(unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    })?;
    Ok(pid)
}

fn above_status(fd: RawFd) -> io::Result<RawFd> {
    if fd > STATUS_FD {
        Ok(fd)
    } else {
        Err(io::Error::other(format!(
            "launch fd {fd} is not above {STATUS_FD}"
        )))
    }
}

/// `waitpid(pid, flags)`, retried on EINTR: `Some` status when `pid` was
/// reaped, `None` when `WNOHANG` found it still running.
fn wait_pid(pid: libc::pid_t, flags: libc::c_int) -> io::Result<Option<std::process::ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid writes only `status`, a live local.
        let rc = unsafe { libc::waitpid(pid, &mut status, flags) };
        match rc {
            0 => return Ok(None),
            rc if rc == pid => return Ok(Some(std::process::ExitStatus::from_raw(status))),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Reaps `pid` if it has exited (`waitpid` with `WNOHANG`): `Some` status
/// when it had, `None` while it runs. The caller must own `pid` as an
/// unreaped child.
pub fn try_reap(pid: libc::pid_t) -> io::Result<Option<std::process::ExitStatus>> {
    wait_pid(pid, libc::WNOHANG)
}

/// Reaps `pid` (`waitpid`, retried on EINTR) and returns its exit status.
/// The caller must own `pid` as an unreaped child.
pub fn reap(pid: libc::pid_t) -> io::Result<std::process::ExitStatus> {
    wait_pid(pid, 0)?.ok_or_else(|| io::Error::other("waitpid without WNOHANG returned 0"))
}

/// Puts every signal back to its default disposition before `execve`
/// (which keeps an ignored disposition). Two are ignored on the way here:
/// the Rust runtime ignores SIGPIPE at start-up (a tool would get EPIPE
/// errors where a pipeline expects it to die quietly), and glibc's
/// `posix_spawn` ignores its internal signals 32 and 33 in the child. glibc's
/// own `sigaction` refuses those two, so this is the raw syscall.
pub fn default_all_signals() -> Result<(), Errno> {
    // The kernel's `struct sigaction` with every field zero is SIG_DFL, no
    // flags, no restorer and an empty mask, whatever the field order.
    let default = [0u64; 4];
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction reads 32 bytes at `default` (a live local
        // array of that size), writes nothing (null old action), and the
        // mask size is the kernel's 8 bytes. No handler is installed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
        Errno::result(rc)?;
    }
    Ok(())
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
/// that [`spawn_launcher`] can place them without clobbering.
pub fn pipe_above_status() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((dup_above(&r)?, dup_above(&w)?))
}

/// A CLOEXEC duplicate of `fd` at an fd above [`STATUS_FD`].
pub fn dup_above(fd: &OwnedFd) -> io::Result<OwnedFd> {
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
