//! The append-only audit log a worker writes: one line a record, each
//! chained to the one before it.
//!
//! Guarantees:
//! - the log's folder is root's alone (mode `0700`, every ancestor root's
//!   and closed to group and others, made through [`RootDir`]); the file is
//!   a regular, root-owned `0600` file opened `O_APPEND` without following
//!   a link — a symlink, a FIFO or a foreign file where it goes is refused,
//!   never written;
//! - a record is one `write` of its whole line, then `fsync` (every record,
//!   or every [`AuditConfig::fsync_every`]); a short write breaks the log
//!   and every later append fails, so the worker can refuse calls it could
//!   not give a receipt for;
//! - appends are serialised across workers by a lock on the folder, and
//!   each one chains to the file's real last record (re-read when another
//!   worker wrote or rotated since), so workers that share a log, or one
//!   that restarts, continue one valid chain;
//! - a file over [`AuditConfig::max_bytes`] is renamed to `NAME.NNNNNN`
//!   and a new one started whose first record chains to the last of the
//!   old; a torn last line left by a killed worker is kept as it is, in a
//!   rotated file, and the chain goes on from the last whole record.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::chain::{line_hash, rotated_name, rotated_number, seq_and_prev};
use super::record::{AuditRecord, GENESIS, SCHEMA_VERSION};
use crate::fs::{Component, RootDir, RootDirError};

/// Where `serve` and `mcp` write receipts unless told otherwise.
pub const DEFAULT_PATH: &str = "/var/log/tono/audit.jsonl";
/// The size past which the log file is rotated.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The longest record line read back when a log is reopened.
const MAX_LINE: u64 = 1024 * 1024;

