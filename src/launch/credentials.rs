//! Secrets given as files: the call's own `$CREDENTIALS_DIRECTORY`.
//!
//! Guarantees:
//! - The folder is a fresh `ramfs` (never swapped; its pages are charged
//!   to the call's memory cgroup), mounted `nosuid,nodev,noexec` by root,
//!   before the drop, in the call's own mount namespace, at
//!   [`CREDENTIALS_DIR`]: onto a folder root owns, reached from `/run`
//!   by descriptor with no link followed (`openat2`, `RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS`), a folder only root may write; before it is
//!   given to the user, the folder opened is checked to be that ramfs (its
//!   magic, a device of its own). It exists only in the call's mount
//!   namespace: no other call of the private view, of any user, sees it.
//!   What it does not stop: a process of the same uid outside any private
//!   view (a shared-view call, a login) reaches a running call's files
//!   through `/proc/PID/root` of the tool, as it reads the tool's
//!   environment; and a descriptor of the folder passed by the tool to
//!   another live process of its user keeps the folder (and its memory,
//!   then no longer the call's) until that process ends.
//! - Its root is the user's: `0700` while the launcher, already the user,
//!   writes each file (`O_CREAT|O_EXCL|O_NOFOLLOW`, `0400`) through the
//!   folder's descriptor, then `0500` before anything user-chosen runs.
//! - Only a launch in its own namespaces holds such a folder: a plan that
//!   gives a file to a launch in the host's namespaces is refused
//!   (`file_needs_private_view`), never written where others could look.
//! - A file name is one plain name ([`valid_file_name`]); two secrets to
//!   one name are refused (`file_conflict`) before anything is unsealed.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::Mode;

use super::report::{LaunchError, Stage};
use super::view::fd_path;
use crate::sys;

/// Where a call finds its secrets given as files (the value of
/// `$CREDENTIALS_DIRECTORY`), as systemd puts a service's credentials
/// under `/run/credentials`.
pub const CREDENTIALS_DIR: &str = "/run/credentials";

/// The variable that names the folder, as systemd's services get it.
pub const CREDENTIALS_VARIABLE: &str = "CREDENTIALS_DIRECTORY";

/// The most bytes a credential file's name may have (a file name's limit).
pub const MAX_FILE_NAME_LEN: usize = 255;

/// Checks that `name` is one plain file name for `$CREDENTIALS_DIRECTORY`:
/// letters, digits, `.`, `_` and `-`, not `.` or `..`, at most 255 bytes.
pub fn valid_file_name(name: &str) -> Result<(), String> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name == "." || name == ".." || !plain || name.len() > MAX_FILE_NAME_LEN {
        return Err(format!(
            "{:?} is not one file name: use letters, digits, '.', '_' and '-' (not '.' or \
             '..', no '/'), at most {MAX_FILE_NAME_LEN} bytes",
            name.escape_debug().to_string()
        ));
    }
    Ok(())
}

fn refused(what: &str, e: Errno) -> LaunchError {
    LaunchError::sys(Stage::View, "credentials_refused", what, e)
}

fn io_refused(what: &str, e: std::io::Error) -> LaunchError {
    LaunchError {
        stage: Stage::View,
        code: "credentials_refused".into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    }
}

/// A folder root owns that no one else may write, as an `O_PATH`
/// descriptor, with its device; or a refusal.
fn root_folder(fd: OwnedFd, what: &str) -> Result<(OwnedFd, u64), LaunchError> {
    let meta = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| refused(what, e))?;
    let is_dir = meta.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if !is_dir || meta.st_uid != 0 || meta.st_mode & 0o022 != 0 {
        return Err(LaunchError::new(
            Stage::View,
            "credentials_refused",
            format!(
                "{what} is not a folder root owns and only root may write (uid {}, mode {:o}); \
                 a call's credentials are mounted only onto one",
                meta.st_uid,
                meta.st_mode & 0o7777
            ),
        ));
    }
    Ok((fd, meta.st_dev))
}

/// `statfs`'s `f_type` of a ramfs.
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// As root, in the call's own mount namespace, before the drop: mounts a
/// fresh `ramfs` at [`CREDENTIALS_DIR`] (making the folder under `/run`
/// first where the host has none) and gives its root to the user, `0700`.
/// Returns the folder's descriptor, for [`write()`] after the drop.
pub fn mount(uid: u32, gid: u32) -> Result<OwnedFd, LaunchError> {
    mount_own_folder(c"credentials", "tono-credentials", uid, gid)
}

