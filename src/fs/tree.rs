//! Deleting a tree without ever following a link.
//!
//! Guarantees: every folder is opened relative to its parent's fd with
//! `O_DIRECTORY|O_NOFOLLOW` and emptied through that fd; everything else (a
//! link included) is `unlinkat`-ed where it is. A folder swapped for a link
//! between the look and the open is unlinked as a link, never entered (the
//! class of Rust's CVE-2022-21658). Entries that vanish meanwhile are
//! already gone, which is the goal. Used by root on its own folders and by
//! the launcher, as the user, on a turn folder.
#![forbid(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// The deepest folder entered.
pub const MAX_DEPTH: usize = 256;

const DIR_NOFOLLOW: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_RDONLY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Removes `name` in the folder `parent`, and everything under it.
pub fn remove_entry(parent: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    remove_at(parent.as_raw_fd(), name, 0)
}

/// Removes everything inside the folder `path` (opened without following
/// a final link), not the folder itself. Returns how many top-level
/// entries went.
pub fn empty_folder(path: &Path) -> std::io::Result<u64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut dir = Dir::open(c.as_c_str(), DIR_NOFOLLOW, Mode::empty())?;
    let mut removed = 0;
    for child in entries(&mut dir) {
        match remove_at(dir.as_raw_fd(), &child, 1) {
            Ok(()) => removed += 1,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

/// The names in `dir`, but `.` and `..`.
fn entries(dir: &mut Dir) -> Vec<CString> {
    dir.iter()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect()
}

/// How often an entry that changed kind under us is looked at again.
const RACE_RETRIES: usize = 3;

fn remove_at(parent: RawFd, name: &CStr, depth: usize) -> Result<(), Errno> {
    let mut result = remove_once(parent, name, depth);
    for _ in 0..RACE_RETRIES {
        // A folder became a link (or back) between the look and the unlink.
        if !matches!(result, Err(Errno::ENOTDIR | Errno::EISDIR)) {
            break;
        }
        result = remove_once(parent, name, depth);
    }
    result
}

fn remove_once(parent: RawFd, name: &CStr, depth: usize) -> Result<(), Errno> {
    let st = fstatat(Some(parent), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        return unlinkat(Some(parent), name, UnlinkatFlags::NoRemoveDir);
    }
    if depth >= MAX_DEPTH {
        return Err(Errno::ELOOP);
    }
    let mut dir = match Dir::openat(Some(parent), name, DIR_NOFOLLOW, Mode::empty()) {
        Ok(dir) => dir,
        // Swapped for a link or a file since the look: unlink what is there.
        Err(Errno::ELOOP | Errno::ENOTDIR) => {
            return unlinkat(Some(parent), name, UnlinkatFlags::NoRemoveDir)
        }
        Err(e) => return Err(e),
    };
    // A folder of one's own closed to oneself (0500) is still one's to empty.
    let _ = nix::sys::stat::fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(0o700));
    for child in entries(&mut dir) {
        match remove_at(dir.as_raw_fd(), &child, depth + 1) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    drop(dir);
    unlinkat(Some(parent), name, UnlinkatFlags::RemoveDir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empties_without_following_links() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        std::fs::write(d.join("a/b/c/f"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join("a/b/link")).unwrap();
        assert_eq!(empty_folder(d).unwrap(), 2);
        assert_eq!(std::fs::read_dir(d).unwrap().count(), 0);
        assert_eq!(std::fs::read(outside.path().join("keep")).unwrap(), b"k");
        // The folder itself given as a link is refused, not followed.
        let link = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), link.path().join("l")).unwrap();
        assert!(empty_folder(&link.path().join("l")).is_err());
        assert!(outside.path().join("keep").exists());
    }
}
