//! Starting a program without copying the caller's memory: the launcher
//! from the worker (with the fd layout `tono-launch` expects: stdio on 0–2,
//! its plan on [`PLAN_FD`], its status pipe on [`STATUS_FD`]), and a tool
//! from the launcher. Both go through one `clone_exec`:
//! `clone(CLONE_VM | CLONE_VFORK)` — the way glibc's `posix_spawn` works —
//! optionally with `CLONE_NEWPID`, which `posix_spawn` cannot ask for: a
//! launcher for the private view starts as the init of a PID namespace of
//! its own, with no fork of its own (it makes its mount namespace itself).
//!
//! Guarantees: the caller's memory is shared, not copied (a `fork` of a
//! 20 MB worker costs milliseconds, of the launcher about 0.4 ms on a small
//! VM), and the caller's thread is suspended until the child has called
//! `execve` or exited. Between clone and exec the child runs only the
//! syscalls of `child_steps`: it allocates nothing, takes no lock, and
//! runs no signal handler of the caller (every signal is blocked in the
//! caller's thread across the clone and put back to its default in the
//! child before the mask is cleared). The child starts with every signal
//! at its default, none blocked, the given fds placed (dup2 clears their
//! CLOEXEC), and nothing else inherited but stdio: every other fd is
//! CLOEXEC. An `execve` that fails is reported with its errno, and the
//! child is reaped.

use std::ffi::{c_char, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sched::CloneFlags;
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};

/// The fd on which the launcher reads its plan.
pub const PLAN_FD: RawFd = 3;
/// The fd on which the launcher reports its status (CLOEXEC in the launcher).
pub const STATUS_FD: RawFd = 4;
/// The launcher's one argument when it is started ahead of need (pooled):
/// it may then prepare while it waits for its plan.
pub const AHEAD_OF_NEED: &CStr = c"ahead-of-need";

/// The namespaces a launcher starts in, beside the worker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NewNamespaces {
    /// A PID namespace of its own, whose init the launcher is (it makes
    /// its mount namespace itself): the private view.
    pub pid: bool,
    /// A network namespace of its own, with only `lo` (down until the
    /// launcher brings it up): a call's network other than the host's.
    pub net: bool,
}

impl NewNamespaces {
    fn clone_flags(self) -> CloneFlags {
        let mut flags = CloneFlags::empty();
        if self.pid {
            flags |= CloneFlags::CLONE_NEWPID;
        }
        if self.net {
            flags |= CloneFlags::CLONE_NEWNET;
        }
        flags
    }
}

/// The child's stack until `execve`: it runs a few syscalls in one frame.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Where one of the launcher's standard streams comes from.
#[derive(Debug, Clone, Copy)]
pub enum StdioFrom<'a> {
    /// This fd of the worker's (above [`STATUS_FD`]).
    Fd(BorrowedFd<'a>),
    /// The worker's own stream of the same number.
    Inherit,
}

/// Everything the child needs, prepared (and allocated) by the parent.
struct ChildPlan<'a> {
    path: &'a CStr,
    /// NUL-terminated pointer arrays into strings the parent keeps alive.
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    /// `(from, to)`: `dup2(from, to)`; sources never clobber a later one.
    dups: &'a [(RawFd, RawFd)],
    cwd: Option<&'a CStr>,
}

