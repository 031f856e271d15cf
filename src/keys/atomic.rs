//! Atomic file replacement, done as the current user.
//!
//! [`write_atomic`] writes a temp file in the target's own folder with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` and the final mode, writes and fsyncs it,
//! renames it over the target and fsyncs the folder. Until the rename the old
//! file is untouched; after it the new file is complete. A failure at any
//! step removes the temp file and leaves the old file as it was.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rand::RngCore;

/// The prefix of temp files, so listings can skip them.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Replaces `dir/name` with `data`, atomically, with file mode `mode`.
pub fn write_atomic(dir: &Path, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
    let temp = temp_path(dir, name);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        // The umask may have narrowed the mode; set exactly what was asked.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(data)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Fsyncs a folder so that a rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn temp_path(dir: &Path, name: &str) -> PathBuf {
    let tag = rand::thread_rng().next_u64();
    dir.join(format!("{TEMP_PREFIX}{name}.{tag:016x}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_with_exact_mode() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "f", b"one", 0o600).unwrap();
        write_atomic(dir.path(), "f", b"two", 0o644).unwrap();
        let path = dir.path().join("f");
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp left"
        );
    }

    #[test]
    fn failure_leaves_old_file() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "f", b"old", 0o600).unwrap();
        // A folder where the target should be makes the rename fail.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/x"), b"").unwrap();
        assert!(write_atomic(dir.path(), "d", b"new", 0o600).is_err());
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "temp file removed");
    }
}
