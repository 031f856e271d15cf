//! Whether a path is root's all the way down: the file and every folder
//! above it owned by root and closed to writes by others, so that no user
//! can replace what root is about to run.
//!
//! Guarantees: the path is made canonical, then walked from `/` one
//! component at a time by fd (`openat2` with no symlinks), so a link
//! swapped in after canonicalization is refused, never followed; a folder
//! writable by group or others passes only with the sticky bit (then no
//! user can rename or remove the root-owned entry inside it); the last
//! component must be a regular file.
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component as PathPart, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, Mode, SFlag};

use crate::sys::open_beneath;

/// Checks that `path` and every folder above it are root's and closed to
/// others, and returns the canonical path that was checked (run that one:
/// a link on the way was not); the error says which component is not, and
/// why.
pub fn check_root_path(path: &Path) -> Result<PathBuf, String> {
    let canonical = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut fd: OwnedFd = std::fs::File::open("/")
        .map_err(|e| format!("/: {e}"))?
        .into();
    let mut here = PathBuf::from("/");
    check_entry(&fd, &here, true)?;
    let parts: Vec<_> = canonical.components().collect();
    for (i, part) in parts.iter().enumerate() {
        let PathPart::Normal(name) = part else {
            continue;
        };
        here.push(name);
        let last = i + 1 == parts.len();
        let cname = CString::new(name.as_encoded_bytes())
            .map_err(|_| format!("{}: a NUL in the path", here.display()))?;
        let flags = if last {
            OFlag::O_PATH
        } else {
            OFlag::O_PATH | OFlag::O_DIRECTORY
        };
        let next = open_beneath(fd.as_fd(), &cname, flags, Mode::empty())
            .map_err(|e| format!("{}: {e}", here.display()))?;
        check_entry(&next, &here, !last)?;
        fd = next;
    }
    Ok(canonical)
}

fn check_entry(fd: &OwnedFd, path: &Path, folder: bool) -> Result<(), String> {
    let st = fstat(fd.as_raw_fd()).map_err(|e| format!("{}: {e}", path.display()))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let mode = st.st_mode & 0o7777;
    let not = |why: String| format!("{} is {why}", path.display());
    if folder && kind != SFlag::S_IFDIR {
        return Err(not("not a folder".into()));
    }
    if !folder && kind != SFlag::S_IFREG {
        return Err(not("not a regular file".into()));
    }
    if st.st_uid != 0 {
        return Err(not(format!("owned by uid {}, not root", st.st_uid)));
    }
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(folder && sticky) {
        return Err(not(format!(
            "writable by group or others (mode {mode:04o})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_programs_pass_and_a_world_writable_folder_does_not() {
        if !nix::unistd::geteuid().is_root() {
            return; // the files are root's either way; only the test needs none
        }
        let sh = check_root_path(Path::new("/bin/sh")).unwrap();
        assert!(
            sh.is_absolute() && sh.ends_with("sh") || sh.ends_with("dash"),
            "{sh:?}"
        );
        let e = check_root_path(Path::new("/tmp")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(check_root_path(Path::new("/no/such/file")).is_err());
    }
}
