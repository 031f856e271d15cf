//! The home as a call of the private view sees it: what its writes become,
//! and what of it is hidden.
//!
//! The home is shared by every call of a user and outlives them, so
//! without this one call's writes are the next call's code: a Python
//! `.pth` file, `.bashrc`, a git hook, `.npmrc`. The operator chooses per
//! user or per call ([`HomeMode`]); the default is the safe one.
//!
//! Guarantees:
//! - `ephemeral` (the default): the call sees its home and may write it,
//!   but every write lands in an overlay whose upper layer is a tmpfs of
//!   the call's own mount namespace, and is gone when the call ends; the
//!   real home is never written. `read-only`: the home is a read-only bind
//!   of itself. `persistent`: today's shared home, the weakest (and what
//!   `verify` reports as such).
//! - In every mode `~/.tono` and each hidden path (the provider login
//!   folders, the operator's list) are covered by an empty read-only tmpfs
//!   (a file: by a read-only bind of `/dev/null`), in the view the tool
//!   sees — on top of the overlay, where the cover of the lower folder
//!   would not show. A hidden path that does not exist is made first, as
//!   the user (the launcher's file-system ids set to the user's, in the
//!   real home, empty, `0700`), so a store or login made while the call
//!   runs lands under the cover, not beside it. A hidden
//!   path that is itself a link is refused (`home_view_refused`), never
//!   covered as a file while its target stays in view; each folder above a
//!   nested one is bound onto itself, so a call cannot rename the cover
//!   away (`EBUSY`) and leave the next call nothing to cover. For a
//!   provider's own programs, which see the real home, the login folders
//!   must hold only the user's own folders and single-link files — no
//!   link, hard link, FIFO, socket or device, walked by descriptor up to
//!   100,000 entries — or the call is refused: a login is never written
//!   through something a tool planted.
//! - Root never follows a path the user controls: the home is opened once
//!   `O_PATH|O_NOFOLLOW`, every mount is made onto a descriptor
//!   (`/proc/self/fd/N`, which names that descriptor's own file), and each
//!   hidden path is opened beneath the view's root with `openat2`
//!   (`RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`): a link anywhere in it is
//!   refused (`home_view_refused`), never followed.
//! - Turn folders live outside the home (root's turn base): they stay
//!   persistent whatever the mode.
//! - Every mount is `nosuid,nodev`; the overlay's upper tmpfs is charged to
//!   the call's memory cgroup by the kernel as the tool writes it.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::Mode;

use super::report::{LaunchError, Stage};
use super::view::fd_path;
use crate::env::home::{valid_hidden_path, HomeMode, HomeView};
use crate::sys;

fn refused(what: &str, e: Errno) -> LaunchError {
    LaunchError::sys(Stage::View, "home_view_refused", what, e)
}

/// Opens `path` as root, `O_PATH|O_DIRECTORY`, its last component not
/// followed.
fn open_dir(path: &Path, what: &str) -> Result<OwnedFd, LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|e| LaunchError {
            stage: Stage::View,
            code: "home_missing".into(),
            message: format!("open {what} {}: {e}", path.display()),
            errno: e.raw_os_error(),
        })
}

/// `mount(2)` onto the file an open descriptor names.
fn mount_on(
    source: Option<&str>,
    target: &OwnedFd,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &str,
) -> Result<(), LaunchError> {
    nix::mount::mount(source, &fd_path(target), fstype, flags, data).map_err(|e| refused(what, e))
}

const QUIET: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// Makes the bind mount on `bound` read-only, `nosuid,nodev` (a bind takes
/// its flags only from a remount).
fn remount_read_only(bound: &OwnedFd, what: &str) -> Result<(), LaunchError> {
    mount_on(
        None,
        bound,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | QUIET,
        None,
        what,
    )
}

