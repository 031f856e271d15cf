//! Folders and files of cgroupfs as the worker makes and writes them.
//!
//! Guarantees: a folder the worker makes is root's and `0755` whatever
//! its umask; a control file is written through no link.
#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every cgroup folder the worker makes: root's, searchable,
/// never writable by others, whatever the worker's umask (cgroupfs takes
/// the mode of `mkdir` after the umask, so a worker started with umask 0
/// made folders a user could make cgroups in).
pub const CGROUP_DIR_MODE: u32 = 0o755;

/// Makes the cgroup folder `dir` with exactly [`CGROUP_DIR_MODE`].
pub fn make_cgroup_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(CGROUP_DIR_MODE).create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(CGROUP_DIR_MODE))
}

/// Writes `text` to the control file `path`, never through a link.
pub fn write_file(path: &Path, text: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?
        .write_all(text.as_bytes())
}