/// As [`mount`], at `/run/NAME`: a folder of the call's own, the user's,
/// on a fresh `ramfs` (mounted from `source`, as `/proc/self/mountinfo`
/// shows it) checked to be the one just mounted.
pub fn mount_own_folder(
    name: &std::ffi::CStr,
    source: &str,
    uid: u32,
    gid: u32,
) -> Result<OwnedFd, LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = format!("/run/{}", name.to_string_lossy());
    let run: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open("/run")
        .map_err(|e| io_refused("open /run", e))?
        .into();
    let (run, _) = root_folder(run, "/run")?;
    match nix::sys::stat::mkdirat(Some(run.as_raw_fd()), name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(refused(&format!("make {path}"), e)),
    }
    let below = sys::open_beneath(
        run.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .map_err(|e| io_refused(&format!("open {path} (a link is never followed)"), e))?;
    let (below, below_dev) = root_folder(below, &path)?;
    nix::mount::mount(
        Some(source),
        &fd_path(&below),
        Some("ramfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700"),
    )
    .map_err(|e| refused(&format!("mount a ramfs at {path}"), e))?;
    // The new mount's root: the same name, looked up again.
    let folder = sys::open_beneath(
        run.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .map_err(|e| io_refused(&format!("open the call's {path}"), e))?;
    // What root gives the user is the ramfs just mounted, nothing moved
    // in its place since: a ramfs, on a device of its own.
    let fs = nix::sys::statfs::fstatfs(&folder).map_err(|e| refused("statfs", e))?;
    let dev = nix::sys::stat::fstat(folder.as_raw_fd())
        .map_err(|e| refused("fstat", e))?
        .st_dev;
    if fs.filesystem_type().0 as i64 != RAMFS_MAGIC || dev == below_dev {
        return Err(LaunchError::new(
            Stage::View,
            "credentials_refused",
            format!("{path} is not the ramfs just mounted there; nothing is given to the user"),
        ));
    }
    nix::unistd::fchown(
        folder.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(|e| refused(&format!("give {path} to the user"), e))?;
    Ok(folder)
}

/// As the user: writes `value` as the file `file` of the folder,
/// `0400`, never through a link or over a file already there.
pub fn write(folder: &OwnedFd, file: &str, value: &[u8]) -> Result<(), LaunchError> {
    let failed = |what: &str, e: std::io::Error| LaunchError {
        stage: Stage::Unseal,
        code: "credential_write_failed".into(),
        message: format!("{what} {CREDENTIALS_DIR}/{file}: {e}"),
        errno: e.raw_os_error(),
    };
    valid_file_name(file).map_err(|m| LaunchError::new(Stage::Plan, "file_name_invalid", m))?;
    let name = std::ffi::CString::new(file)
        .map_err(|_| LaunchError::new(Stage::Plan, "file_name_invalid", "a NUL byte"))?;
    let fd = sys::open_beneath(
        folder.as_fd(),
        &name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o400),
    )
    .map_err(|e| failed("create", e))?;
    std::fs::File::from(fd)
        .write_all(value)
        .map_err(|e| failed("write", e))
}

/// As the user, once every file is written: the folder becomes `0500`
/// (nothing more is added by the launcher) and its descriptor is closed.
pub fn close(folder: OwnedFd) -> Result<(), LaunchError> {
    nix::sys::stat::fchmod(folder.as_raw_fd(), Mode::from_bits_truncate(0o500))
        .map_err(|e| refused("make /run/credentials 0500", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_is_one_plain_name() {
        for good in ["deploy_key", "id_ed25519", "sa.json", "a-b.c_d", "x"] {
            assert!(valid_file_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_FILE_NAME_LEN + 1);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "/etc/passwd",
            "../x",
            "a b",
            "é",
            "a\0b",
            &long,
        ] {
            let e = valid_file_name(bad).unwrap_err();
            assert!(e.contains("is not one file name"), "{bad:?}: {e}");
        }
        assert!(valid_file_name(&"a".repeat(MAX_FILE_NAME_LEN)).is_ok());
    }
}
