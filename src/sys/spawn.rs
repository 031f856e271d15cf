//! Starting a program without copying the caller's memory: the launcher
//! from the worker (with the fd layout `tono-launch` expects: stdio on 0–2,
//! its plan on [`PLAN_FD`], its status pipe on [`STATUS_FD`]), and a tool
//! from the launcher. Both go through one `clone_exec`:
//! `clone(CLONE_VM | CLONE_VFORK)` — the way glibc's `posix_spawn` works —
//! optionally with `CLONE_NEWPID`, which `posix_spawn` cannot ask for: a
//! launcher for the private view starts as the init of a PID namespace of
//! its own, with no fork of its own (it makes its mount namespace itself).
//! A launcher can also be started inside a cgroup v2 folder (`clone3` with
//! `CLONE_INTO_CGROUP`, on x86_64): it never runs an instruction outside
//! the call's cgroup, and no `cgroup.procs` write puts it there. Such a
//! write takes the kernel's global `cgroup_threadgroup_rwsem` for writing,
//! which after an idle spell waits for an RCU grace period (5–16 ms
//! measured); a clone into the cgroup takes only its read side. Where the
//! kernel or a seccomp filter refuses `clone3` (`ENOSYS`, `EPERM`), the
//! launcher starts with `clone` and the caller is told to move it.
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

/// `struct clone_args` of `<linux/sched.h>`, up to `cgroup` (version 2,
/// 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7): the child starts in the cgroup v2
/// folder whose fd is `clone_args.cgroup`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// What the child of [`clone_exec`] reads: its plan and where it reports
/// the errno of the step that failed.
struct ChildCall<'a> {
    plan: &'a ChildPlan<'a>,
    failed: &'a AtomicI32,
}

/// The child's entry on its own stack after `clone3`: runs the plan and
/// never returns.
#[cfg(target_arch = "x86_64")]
extern "C" fn clone3_child(call: *const ChildCall<'_>) -> ! {
    // SAFETY: `call` points into the frame of the parent's thread, which
    // CLONE_VFORK keeps suspended (and the frame alive) until this child
    // has called execve or _exit.
    let call = unsafe { &*call };
    call.failed.store(child_steps(call.plan), Ordering::SeqCst);
    // SAFETY: _exit ends the child at once; it runs no atexit handler and
    // flushes no buffer shared with the parent.
    unsafe { libc::_exit(127) }
}

