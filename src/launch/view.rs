//! The call's own view of the machine: a PID namespace whose init is the
//! call's launcher, with a fresh `/proc` in which only the call's own
//! processes exist, an IPC namespace and `/dev/shm` of its own, fresh empty
//! `/tmp`, `/var/tmp`, `/run/lock` and `/run/user` (nothing one call leaves
//! there reaches another, of any user), and a mount namespace in which the
//! user's key store is an empty read-only folder (the home itself is
//! [`super::home`]'s).
//!
//! Guarantees:
//! - Root never acts by a path a user controls. `~/.tono` is opened by root
//!   once, as `O_PATH|O_DIRECTORY`, from the home's fd with `openat2`
//!   (`RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`), and must be a folder owned by
//!   the user; the empty tmpfs is mounted ([`super::home::enter`]) onto
//!   the store's descriptor in the view the tool sees
//!   (`/proc/self/fd/N`, which names the descriptor's own folder and
//!   follows nothing the user can change). Why root and not the user in a
//!   user namespace of its own: that needs unprivileged user namespaces,
//!   which many hosts disable, and a mount made there could be undone by
//!   the same user; a mount made by root in the call's namespace is locked
//!   against the tool (it has no capability).
//! - The launcher keeps the descriptor to the store folder underneath the
//!   mount, so after its drop it unseals through that descriptor while every
//!   path the tool can name shows the empty folder; the descriptor is
//!   closed before the tool runs (`O_CLOEXEC`, and explicitly).
//! - Propagation is private (`MS_REC|MS_PRIVATE`) before anything is
//!   mounted: nothing mounted for the call appears outside it, and no later
//!   mount of the host's reaches into it.
//! - The launcher is started as the init of a new PID namespace
//!   (`clone(CLONE_NEWPID)` by the worker, no fork of its own) and makes
//!   its own mount namespace before it reads a plan, so a pooled launcher
//!   has paid for both before a call takes it; only the store's cover is
//!   mounted on the call's path. When the launcher exits, the kernel kills
//!   everything left in the namespace. A pooled launcher sees the host's
//!   mounts as they were when it started; the pool ends one at once when
//!   the worker's mount table changes, and never hands it out
//!   (`crate::drop::pool`), so a call sees the host's mounts as they are.
//! - A launcher in its own namespaces runs only a program or a file tool of
//!   the private view, and a launcher in the host's never runs one: the
//!   launcher checks the plan against how it was started (`view_mismatch`).
//! - A kernel that refuses a namespace or a mount refuses the call, with
//!   the errno (`view_refused`); the worker never falls back by itself.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use super::report::{LaunchError, Stage};
use crate::sys;

/// What a call sees of the machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// Its own mount and PID namespaces: the key store is an empty
    /// read-only folder, `/proc` shows only the call, and the output is
    /// masked by the launcher before it leaves the user.
    #[default]
    Private,
    /// The host's namespaces, as the user sees them in a login (the tool
    /// can read the whole store and the user's other calls).
    Shared,
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            View::Private => "private",
            View::Shared => "shared",
        })
    }
}

fn refused(what: &str, e: Errno) -> LaunchError {
    LaunchError::sys(Stage::View, "view_refused", what, e)
}

/// Opens the user's `~/.tono` as root without following anything the user
/// controls: `None` when there is no store. A store that is not a folder
/// owned by `uid` is refused (`store_insecure`).
pub fn open_store(home: &Path, uid: u32) -> Result<Option<OwnedFd>, LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let home_fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(home)
        .map_err(|e| LaunchError {
            stage: Stage::View,
            code: "home_missing".into(),
            message: format!("open {}: {e}", home.display()),
            errno: e.raw_os_error(),
        })?
        .into();
    let store = match sys::open_beneath(
        home_fd.as_fd(),
        c".tono",
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => {
            return Err(LaunchError {
                stage: Stage::View,
                code: "store_insecure".into(),
                message: format!(
                    "{}/.tono is not a plain folder (a link or not a folder): {e}",
                    home.display()
                ),
                errno: e.raw_os_error(),
            })
        }
    };
    let meta =
        nix::sys::stat::fstat(store.as_raw_fd()).map_err(|e| refused("fstat of the store", e))?;
    if meta.st_uid != uid {
        return Err(LaunchError::new(
            Stage::View,
            "store_insecure",
            format!(
                "{}/.tono is owned by uid {}, not the user",
                home.display(),
                meta.st_uid
            ),
        ));
    }
    Ok(Some(store))
}

/// The path that names an open descriptor's own file in this process.
pub fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Whether this launcher was started in a PID namespace of its own (as
/// its init, by [`crate::sys::spawn_launcher`] for a call of the private
/// view); if so, enters a mount namespace of its own, makes every mount
/// private and mounts a fresh `/proc` that shows only this namespace.
/// Done at start, before the plan is read: a pooled launcher has it done
/// before a call takes it. Errors are kept for the call to report.
pub fn enter_at_start() -> Result<bool, LaunchError> {
    if nix::unistd::getpid().as_raw() != 1 {
        return Ok(false);
    }
    // This process's own mount namespace, made here rather than trusted
    // from the spawn: the mounts below never touch the host's.
    // Its own IPC namespace too: SysV objects and POSIX message queues
    // made in the call are seen by no other call and die with it.
    nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)
        .map_err(|e| refused("unshare(CLONE_NEWNS|CLONE_NEWIPC)", e))?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| refused("make every mount private", e))?;
    nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| refused("mount a fresh /proc", e))?;
    // POSIX shared memory is files in /dev/shm, which no IPC namespace
    // holds; /tmp, /var/tmp and /run/lock are where one call (of any
    // user) leaves a module, a FIFO or a hard link to the home for the
    // next: each a fresh tmpfs of the call's own. /run/user holds the
    // sockets of per-user daemons (systemd --user, D-Bus, gpg-agent) that
    // run outside any call: empty. And the message queues of this IPC
    // namespace where the host shows its own.
    // nosuid and nodev, as the host mounts them; not noexec: tools build
    // and run programs in /tmp, and JITs map code from /dev/shm.
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for (path, mode) in [
        ("/dev/shm", "mode=1777"),
        ("/tmp", "mode=1777"),
        ("/var/tmp", "mode=1777"),
        ("/run/lock", "mode=1777"),
        ("/run/user", "mode=0755"),
    ] {
        // A folder root owns on the host, never a user's link.
        let ours = std::fs::symlink_metadata(path)
            .is_ok_and(|m| m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == 0);
        if ours {
            nix::mount::mount(Some("tono-tmp"), path, Some("tmpfs"), quiet, Some(mode))
                .map_err(|e| refused(&format!("mount a fresh {path}"), e))?;
        }
    }
    if Path::new("/dev/mqueue").is_dir() {
        nix::mount::mount(
            Some("mqueue"),
            "/dev/mqueue",
            Some("mqueue"),
            quiet,
            None::<&str>,
        )
        .map_err(|e| refused("mount this IPC namespace's /dev/mqueue", e))?;
    }
    Ok(true)
}
