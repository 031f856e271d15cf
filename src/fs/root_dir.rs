//! Root's own folders, and the only way root touches the file system for a
//! user: by the fd of a root-owned folder plus one validated name.
//!
//! Guarantees:
//! - a [`RootDir`] is opened from `/` one component at a time with
//!   `O_DIRECTORY|O_NOFOLLOW`, and it and every ancestor is a real folder
//!   owned by root and not writable by group or others; anything else is
//!   refused (THREATS: a root script in a user-writable folder);
//! - every operation takes a [`Component`]: one name of `[A-Za-z0-9._-]`,
//!   1–128 bytes, not starting with `.` (so never `.`, `..`, a path, or a
//!   temp name), resolved with `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`
//!   (or `O_NOFOLLOW`) — a planted link is never followed;
//! - ownership and modes are changed through the fd that was just opened,
//!   never by path, so a swapped entry cannot redirect a `chown`;
//! - [`RootDir::remove_tree`] deletes through fds opened `O_NOFOLLOW` and
//!   `unlinkat` only (the fix for Rust's CVE-2022-21658): a folder swapped
//!   for a link mid-way is unlinked as a link, never entered;
//! - [`RootDir::write_file`] is atomic: temp file (`O_EXCL`), fsync,
//!   `renameat` in the same folder, fsync of the folder.
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component as PathPart, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::sys::open_beneath;

/// The longest name a [`Component`] may have.
pub const MAX_COMPONENT: usize = 128;