/// As root, in the call's own mount namespace (made by
/// [`super::view::enter_at_start`]), before the drop: makes the home of
/// `view.mode` at `home` and covers `~/.tono` and every hidden path in it.
pub fn enter(home: &Path, uid: u32, gid: u32, view: &HomeView) -> Result<(), LaunchError> {
    for path in view.hidden.iter().chain(&view.plain) {
        valid_hidden_path(path)
            .map_err(|m| LaunchError::new(Stage::Plan, "home_view_invalid", m))?;
    }
    let real = open_dir(home, "the home")?;
    // Every path a tool call must not see exists before the view is made,
    // so a store or a login made later, while the call runs, lands under
    // its cover; made as the user, in the real home.
    if !view.hidden.is_empty() {
        let as_user = FsIds::become_user(uid, gid);
        make_as_user(&real, ".tono").map_err(store_refusal)?;
        for path in &view.hidden {
            make_as_user(&real, path)?;
        }
        drop(as_user);
    }
    let seen = match view.mode {
        HomeMode::Persistent => real,
        HomeMode::ReadOnly => {
            let source = fd_path(&real);
            mount_on(
                source.to_str(),
                &real,
                None,
                MsFlags::MS_BIND,
                None,
                "bind the home onto itself",
            )?;
            // The bind is the top mount at the home's path now.
            let bound = open_dir(home, "the home's bind")?;
            remount_read_only(&bound, "make the home read-only")?;
            bound
        }
        HomeMode::Ephemeral => overlay(home, &real, uid, gid)?,
    };
    // The store swapped for a link since it was opened: what the store's
    // own check says of it.
    cover(&seen, ".tono").map_err(store_refusal)?;
    for path in &view.hidden {
        pin_ancestors(&seen, path)?;
        cover(&seen, path)?;
    }
    for path in &view.plain {
        check_plain_tree(&seen, path, uid)?;
    }
    Ok(())
}

/// A refusal about `~/.tono` is what the store's own check says of it
/// (`store_insecure`): the same code whichever step met the link.
fn store_refusal(mut e: LaunchError) -> LaunchError {
    if e.code == "home_view_refused" {
        e.code = "store_insecure".into();
    }
    e
}

/// While held, this (single-threaded) process's file-system ids are the
/// user's: what it creates is the user's, and only where the user may
/// (the kernel drops root's file capabilities with fsuid 0). Put back
/// when dropped.
struct FsIds;

impl FsIds {
    fn become_user(uid: u32, gid: u32) -> Self {
        nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid));
        nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
        FsIds
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        nix::unistd::setfsuid(nix::unistd::Uid::from_raw(0));
        nix::unistd::setfsgid(nix::unistd::Gid::from_raw(0));
    }
}