/// `clone3(args)` whose child runs `clone3_child(call)` on the stack the
/// args name. Returns the pid, or the negated errno.
///
/// # Safety
/// `args` must ask for CLONE_VM | CLONE_VFORK with a stack that nothing
/// else uses, and `call` must stay valid until the child has exec'd or
/// exited (CLONE_VFORK holds this thread until then).
#[cfg(target_arch = "x86_64")]
unsafe fn raw_clone3(args: &CloneArgs, call: &ChildCall<'_>) -> i64 {
    let ret: i64;
    let entry: extern "C" fn(*const ChildCall<'_>) -> ! = clone3_child;
    // SAFETY: the `syscall` instruction clobbers only rax, rcx and r11,
    // declared here. In the parent (rax != 0) the block ends at `2:`. In
    // the child (rax == 0) the kernel has set rsp to the top of the given
    // stack, 16-byte aligned by the caller; r12 and r13 survive the
    // syscall, so the child calls `clone3_child(call)` there, which never
    // returns (`ud2` would trap if it did) — the child never runs the code
    // after this block on the parent's stack.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") call as *const ChildCall<'_>,
            in("r13") entry as usize,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

/// Starts `plan` in a child that shares this process's memory until it
/// execs, in the new namespaces `namespaces` (none, or `CLONE_NEWPID`
/// and/or `CLONE_NEWNET`), and in the cgroup v2 folder open at
/// `into_cgroup` where the kernel can (`clone3`); the `bool` says whether
/// it did. The outer error is the clone's own (no child); the inner one the
/// errno of the child's step that failed (the child is reaped).
/// `Ok((Ok(pid), _))`: the caller must reap `pid`.
fn clone_exec(
    plan: &ChildPlan<'_>,
    namespaces: CloneFlags,
    into_cgroup: Option<RawFd>,
) -> io::Result<(io::Result<libc::pid_t>, bool)> {
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    let failed = AtomicI32::new(0);
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )?;
    let mut in_cgroup = false;
    let mut child: Option<nix::Result<nix::unistd::Pid>> = None;
    #[cfg(target_arch = "x86_64")]
    if let Some(cgroup) = into_cgroup {
        let base = stack.as_mut_ptr() as usize;
        let top = (base + stack.len()) & !15;
        let args = CloneArgs {
            flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64
                | namespaces.bits() as u64
                | CLONE_INTO_CGROUP,
            exit_signal: libc::SIGCHLD as u64,
            stack: base as u64,
            stack_size: (top - base) as u64,
            cgroup: cgroup as u64,
            ..CloneArgs::default()
        };
        let call = ChildCall {
            plan,
            failed: &failed,
        };
        // SAFETY: the args ask for CLONE_VM | CLONE_VFORK on `stack`, which
        // only the child uses and which (with `call`, `plan` and `failed`)
        // lives in this frame until clone3 returns here after the child's
        // execve or _exit. Every signal is blocked in this thread, so none
        // is handled in the child before `child_steps` puts them back to
        // their defaults; the child runs only `child_steps` (syscalls, no
        // allocation or lock).
        let ret = unsafe { raw_clone3(&args, &call) };
        match ret {
            pid if pid > 0 => {
                in_cgroup = true;
                child = Some(Ok(nix::unistd::Pid::from_raw(pid as libc::pid_t)));
            }
            // Not this kernel, or a filter's refusal: the plain clone.
            e if e == -i64::from(libc::ENOSYS) || e == -i64::from(libc::EPERM) => {}
            e => child = Some(Err(nix::errno::Errno::from_raw(-e as i32))),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = into_cgroup;
    let child = match child {
        Some(child) => child,
        None => {
            let failed = &failed;
            let steps: nix::sched::CloneCb<'_> = Box::new(move || {
                failed.store(child_steps(plan), Ordering::SeqCst);
                // SAFETY: _exit ends the child at once; it runs no atexit
                // handler and flushes no buffer shared with the parent.
                unsafe { libc::_exit(127) }
            });
            // SAFETY: with CLONE_VM the child runs `steps` on `stack`, which
            // lives (as do `plan`, `failed` and the boxed closure) in this
            // frame until clone returns; CLONE_VFORK keeps this thread
            // suspended until the child has called execve or _exit, so
            // nothing here changes under it. The child runs only
            // `child_steps` (syscalls, no allocation or lock), with every
            // signal blocked until it has put them back to their defaults,
            // so no handler of ours runs in it.
            unsafe {
                nix::sched::clone(
                    steps,
                    &mut stack,
                    CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK | namespaces,
                    Some(libc::SIGCHLD),
                )
            }
        }
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid = child?.as_raw();
    Ok(match failed.load(Ordering::SeqCst) {
        0 => (Ok(pid), in_cgroup),
        errno => {
            let _ = super::process::reap(pid);
            (Err(io::Error::from_raw_os_error(errno)), in_cgroup)
        }
    })
}

/// A started launcher: its pid (the caller must reap it), and whether it
/// started inside the cgroup v2 folder it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnedLauncher {
    /// The launcher's pid.
    pub pid: libc::pid_t,
    /// It started in the given cgroup (`clone3` with `CLONE_INTO_CGROUP`).
    pub in_cgroup: bool,
}

/// Starts the launcher at `path`: argv `[path]` (`[path, AHEAD_OF_NEED]`
/// with `ahead_of_need`), an empty environment, cwd `/`, `stdio` on fds
/// 0–2, `plan` at [`PLAN_FD`] and `status` at [`STATUS_FD`], nothing else.
/// In `namespaces`: as the init of a new PID namespace (the private view,
/// see `launch::view`), in a new network namespace, or both. Every source fd must be above
/// [`STATUS_FD`], so that no dup2 clobbers a later source. With
/// `into_cgroup` (a cgroup v2 folder, open), it starts inside that cgroup
/// where the kernel can; [`SpawnedLauncher::in_cgroup`] says whether it
/// did.
pub fn spawn_launcher(
    path: &CStr,
    stdio: [StdioFrom<'_>; 3],
    plan: BorrowedFd<'_>,
    status: BorrowedFd<'_>,
    namespaces: NewNamespaces,
    ahead_of_need: bool,
    into_cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<SpawnedLauncher> {
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
    let (pid, in_cgroup) = clone_exec(
        &ChildPlan {
            path,
            argv: &argv,
            envp: &envp,
            dups: &dups,
            cwd: Some(c"/"),
        },
        namespaces.clone_flags(),
        into_cgroup.map(|fd| fd.as_raw_fd()),
    )?;
    Ok(SpawnedLauncher {
        pid: pid?,
        in_cgroup,
    })
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
    let (pid, _) = clone_exec(
        &ChildPlan {
            path,
            argv: &argv,
            envp: &envp,
            dups: &[(out, 1), (err, 2)],
            cwd: None,
        },
        CloneFlags::empty(),
        None,
    )?;
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
