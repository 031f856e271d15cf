//! Starting `tono-launch`: where the binary is ([`Launcher`]) and one
//! started launcher with the worker's ends of its pipes ([`Started`]).
//!
//! Guarantees: the launcher starts through [`crate::sys::spawn_launcher`]
//! (`clone(CLONE_VM|CLONE_VFORK)`: only syscalls run in the child) with an empty
//! environment, its plan pipe on fd 3 and status pipe on fd 4, stdio from
//! the fds given, and no other fd of the worker's; a [`Started`] that will
//! get no plan is killed and reaped (`Started::end`), never left behind.
//! [`start_in_cgroup`] starts one inside a fresh call cgroup (in its v2
//! folder from the first instruction where the kernel can).
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::sync::Mutex;

use crate::contain::{self, AppliedLimits, CallCgroup, UNASSIGNED};
use crate::fs::root_path::check_root_path;
use crate::launch::report::{LaunchError, Stage};
use crate::sys;

/// Where the Debian package installs the launcher.
pub const LIBEXEC_LAUNCHER: &str = "/usr/libexec/tono-seal/tono-launch";

/// Where the launcher binary is.
#[derive(Debug, Clone)]
pub struct Launcher {
    path: PathBuf,
    /// Calls of the pooled shape may take a launcher started ahead of need.
    pub(super) pooled: bool,
}

impl Launcher {
    /// The launcher at `path`. Calls with stdin `/dev/null` and captured
    /// output take one already started ([`super::pool`], filled by [`start`]).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            pooled: true,
        }
    }

    /// The same launcher, started afresh for every call (no pool).
    pub fn without_pool(mut self) -> Self {
        self.pooled = false;
        self
    }

    /// Where a `tono-seal` under `/usr` finds its launcher first (the
    /// Debian package's layout): [`LIBEXEC_LAUNCHER`], if it is there;
    /// otherwise, and for a `tono-seal` anywhere else (a build tree), the
    /// one beside it ([`Launcher::beside_current_exe`]).
    pub fn installed() -> io::Result<Self> {
        let exe = std::env::current_exe()?;
        if exe.starts_with("/usr") && Path::new(LIBEXEC_LAUNCHER).exists() {
            return Ok(Self::at(LIBEXEC_LAUNCHER));
        }
        Self::beside_current_exe()
    }

    /// `tono-launch` in the same folder as the running program.
    pub fn beside_current_exe() -> io::Result<Self> {
        let exe = std::env::current_exe()?;
        let dir = exe
            .parent()
            .ok_or_else(|| io::Error::other("the program has no folder"))?;
        Ok(Self::at(dir.join("tono-launch")))
    }

    /// The launcher's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuses a launcher that a user could replace: the binary and every
    /// folder above it must be root's and closed to others (a sticky folder
    /// passes). Returns the canonical path that was checked, which is the
    /// one to start. Checked before the first launch from each path, then
    /// remembered for the process.
    pub fn check_installed(&self) -> Result<PathBuf, LaunchError> {
        static CHECKED: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
        let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, canonical)) = checked.iter().find(|(p, _)| *p == self.path) {
            return Ok(canonical.clone());
        }
        let canonical = check_root_path(&self.path).map_err(|why| {
            LaunchError::new(
                Stage::Spawn,
                "launcher_insecure",
                format!("refusing to start {}: {why}", self.path.display()),
            )
        })?;
        checked.push((self.path.clone(), canonical.clone()));
        Ok(canonical)
    }
}

/// A started launcher and the worker's ends of its pipes.
#[derive(Debug)]
pub struct Started {
    /// The launcher's pid, an unreaped child of the worker.
    pub pid: libc::pid_t,
    /// Where its plan is written.
    pub plan: OwnedFd,
    /// Where its status comes from.
    pub status: OwnedFd,
    /// Its stdout, when piped.
    pub stdout: Option<OwnedFd>,
    /// Its stderr, when piped.
    pub stderr: Option<OwnedFd>,
}

impl Started {
    /// Kills and reaps a launcher that will get no plan.
    pub(crate) fn end(self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = sys::reap(self.pid);
    }
}

