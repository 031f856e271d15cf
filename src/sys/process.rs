//! Processes: reaping a child, signalling through a pidfd (never a pid that
//! could have been reused), watching a pidfd from tokio, and putting every
//! signal back to its default before `execve`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

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
/// errors where a pipeline expects it to die quietly), and glibc keeps its
/// internal signals 32 and 33 to itself (its own `sigaction` refuses them,
/// so this is the raw syscall). It also takes the worker's handlers off a
/// child that still shares the worker's memory ([`super::spawn`]). Only
/// syscalls: safe between clone and exec.
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

/// Drops every capability from the bounding set (`PR_CAPBSET_DROP` for each
/// up to `/proc/sys/kernel/cap_last_cap`), so that nothing this process
/// runs can ever gain one, even through a file capability. Needs
/// `CAP_SETPCAP`: call it while still root. Dropping one already gone is
/// not an error.
pub fn drop_capability_bounding_set() -> Result<(), Errno> {
    let last: libc::c_ulong = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(63);
    for cap in 0..=last {
        // SAFETY: PR_CAPBSET_DROP takes plain integers (the capability
        // number, then three unused zeros) and touches no memory of ours.
        let rc = unsafe {
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                cap,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        match Errno::result(rc) {
            Ok(_) => {}
            // A number past the kernel's last capability.
            Err(Errno::EINVAL) if cap > 40 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether x32 syscalls may run here (`CONFIG_X86_X32_ABI` and not
/// disabled at boot): `getpid` with the x32 bit set, which is `ENOSYS`
/// where they do not. Under a seccomp filter of someone else's (a
/// container runtime's, a service manager's) there is no probe and the
/// answer is yes: such a filter may kill the prober for any x32 number
/// (libseccomp's default for an architecture it was not given is
/// `SIGSYS`), and a yes only keeps the x32 numbers in the call's filter.
/// Any answer but `ENOSYS` is a yes too.
pub fn x32_abi_enabled() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no further argument and touches no
    // memory; it returns the calling thread's seccomp mode (0: none).
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP) };
    if mode != 0 {
        return true;
    }
    // SAFETY: getpid takes no argument and touches no memory; with the x32
    // bit it is either getpid or ENOSYS.
    let rc = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
    rc >= 0 || Errno::last() != Errno::ENOSYS
}

/// `sched_setscheduler(pid, policy, 0)`; `pid` 0 is the calling thread.
fn set_scheduling(pid: libc::pid_t, policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads one sched_param at `param`, a live
    // local; the policies used here take priority 0.
    if unsafe { libc::sched_setscheduler(pid, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the calling thread, and so every process it starts from now on, at
/// `SCHED_IDLE`: it runs only on a core nothing else wants.
pub fn set_idle_scheduling() -> io::Result<()> {
    set_scheduling(0, libc::SCHED_IDLE)
}

/// Puts process `pid` (its one thread) back to the normal policy,
/// `SCHED_OTHER` at nice 0's weight; root only, as the worker is.
pub fn set_normal_scheduling(pid: libc::pid_t) -> io::Result<()> {
    set_scheduling(pid, libc::SCHED_OTHER)
}
