//! Starting the launcher: `posix_spawn` with the fd layout `tono-launch`
//! expects (stdio on 0–2, its plan on [`PLAN_FD`], its status pipe on
//! [`STATUS_FD`]), every signal at its default, and nothing else inherited.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The fd on which the launcher reads its plan.
pub const PLAN_FD: RawFd = 3;
/// The fd on which the launcher reports its status (CLOEXEC in the launcher).
pub const STATUS_FD: RawFd = 4;

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