/// Starts a launcher at `path` with stdin from `stdin` (or the worker's
/// own: only the key built-ins `seal` and `import`), and stdout/stderr
/// into fresh pipes when `piped` (to be captured or relayed), else the
/// worker's own (only the key built-in `reveal`); in `namespaces` (a PID namespace of its own, whose init it is, for a
/// call of the private view, see [`crate::launch::view`]; a network
/// namespace of its own, see [`crate::launch::network`]); with
/// `ahead_of_need` told that it may prepare while it waits (the pool).
pub fn start(
    path: &Path,
    stdin: Option<&OwnedFd>,
    piped: bool,
    namespaces: sys::NewNamespaces,
    ahead_of_need: bool,
) -> io::Result<Started> {
    start_in(path, stdin, piped, namespaces, ahead_of_need, None).map(|(s, _)| s)
}

/// [`start`] inside a fresh call cgroup with `limits` (`pids.max`, memory
/// bytes), not yet given to a user: the cgroup is made first, and the
/// launcher starts in its v2 folder where the kernel can (no
/// `cgroup.procs` write, see [`crate::sys::spawn_launcher`]); the worker
/// moves it into the rest (its unreaped child, which runs nothing before
/// its plan comes). On an error nothing is left: no launcher, no cgroup.
pub fn start_in_cgroup(
    path: &Path,
    stdin: Option<&OwnedFd>,
    piped: bool,
    namespaces: sys::NewNamespaces,
    ahead_of_need: bool,
    limits: (u64, u64),
) -> io::Result<(Started, CallCgroup, AppliedLimits)> {
    let (cgroup, applied) = CallCgroup::create(contain::mounts(), UNASSIGNED, limits.0, limits.1)?;
    let placed = cgroup.open_v2().and_then(|v2| {
        let (started, in_v2) =
            start_in(path, stdin, piped, namespaces, ahead_of_need, v2.as_ref())?;
        let pid = started.pid as u32;
        let entered = if in_v2 {
            cgroup.enter_v1(pid)
        } else {
            cgroup.enter(pid)
        };
        match entered {
            Ok(()) => Ok(started),
            Err(e) => {
                started.end();
                Err(e)
            }
        }
    });
    match placed {
        Ok(started) => Ok((started, cgroup, applied)),
        Err(e) => {
            let _ = cgroup.finish();
            Err(e)
        }
    }
}

/// [`start`], inside the cgroup v2 folder open at `into_cgroup` where the
/// kernel can; the `bool` says whether it did.
fn start_in(
    path: &Path,
    stdin: Option<&OwnedFd>,
    piped: bool,
    namespaces: sys::NewNamespaces,
    ahead_of_need: bool,
    into_cgroup: Option<&OwnedFd>,
) -> io::Result<(Started, bool)> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let (plan_r, plan_w) = sys::pipe_above_status()?;
    let (status_r, status_w) = sys::pipe_above_status()?;
    let (out, err) = if piped {
        (
            Some(sys::pipe_above_status()?),
            Some(sys::pipe_above_status()?),
        )
    } else {
        (None, None)
    };
    fn from(fd: Option<&OwnedFd>) -> sys::StdioFrom<'_> {
        fd.map_or(sys::StdioFrom::Inherit, |fd| sys::StdioFrom::Fd(fd.as_fd()))
    }
    let stdio = [
        from(stdin),
        from(out.as_ref().map(|(_, w)| w)),
        from(err.as_ref().map(|(_, w)| w)),
    ];
    let spawned = sys::spawn_launcher(
        &c_path,
        stdio,
        plan_r.as_fd(),
        status_w.as_fd(),
        namespaces,
        ahead_of_need,
        into_cgroup.map(|fd| fd.as_fd()),
    )?;
    // The child has its copies; the worker keeps only its own ends.
    Ok((
        Started {
            pid: spawned.pid,
            plan: plan_w,
            status: status_r,
            stdout: out.map(|(r, _)| r),
            stderr: err.map(|(r, _)| r),
        },
        spawned.in_cgroup,
    ))
}

/// `/dev/null` for reading, CLOEXEC, above the launch fds.
pub fn open_null() -> io::Result<OwnedFd> {
    let null: OwnedFd = std::fs::File::open("/dev/null")?.into();
    sys::dup_above(&null)
}