/// The NUL-terminated pointer array of `strings`.
fn pointers(strings: &[&CStr]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn last_errno() -> libc::c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The child's whole life: signals to their defaults, fds placed, the
/// working folder, an empty mask, `execve`. Returns the errno of the step
/// that failed. Only syscalls: no allocation, no lock, no panic.
fn child_steps(plan: &ChildPlan<'_>) -> libc::c_int {
    if let Err(e) = super::process::default_all_signals() {
        return e as libc::c_int;
    }
    for &(from, to) in plan.dups {
        // SAFETY: dup2 takes two integers and touches no memory of ours.
        if unsafe { libc::dup2(from, to) } < 0 {
            return last_errno();
        }
    }
    if let Some(cwd) = plan.cwd {
        // SAFETY: `cwd` is a NUL-terminated string the suspended parent
        // keeps alive.
        if unsafe { libc::chdir(cwd.as_ptr()) } < 0 {
            return last_errno();
        }
    }
    // SAFETY: an all-zero sigset_t is a valid value for sigemptyset to
    // overwrite; sigprocmask reads it and writes nothing (null old set).
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    // SAFETY: `path` is NUL-terminated and `argv`/`envp` are NUL-terminated
    // arrays of pointers to NUL-terminated strings, all owned by the
    // suspended parent and alive until this call returns or replaces us.
    unsafe { libc::execve(plan.path.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr()) };
    last_errno()
}

/// Starts `plan` in a child that shares this process's memory until it
/// execs, in the new namespaces `namespaces` (none, or `CLONE_NEWPID`
/// and/or `CLONE_NEWNET`).
/// The outer error is the clone's own (no child); the inner one the errno
/// of the child's step that failed (the child is reaped). `Ok(Ok(pid))`:
/// the caller must reap `pid`.
fn clone_exec(plan: &ChildPlan<'_>, namespaces: CloneFlags) -> io::Result<io::Result<libc::pid_t>> {
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    let failed = AtomicI32::new(0);
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )?;
    let child = {
        let failed = &failed;
        let steps: nix::sched::CloneCb<'_> = Box::new(move || {
            failed.store(child_steps(plan), Ordering::SeqCst);
            // SAFETY: _exit ends the child at once; it runs no atexit
            // handler and flushes no buffer shared with the parent.
            unsafe { libc::_exit(127) }
        });
        // SAFETY: with CLONE_VM the child runs `steps` on `stack`, which
        // lives (as do `plan`, `failed` and the boxed closure) in this frame
        // until clone returns; CLONE_VFORK keeps this thread suspended until
        // the child has called execve or _exit, so nothing here changes
        // under it. The child runs only `child_steps` (syscalls, no
        // allocation or lock), with every signal blocked until it has put
        // them back to their defaults, so no handler of ours runs in it.
        unsafe {
            nix::sched::clone(
                steps,
                &mut stack,
                CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK | namespaces,
                Some(libc::SIGCHLD),
            )
        }
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid = child?.as_raw();
    Ok(match failed.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            let _ = super::process::reap(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
    })
}

/// Starts the launcher at `path`: argv `[path]` (`[path, AHEAD_OF_NEED]`
/// with `ahead_of_need`), an empty environment, cwd `/`, `stdio` on fds
/// 0–2, `plan` at [`PLAN_FD`] and `status` at [`STATUS_FD`], nothing else.
/// In `namespaces`: as the init of a new PID namespace (the private view,
/// see `launch::view`), in a new network namespace, or both. Every source fd must be above
/// [`STATUS_FD`], so that no dup2 clobbers a later source. Returns the pid;
/// the caller must reap it.
pub fn spawn_launcher(
    path: &CStr,
    stdio: [StdioFrom<'_>; 3],
    plan: BorrowedFd<'_>,
    status: BorrowedFd<'_>,
    namespaces: NewNamespaces,
    ahead_of_need: bool,
) -> io::Result<libc::pid_t> {
    let mut dups = Vec::with_capacity(5);
    for (target, from) in (0..).zip(stdio) {
        if let StdioFrom::Fd(fd) = from {
            dups.push((above_status(fd.as_raw_fd())?, target));
        }
    }
    dups.push((above_status(plan.as_raw_fd())?, PLAN_FD));
    dups.push((above_status(status.as_raw_fd())?, STATUS_FD));
    let argv = if ahead_of_need {
        pointers(&[path, AHEAD_OF_NEED])
    } else {
        pointers(&[path])
    };
    let envp = pointers(&[]);
    clone_exec(
        &ChildPlan {
            path,
            argv: &argv,
            envp: &envp,
            dups: &dups,
            cwd: Some(c"/"),
        },
        namespaces.clone_flags(),
    )?
}

/// Starts the program `path` with `argv` and `envp`, its stdout and stderr
/// on `stdout` and `stderr` (both above 2), its stdin and working folder
/// the caller's. The outer error says no child could be made (`EAGAIN`
/// under a process limit); the inner one is the errno of a failed
/// `execve`. `Ok(Ok(pid))`: the caller must reap `pid`.
pub fn spawn_program(
    path: &CStr,
    argv: &[&CStr],
    envp: &[&CStr],
    stdout: BorrowedFd<'_>,
    stderr: BorrowedFd<'_>,
) -> io::Result<io::Result<libc::pid_t>> {
    let (out, err) = (stdout.as_raw_fd(), stderr.as_raw_fd());
    if out <= 2 || err <= 2 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let (argv, envp) = (pointers(argv), pointers(envp));
    clone_exec(
        &ChildPlan {
            path,
            argv: &argv,
            envp: &envp,
            dups: &[(out, 1), (err, 2)],
            cwd: None,
        },
        CloneFlags::empty(),
    )
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