/// Why a root file operation was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootDirError {
    /// The name is not one plain component.
    #[error("invalid name {name:?}: {reason}")]
    BadName {
        /// The name, escaped and shortened.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A folder on the way is not root's alone.
    #[error("{path} is not a folder owned by root and closed to group and others: {reason}")]
    NotRootOwned {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl RootDirError {
    /// The errno, if a system call failed.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// One validated name inside a root folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Component(String);

impl Component {
    /// Checks `name`.
    pub fn parse(name: &str) -> Result<Self, RootDirError> {
        let bad = |reason| RootDirError::BadName {
            name: name.escape_debug().take(80).collect(),
            reason,
        };
        if name.is_empty() {
            return Err(bad("it is empty"));
        }
        if name.len() > MAX_COMPONENT {
            return Err(bad("it is longer than 128 bytes"));
        }
        if name.starts_with('.') {
            return Err(bad("it starts with '.'"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(bad("it may hold only letters, digits, '.', '_' and '-'"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn c(&self) -> CString {
        // Checked: no NUL.
        CString::new(self.0.as_bytes()).unwrap_or_default()
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A folder only root can change, held open by fd.
#[derive(Debug)]
pub struct RootDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RootDirError + 'a {
    move |source| RootDirError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Checks that an open folder is root's alone.
fn check_root_owned(fd: &OwnedFd, path: &Path) -> Result<(), RootDirError> {
    let st = fstat(fd.as_raw_fd()).map_err(|e| io_err("stat", path)(errno(e)))?;
    let not = |reason: String| RootDirError::NotRootOwned {
        path: path.to_path_buf(),
        reason,
    };
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        return Err(not("not a folder".into()));
    }
    if st.st_uid != 0 {
        return Err(not(format!("owned by uid {}", st.st_uid)));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(not(format!("mode {:04o}", st.st_mode & 0o7777)));
    }
    Ok(())
}

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY.union(OFlag::O_RDONLY);

impl RootDir {
    /// Opens the absolute folder `path`, walking from `/` by fds. With
    /// `create`, missing folders are made (root-owned, that mode) and the
    /// last one is given exactly that mode.
    pub fn open(path: &Path, create: Option<u32>) -> Result<Self, RootDirError> {
        let not_plain = || RootDirError::NotRootOwned {
            path: path.to_path_buf(),
            reason: "not an absolute, plain path".into(),
        };
        if !path.is_absolute() {
            return Err(not_plain());
        }
        let root = Path::new("/");
        let mut fd: OwnedFd = File::open(root).map_err(io_err("open", root))?.into();
        check_root_owned(&fd, root)?;
        let mut here = PathBuf::from("/");
        for part in path.components() {
            let name = match part {
                PathPart::RootDir => continue,
                PathPart::Normal(n) => n,
                _ => return Err(not_plain()),
            };
            here.push(name);
            let cname = CString::new(name.as_encoded_bytes()).map_err(|_| not_plain())?;
            let open =
                |parent: &OwnedFd| open_beneath(parent.as_fd(), &cname, DIR_FLAGS, Mode::empty());
            let next = match (open(&fd), create) {
                (Ok(next), _) => next,
                (Err(e), Some(mode)) if e.raw_os_error() == Some(libc::ENOENT) => {
                    match mkdirat(
                        Some(fd.as_raw_fd()),
                        cname.as_c_str(),
                        Mode::from_bits_truncate(mode),
                    ) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io_err("mkdir", &here)(errno(e))),
                    }
                    open(&fd).map_err(io_err("open", &here))?
                }
                (Err(e), _) => return Err(io_err("open", &here)(e)),
            };
            check_root_owned(&next, &here)?;
            fd = next;
        }
        if let Some(mode) = create {
            nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(mode))
                .map_err(|e| io_err("chmod", path)(errno(e)))?;
        }
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The folder's path (for messages and for the launcher, which enters
    /// it as the user).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of an entry, for the user's side (never opened by root).
    pub fn entry_path(&self, name: &Component) -> PathBuf {
        self.path.join(name.as_str())
    }

    /// The folder's mode bits.
    pub fn mode(&self) -> Result<u32, RootDirError> {
        fstat(self.fd.as_raw_fd())
            .map(|st| st.st_mode & 0o7777)
            .map_err(|e| io_err("stat", &self.path)(errno(e)))
    }

    /// Makes the folder `name` (which must not exist) and returns its fd,
    /// opened without following links. Its mode is exactly `mode`.
    pub fn create_dir(&self, name: &Component, mode: u32) -> Result<OwnedFd, RootDirError> {
        let path = self.entry_path(name);
        let cname = name.c();
        mkdirat(
            Some(self.fd.as_raw_fd()),
            cname.as_c_str(),
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| io_err("mkdir", &path)(errno(e)))?;
        let fd = open_beneath(self.fd.as_fd(), &cname, DIR_FLAGS, Mode::empty())
            .map_err(io_err("open", &path))?;
        // Only root can make entries here, so this is the folder just made.
        check_root_owned(&fd, &path)?;
        nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(mode))
            .map_err(|e| io_err("chmod", &path)(errno(e)))?;
        Ok(fd)
    }

    /// Opens the folder `name` without following links.
    pub fn open_dir(&self, name: &Component) -> Result<OwnedFd, RootDirError> {
        open_beneath(self.fd.as_fd(), &name.c(), DIR_FLAGS, Mode::empty())
            .map_err(io_err("open", &self.entry_path(name)))
    }

    /// Removes the empty folder `name` (`unlinkat(AT_REMOVEDIR)`).
    pub fn remove_dir(&self, name: &Component) -> Result<(), RootDirError> {
        unlinkat(
            Some(self.fd.as_raw_fd()),
            name.c().as_c_str(),
            UnlinkatFlags::RemoveDir,
        )
        .map_err(|e| io_err("rmdir", &self.entry_path(name))(errno(e)))
    }

    /// Removes `name` and everything under it without following any link.
    /// Missing is not an error.
    pub fn remove_tree(&self, name: &Component) -> Result<(), RootDirError> {
        let path = self.entry_path(name);
        match super::tree::remove_entry(self.fd.as_fd(), &name.c()) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io_err("remove", &path)(errno(e))),
        }
    }

    /// Replaces the file `name` with `data` (mode `mode`), atomically.
    pub fn write_file(&self, name: &Component, data: &[u8], mode: u32) -> Result<(), RootDirError> {
        use rand::RngCore;
        let path = self.entry_path(name);
        let temp = CString::new(format!(
            ".tmp-{}.{:016x}",
            name,
            rand::thread_rng().next_u64()
        ))
        .unwrap_or_default();
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        let result = (|| {
            let fd = open_beneath(
                self.fd.as_fd(),
                &temp,
                flags,
                Mode::from_bits_truncate(mode),
            )?;
            nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(mode))
                .map_err(errno)?;
            let mut file = File::from(fd);
            file.write_all(data)?;
            file.sync_all()?;
            drop(file);
            nix::fcntl::renameat(
                Some(self.fd.as_raw_fd()),
                temp.as_c_str(),
                Some(self.fd.as_raw_fd()),
                name.c().as_c_str(),
            )
            .map_err(errno)?;
            nix::unistd::fsync(self.fd.as_raw_fd()).map_err(errno)
        })();
        if result.is_err() {
            let _ = unlinkat(
                Some(self.fd.as_raw_fd()),
                temp.as_c_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
        result.map_err(io_err("write", &path))
    }

    /// Reads the regular, root-owned file `name` (at most `cap` bytes);
    /// `None` if it does not exist.
    pub fn read_file(&self, name: &Component, cap: usize) -> Result<Option<Vec<u8>>, RootDirError> {
        let path = self.entry_path(name);
        let fd = match open_beneath(self.fd.as_fd(), &name.c(), OFlag::O_RDONLY, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(io_err("open", &path)(e)),
        };
        let st = fstat(fd.as_raw_fd()).map_err(|e| io_err("stat", &path)(errno(e)))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG || st.st_uid != 0
        {
            return Err(RootDirError::NotRootOwned {
                path,
                reason: "not a regular file owned by root".into(),
            });
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err("read", &path))?;
        if bytes.len() > cap {
            return Err(io_err("read", &path)(io::Error::other(format!(
                "larger than {cap} bytes"
            ))));
        }
        Ok(Some(bytes))
    }

    /// Opens the file `name` for appending (`O_APPEND`, read and write),
    /// creating it with exactly `mode` if it is missing. Refused, never
    /// followed: a symlink (`ELOOP`); refused after the open, before any
    /// byte is written: anything but a regular file owned by root with no
    /// group or other bits. A FIFO planted there cannot block the open
    /// (`O_NONBLOCK`, cleared once the file is known to be regular).
    pub fn open_append(&self, name: &Component, mode: u32) -> Result<File, RootDirError> {
        let path = self.entry_path(name);
        let flags = OFlag::O_RDWR | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NONBLOCK;
        let fd = open_beneath(
            self.fd.as_fd(),
            &name.c(),
            flags,
            Mode::from_bits_truncate(mode),
        )
        .map_err(io_err("open", &path))?;
        let st = fstat(fd.as_raw_fd()).map_err(|e| io_err("stat", &path)(errno(e)))?;
        let refuse = |reason: String| RootDirError::NotRootOwned {
            path: path.clone(),
            reason,
        };
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(refuse("not a regular file".into()));
        }
        if st.st_uid != 0 {
            return Err(refuse(format!("owned by uid {}", st.st_uid)));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(refuse(format!("mode {:04o}", st.st_mode & 0o7777)));
        }
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(OFlag::O_APPEND),
        )
        .map_err(|e| io_err("fcntl", &path)(errno(e)))?;
        Ok(File::from(fd))
    }

    /// The inode of the entry `name`, without following a link; `None`
    /// if it does not exist.
    pub fn inode_of(&self, name: &Component) -> Result<Option<u64>, RootDirError> {
        match nix::sys::stat::fstatat(
            Some(self.fd.as_raw_fd()),
            name.c().as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Some(st.st_ino)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io_err("stat", &self.entry_path(name))(errno(e))),
        }
    }

    /// Renames `from` to `to` in this folder, refusing to replace an
    /// existing `to` (`renameat2(RENAME_NOREPLACE)`).
    pub fn rename_noreplace(&self, from: &Component, to: &Component) -> Result<(), RootDirError> {
        nix::fcntl::renameat2(
            Some(self.fd.as_raw_fd()),
            from.c().as_c_str(),
            Some(self.fd.as_raw_fd()),
            to.c().as_c_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(|e| io_err("rename", &self.entry_path(from))(errno(e)))
    }

    /// The names of the entries in this folder (not `.` or `..`), read
    /// through the folder's own fd.
    pub fn names(&self) -> Result<Vec<String>, RootDirError> {
        let mut dir = nix::dir::Dir::openat(
            Some(self.fd.as_raw_fd()),
            ".",
            DIR_FLAGS | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("list", &self.path)(errno(e)))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| io_err("list", &self.path)(errno(e)))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Takes an exclusive lock on the folder (`flock`), held until dropped.
    pub fn lock(&self) -> Result<nix::fcntl::Flock<OwnedFd>, RootDirError> {
        let fd = self.fd.try_clone().map_err(io_err("lock", &self.path))?;
        nix::fcntl::Flock::lock(fd, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| io_err("lock", &self.path)(errno(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_plain_component() {
        for good in ["turn-1", "a", "T_2.x", &"x".repeat(128)] {
            Component::parse(good).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a\0b",
            "a b",
            "ü",
            &"x".repeat(129),
        ] {
            assert!(Component::parse(bad).is_err(), "{bad:?}");
        }
    }
}