/// Makes each missing folder of `path` beneath `root` (mode 0700), under
/// the user's file-system ids ([`FsIds`]); refuses a link or a part that
/// is not a folder.
fn make_as_user(root: &OwnedFd, path: &str) -> Result<(), LaunchError> {
    let parts: Vec<&str> = path.split('/').collect();
    for depth in 1..=parts.len() {
        let here = parts[..depth].join("/");
        if open_no_link(root, &here)?.is_some() {
            continue;
        }
        let parent = match depth {
            1 => None,
            _ => open_no_link(root, &parts[..depth - 1].join("/"))?,
        };
        let dirfd = parent.as_ref().unwrap_or(root).as_raw_fd();
        match nix::sys::stat::mkdirat(
            Some(dirfd),
            parts[depth - 1],
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => {
                return Err(LaunchError::sys(
                    Stage::View,
                    "home_view_refused",
                    &format!("make ~/{here} as the user, to cover it"),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// The most entries [`check_plain_tree`] looks at before it gives up
/// (and refuses): a login folder holds a few files and a session log each.
const MAX_PLAIN_ENTRIES: usize = 100_000;

/// For a provider's own program: every entry of the login folder at
/// `path` must be a folder or a regular file with one link, owned by the
/// user. A link, a hard-linked file, a FIFO, socket or device, or a file
/// of another owner (each something a tool could have planted to have a
/// login written where it can read it, or to hang the program) refuses
/// the call.
fn check_plain_tree(root: &OwnedFd, path: &str, uid: u32) -> Result<(), LaunchError> {
    let refuse = |what: String| {
        LaunchError::new(
            Stage::View,
            "home_view_refused",
            format!(
                "~/{path}: {what}; a login folder must hold only the user's own folders and \
                 files (one link each); remove it (as the user) and sign in again"
            ),
        )
    };
    if open_no_link(root, path)?.is_none() {
        return Ok(());
    }
    let name = std::ffi::CString::new(path)
        .map_err(|_| LaunchError::new(Stage::Plan, "home_view_invalid", "a NUL in a path"))?;
    let top = sys::open_beneath(
        root.as_fd(),
        &name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .map_err(|e| refuse(format!("not a folder that opens without a link ({e})")))?;
    let mut stack = vec![(top, path.to_owned())];
    let mut seen = 0usize;
    while let Some((fd, at)) = stack.pop() {
        // A second descriptor of the folder for the *at calls; the first
        // goes to `Dir`, which reads the entries and closes it.
        let keep = fd.try_clone().map_err(|e| refuse(format!("~/{at}: {e}")))?;
        let mut dir = nix::dir::Dir::from_fd(std::os::fd::IntoRawFd::into_raw_fd(fd))
            .map_err(|e| refused("read a login folder", e))?;
        let dirfd = keep.as_raw_fd();
        let mut folders = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| refused("read a login folder", e))?;
            let entry_name = entry.file_name();
            if matches!(entry_name.to_bytes(), b"." | b"..") {
                continue;
            }
            seen += 1;
            if seen > MAX_PLAIN_ENTRIES {
                return Err(refuse(format!(
                    "more than {MAX_PLAIN_ENTRIES} entries, more than can be checked"
                )));
            }
            let shown = format!("{at}/{}", entry_name.to_string_lossy());
            let meta = nix::sys::stat::fstatat(
                Some(dirfd),
                entry_name,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| refused("stat in a login folder", e))?;
            if meta.st_uid != uid {
                return Err(refuse(format!("~/{shown} is owned by uid {}", meta.st_uid)));
            }
            match meta.st_mode & libc::S_IFMT {
                libc::S_IFDIR => folders.push((entry_name.to_owned(), shown)),
                libc::S_IFREG if meta.st_nlink == 1 => {}
                libc::S_IFREG => {
                    return Err(refuse(format!(
                        "~/{shown} has {} hard links",
                        meta.st_nlink
                    )))
                }
                libc::S_IFLNK => return Err(refuse(format!("~/{shown} is a symbolic link"))),
                _ => return Err(refuse(format!("~/{shown} is not a folder or a file"))),
            }
        }
        for (folder, shown) in folders {
            let fd = sys::open_beneath(
                keep.as_fd(),
                &folder,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| refuse(format!("~/{shown} does not open as a folder ({e})")))?;
            stack.push((fd, shown));
        }
    }
    Ok(())
}

/// Opens `path` beneath `root` (`O_PATH`), refusing a link anywhere in it,
/// the last component included (`openat2` opens that link itself):
/// `None` when nothing is there.
fn open_no_link(root: &OwnedFd, path: &str) -> Result<Option<OwnedFd>, LaunchError> {
    let name = std::ffi::CString::new(path)
        .map_err(|_| LaunchError::new(Stage::Plan, "home_view_invalid", "a NUL in a path"))?;
    let link = |errno: Option<i32>, why: String| LaunchError {
        stage: Stage::View,
        code: "home_view_refused".into(),
        message: format!(
            "~/{path} {why}: a hidden or login path must be a plain folder or file; \
             remove the link (as the user) and try again"
        ),
        errno,
    };
    let target = match sys::open_beneath(root.as_fd(), &name, OFlag::O_PATH, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => {
            return Err(link(
                e.raw_os_error(),
                format!("cannot be opened without following a link ({e})"),
            ))
        }
    };
    let meta =
        nix::sys::stat::fstat(target.as_raw_fd()).map_err(|e| refused("fstat a hidden path", e))?;
    if meta.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(link(Some(libc::ELOOP), "is a symbolic link".into()));
    }
    Ok(Some(target))
}

/// Binds each folder above a nested hidden path onto itself, so that in
/// this call it is a mount point: renaming it (which would carry the cover
/// away, and leave nothing at the hidden path for the next call to cover)
/// fails with `EBUSY`.
fn pin_ancestors(root: &OwnedFd, path: &str) -> Result<(), LaunchError> {
    let parts: Vec<&str> = path.split('/').collect();
    for depth in 1..parts.len() {
        let ancestor = parts[..depth].join("/");
        let Some(fd) = open_no_link(root, &ancestor)? else {
            return Ok(());
        };
        let source = fd_path(&fd);
        mount_on(
            source.to_str(),
            &fd,
            None,
            MsFlags::MS_BIND,
            None,
            &format!("pin ~/{ancestor}"),
        )?;
    }
    Ok(())
}

/// The ephemeral home: an overlay of the real home (lower) and a tmpfs of
/// this namespace's (upper), mounted over the home; returns its root.
fn overlay(home: &Path, real: &OwnedFd, uid: u32, gid: u32) -> Result<OwnedFd, LaunchError> {
    let meta = nix::sys::stat::fstat(real.as_raw_fd()).map_err(|e| refused("fstat the home", e))?;
    // The scratch tmpfs goes over the home itself, so no other path is
    // touched; it is root's and 0700 until the overlay covers it.
    mount_on(
        Some("tono-home"),
        real,
        Some("tmpfs"),
        QUIET,
        Some("mode=0700"),
        "mount the call's scratch tmpfs",
    )?;
    let scratch = open_dir(home, "the scratch tmpfs")?;
    let mut made = Vec::with_capacity(2);
    for name in [c"upper", c"work"] {
        nix::sys::stat::mkdirat(
            Some(scratch.as_raw_fd()),
            name,
            Mode::from_bits_truncate(0o700),
        )
        .map_err(|e| refused("mkdir in the scratch tmpfs", e))?;
        let fd = sys::open_beneath(
            scratch.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| {
            refused(
                "open in the scratch tmpfs",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        })?;
        made.push(fd);
    }
    let (upper, work) = (&made[0], &made[1]);
    // The overlay's root takes the upper folder's owner and mode: the
    // home's own.
    nix::unistd::fchown(
        upper.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(|e| refused("chown the upper folder", e))?;
    nix::sys::stat::fchmod(
        upper.as_raw_fd(),
        Mode::from_bits_truncate(meta.st_mode & 0o7777),
    )
    .map_err(|e| refused("chmod the upper folder", e))?;
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        fd_path(real).display(),
        fd_path(upper).display(),
        fd_path(work).display()
    );
    mount_on(
        Some("tono-home"),
        &scratch,
        Some("overlay"),
        QUIET,
        Some(&data),
        "mount the ephemeral home (overlay)",
    )?;
    open_dir(home, "the ephemeral home")
}

/// Covers `path` beneath `root` with an empty read-only tmpfs (a folder)
/// or a read-only bind of `/dev/null` (anything else); nothing when it
/// does not exist. A link on the way, or as the path itself, is refused.
fn cover(root: &OwnedFd, path: &str) -> Result<(), LaunchError> {
    let name = std::ffi::CString::new(path)
        .map_err(|_| LaunchError::new(Stage::Plan, "home_view_invalid", "a NUL in a path"))?;
    let Some(target) = open_no_link(root, path)? else {
        return Ok(());
    };
    let meta =
        nix::sys::stat::fstat(target.as_raw_fd()).map_err(|e| refused("fstat a hidden path", e))?;
    let what = format!("cover ~/{path}");
    if meta.st_mode & libc::S_IFMT == libc::S_IFDIR {
        mount_on(
            Some("tono-view"),
            &target,
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC | QUIET,
            Some("size=4k,mode=0555"),
            &what,
        )
    } else {
        nix::mount::mount(
            Some("/dev/null"),
            &fd_path(&target),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| refused(&what, e))?;
        // A bind takes its flags only from a remount; the bind is the top
        // mount on that descriptor's path only through the path, so the
        // remount goes by the parent's view: reopen it beneath the root.
        let bound =
            sys::open_beneath(root.as_fd(), &name, OFlag::O_PATH, Mode::empty()).map_err(|e| {
                refused(
                    &what,
                    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                )
            })?;
        remount_read_only(&bound, &what)
    }
}