/// Why the audit log could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The path has no folder or no valid file name.
    #[error("the audit log path {0} must be absolute, with a plain file name")]
    BadPath(PathBuf),
    /// The folder or file is not root's alone, or a syscall failed on it.
    #[error("audit log: {0}")]
    Dir(#[from] RootDirError),
    /// The folder is open to group or others.
    #[error("the audit log folder {path} has mode {mode:04o}; it must be root's alone (0700)")]
    FolderMode {
        /// The folder.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Reading or writing the file failed.
    #[error("audit log {path}: {what}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The last line of the file is not a record this version can chain to.
    #[error("audit log {path}: the last record cannot be continued ({detail}); run `tono-seal audit verify`")]
    Unchainable {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// An earlier write failed; no record is written after it.
    #[error("the audit log is broken since an earlier write failed: {0}")]
    Broken(String),
}

/// How a worker writes its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The active file (rotated files go beside it).
    pub path: PathBuf,
    /// `fsync` after this many records (1: every record).
    pub fsync_every: u32,
    /// Rotate once the file would grow past this many bytes.
    pub max_bytes: u64,
}

impl AuditConfig {
    /// The defaults for the log at `path`: `fsync` every record, rotate
    /// at [`DEFAULT_MAX_BYTES`].
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            fsync_every: 1,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

struct Active {
    file: File,
    inode: u64,
    size: u64,
    /// The last record's `seq` and hash; `None` before the first record.
    last: Option<(u64, String)>,
    unsynced: u32,
    broken: Option<String>,
}

/// An open audit log, shared by every call of a worker.
pub struct AuditLog {
    dir: RootDir,
    name: Component,
    config: AuditConfig,
    active: Mutex<Active>,
    calls: AtomicU64,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditLog({})", self.config.path.display())
    }
}

/// The last whole record of `file` (of `size` bytes), and whether a torn
/// line follows it.
fn read_tail(
    file: &File,
    size: u64,
    path: &Path,
) -> Result<(Option<(u64, String)>, bool), AuditError> {
    let io_err = |what, source| AuditError::Io {
        path: path.to_path_buf(),
        what,
        source,
    };
    if size == 0 {
        return Ok((None, false));
    }
    let mut want = 4096u64.min(size);
    loop {
        let mut buf = vec![0u8; want as usize];
        file.read_exact_at(&mut buf, size - want)
            .map_err(|e| io_err("read", e))?;
        let torn = buf.last() != Some(&b'\n');
        // The end of the last whole line, and the start of that line.
        let end = if torn {
            buf.iter().rposition(|&b| b == b'\n').map(|i| i + 1)
        } else {
            Some(buf.len())
        };
        if let Some(end) = end {
            let body = &buf[..end - 1];
            if let Some(start) = body.iter().rposition(|&b| b == b'\n') {
                let line = &body[start + 1..];
                return chained(line, path).map(|last| (Some(last), torn));
            }
        }
        if want == size {
            // The file's first line is (part of) the last whole line.
            return match end {
                Some(end) => chained(&buf[..end - 1], path).map(|last| (Some(last), torn)),
                None => Ok((None, torn)),
            };
        }
        if want >= MAX_LINE {
            return Err(AuditError::Unchainable {
                path: path.to_path_buf(),
                detail: format!("no line end in its last {MAX_LINE} bytes"),
            });
        }
        want = (want * 4).min(size);
    }
}

/// The `seq` and hash of a record line to chain to.
fn chained(line: &[u8], path: &Path) -> Result<(u64, String), AuditError> {
    let (seq, _) = seq_and_prev(line).map_err(|detail| AuditError::Unchainable {
        path: path.to_path_buf(),
        detail,
    })?;
    Ok((seq, line_hash(line)))
}

impl AuditLog {
    /// Opens (or starts) the log of `config`, continuing its chain.
    pub fn open(config: AuditConfig) -> Result<Self, AuditError> {
        let bad = || AuditError::BadPath(config.path.clone());
        let folder = config
            .path
            .parent()
            .filter(|p| p.is_absolute())
            .ok_or_else(bad)?;
        let name = config
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| Component::parse(n).ok())
            .ok_or_else(bad)?;
        // An existing folder keeps its mode, and must be closed already; a
        // missing one is made 0700.
        let dir = match RootDir::open(folder, None) {
            Ok(dir) => dir,
            Err(e) if e.errno() == Some(libc::ENOENT) => RootDir::open(folder, Some(0o700))?,
            Err(e) => return Err(e.into()),
        };
        let mode = dir.mode()?;
        if mode & 0o077 != 0 {
            return Err(AuditError::FolderMode {
                path: folder.to_path_buf(),
                mode,
            });
        }
        let _lock = dir.lock()?;
        let active = Self::open_active(&dir, &name, &config.path)?;
        let log = Self {
            dir,
            name,
            config,
            active: Mutex::new(active),
            calls: AtomicU64::new(0),
        };
        Ok(log)
    }

    /// Opens the active file under the folder lock: keeps a torn one as a
    /// rotated file, and finds the last record to chain to (in the newest
    /// rotated file when the active one is new).
    fn open_active(dir: &RootDir, name: &Component, path: &Path) -> Result<Active, AuditError> {
        let io_err = |what, source| AuditError::Io {
            path: path.to_path_buf(),
            what,
            source,
        };
        let mut file = dir.open_append(name, 0o600)?;
        let mut size = file.metadata().map_err(|e| io_err("stat", e))?.len();
        let (mut last, torn) = read_tail(&file, size, path)?;
        if torn {
            // Kept as it is, for `audit verify` to report; the chain goes
            // on in a new file from the last whole record.
            Self::rotate(dir, name)?;
            file = dir.open_append(name, 0o600)?;
            size = file.metadata().map_err(|e| io_err("stat", e))?.len();
        }
        if size == 0 && last.is_none() {
            last = Self::last_of_newest_rotated(dir, name, path)?;
        }
        let inode = file.metadata().map_err(|e| io_err("stat", e))?.ino();
        Ok(Active {
            file,
            inode,
            size,
            last,
            unsynced: 0,
            broken: None,
        })
    }

    fn last_of_newest_rotated(
        dir: &RootDir,
        name: &Component,
        path: &Path,
    ) -> Result<Option<(u64, String)>, AuditError> {
        let newest = dir
            .names()?
            .into_iter()
            .filter_map(|n| rotated_number(name.as_str(), &n).map(|k| (k, n)))
            .max();
        let Some((_, rotated)) = newest else {
            return Ok(None);
        };
        let component = Component::parse(&rotated)?;
        let file = dir.open_append(&component, 0o600)?;
        let size = file
            .metadata()
            .map_err(|e| AuditError::Io {
                path: path.to_path_buf(),
                what: "stat",
                source: e,
            })?
            .len();
        Ok(read_tail(&file, size, &dir.entry_path(&component))?.0)
    }

    /// Renames the active file to the next free `NAME.NNNNNN`.
    fn rotate(dir: &RootDir, name: &Component) -> Result<(), AuditError> {
        let next = dir
            .names()?
            .iter()
            .filter_map(|n| rotated_number(name.as_str(), n))
            .max()
            .unwrap_or(0)
            + 1;
        let to = Component::parse(&rotated_name(name.as_str(), next))?;
        dir.rename_noreplace(name, &to)?;
        Ok(())
    }

    /// The log's active file.
    pub fn path(&self) -> &Path {
        &self.config.path
    }

    /// A new call id of this worker: `<pid>-<n>`.
    pub fn next_call_id(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}-{n}", std::process::id())
    }

    /// Fails once a write has failed: no call should run that cannot get
    /// its receipt.
    pub fn check(&self) -> Result<(), AuditError> {
        let active = self
            .active
            .lock()
            .map_err(|_| AuditError::Broken("a writer panicked".into()))?;
        match &active.broken {
            Some(why) => Err(AuditError::Broken(why.clone())),
            None => Ok(()),
        }
    }

    /// Appends `record`, setting its chain fields (`v`, `seq`, `time`,
    /// `worker_pid`, `prev`, and `call_id` if empty). Returns its `seq`.
    pub fn append(&self, mut record: AuditRecord) -> Result<u64, AuditError> {
        let mut active = self
            .active
            .lock()
            .map_err(|_| AuditError::Broken("a writer panicked".into()))?;
        if let Some(why) = &active.broken {
            return Err(AuditError::Broken(why.clone()));
        }
        let _lock = self.dir.lock()?;
        let result = self.append_locked(&mut active, &mut record);
        if let Err(e) = &result {
            active.broken = Some(e.to_string());
        }
        result
    }

    fn append_locked(
        &self,
        active: &mut Active,
        record: &mut AuditRecord,
    ) -> Result<u64, AuditError> {
        let path = &self.config.path;
        let io_err = |what, source| AuditError::Io {
            path: path.clone(),
            what,
            source,
        };
        // Another worker may have written or rotated since.
        if self.dir.inode_of(&self.name)? != Some(active.inode) {
            *active = Self::open_active(&self.dir, &self.name, path)?;
        } else {
            let size = active.file.metadata().map_err(|e| io_err("stat", e))?.len();
            if size != active.size {
                let (last, torn) = read_tail(&active.file, size, path)?;
                if torn {
                    *active = Self::open_active(&self.dir, &self.name, path)?;
                } else {
                    active.size = size;
                    active.last = last;
                }
            }
        }
        record.v = SCHEMA_VERSION;
        record.seq = active.last.as_ref().map_or(1, |(seq, _)| seq + 1);
        record.prev = active
            .last
            .as_ref()
            .map_or_else(|| GENESIS.to_owned(), |(_, hash)| hash.clone());
        record.time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        record.worker_pid = std::process::id();
        if record.call_id.is_empty() {
            record.call_id = self.next_call_id();
        }
        let mut line =
            serde_json::to_vec(&*record).map_err(|e| io_err("encode", io::Error::other(e)))?;
        let hash = line_hash(&line);
        line.push(b'\n');
        if active.size > 0 && active.size + line.len() as u64 > self.config.max_bytes {
            active.file.sync_data().map_err(|e| io_err("fsync", e))?;
            Self::rotate(&self.dir, &self.name)?;
            let last = active.last.take();
            *active = Self::open_active(&self.dir, &self.name, path)?;
            active.last = last;
        }
        // One write of the whole line: O_APPEND places it at the end.
        let written = active.file.write(&line).map_err(|e| io_err("write", e))?;
        if written != line.len() {
            return Err(io_err(
                "write",
                io::Error::other(format!("short write: {written} of {} bytes", line.len())),
            ));
        }
        active.size += line.len() as u64;
        active.unsynced += 1;
        if active.unsynced >= self.config.fsync_every.max(1) {
            active.file.sync_data().map_err(|e| io_err("fsync", e))?;
            active.unsynced = 0;
        }
        active.last = Some((record.seq, hash));
        // The same receipt as an event with fields (not a formatted
        // string), for a collector behind `tracing`.
        tracing::info!(
            target: "tono_seal::audit",
            seq = record.seq,
            call_id = %record.call_id,
            kind = ?record.kind,
            user = record.user.as_deref(),
            uid = record.uid,
            tool = record.tool.as_deref(),
            verdict = %record.verdict,
            reason_code = %record.reason_code,
            secrets = ?record.secrets_granted,
            exit_code = record.exit_code,
            signal = record.signal,
            timed_out = record.timed_out,
            duration_us = record.duration_us,
            launch_error = record.launch_error.as_deref(),
            "receipt"
        );
        Ok(record.seq)
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if let Ok(active) = self.active.get_mut() {
            let _ = active.file.flush();
            let _ = active.file.sync_data();
        }
    }
}
