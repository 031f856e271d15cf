//! The append-only audit log a worker writes: one line a record, each
//! chained to the one before it.
//!
//! Guarantees:
//! - the log's folder is root's alone (mode `0700`, every ancestor root's
//!   and closed to group and others, made through [`RootDir`]); the file is
//!   a regular, root-owned `0600` file opened `O_APPEND` without following
//!   a link — a symlink, a FIFO or a foreign file where it goes is refused,
//!   never written;
//! - a call gets two records: [`AuditLog::begin`] writes what is about to
//!   run and `fsync`s it before returning (always, whatever
//!   [`AuditConfig::fsync_every`]), so a call whose begin record could not
//!   be written never starts; [`AuditLog::end`] writes how it ended;
//!   [`AuditLog::append`] writes one whole record of something already
//!   done;
//! - a record is one `write` of its whole line, then `fsync` (every record,
//!   or every [`AuditConfig::fsync_every`]) by group commit: the writer
//!   that finds its record not yet durable takes the one sync lock and
//!   `fsync`s for every record written before it began, so calls in flight
//!   share one `fsync` — and no record is counted durable
//!   ([`AuditLog::is_durable`]) before an `fsync` that began after its
//!   write has returned; space is held ahead of it: a
//!   begin or whole record is written only once `fallocate` has reserved,
//!   past the end of the file, room for it, for the end record of every
//!   call this worker has begun and not ended (each bounded by its begin
//!   record, [`end_bound`]), and for one record of the failure
//!   ([`FAILURE_RESERVE`]); when that reservation fails (a full disk) the
//!   begin is refused and the refusal recorded in the reserve, and from
//!   then on no call begins ([`AuditLog::check`]) while the ends of calls
//!   in flight still land in theirs. A write that fails or is short is cut
//!   back to the record boundary before it (`ftruncate`): no torn line is
//!   left, and every later record fails, so the worker refuses calls it
//!   could not give a receipt for. The reserve is this worker's: workers
//!   sharing one log on a full disk can take each other's;
//! - no record is longer than [`MAX_RECORD`], so every record can be read
//!   back and chained to: a call whose end record could be longer (too
//!   many secret names) is refused ([`AuditError::TooLarge`]) and its
//!   refusal recorded, and a whole record longer is written without its
//!   names (the secret names and the tool's, which a caller chooses);
//! - appends are serialised across workers by a lock on the folder, and
//!   each one chains to the file's real last record (re-read when another
//!   worker wrote or rotated since), so workers that share a log, or one
//!   that restarts, continue one valid chain;
//! - a file over [`AuditConfig::max_bytes`] is renamed to `NAME.NNNNNN`
//!   and a new one started whose first record chains to the last of the
//!   old — only once the new file's room is held (made as `NAME.next`
//!   while the old file's reserve still holds the ends in flight; when it
//!   cannot be, the log is not rotated, the begin is refused and those
//!   ends land in the old file); a torn last line left by a killed worker is kept as it is, in a
//!   rotated file, and the chain goes on from the last whole record.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::chain::{line_hash, rotated_name, rotated_number, seq_and_prev};
use super::record::{AuditRecord, Phase, GENESIS, SCHEMA_VERSION};
use crate::fs::{Component, RootDir, RootDirError};

/// Where `serve` and `mcp` write receipts unless told otherwise.
pub const DEFAULT_PATH: &str = "/var/log/tono/audit.jsonl";
/// The size past which the log file is rotated.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The longest record line read back when a log is reopened.
const MAX_LINE: u64 = 1024 * 1024;
/// The longest record line written (well within the 1 MiB read back, so every
/// record can be read back and chained to): a begin record whose end could
/// be longer is refused ([`AuditError::TooLarge`]), and a whole record
/// longer is written without its names.
pub const MAX_RECORD: u64 = 256 * 1024;
/// Bytes held past the end of the file for the record of the failure
/// itself (the refused call's, or a whole record of something done).
pub const FAILURE_RESERVE: u64 = 4096;
/// The longest launch error code an end record's reserve is made for.
const MAX_CODE: usize = 128;

/// The most bytes the end record of a call begun with `begin` takes (its
/// line and newline): the begin record with every field of the outcome
/// at its longest.
pub fn end_bound(begin: &AuditRecord) -> u64 {
    let mut end = begin.clone();
    end.phase = Phase::End;
    end.seq = u64::MAX;
    end.begin_seq = Some(u64::MAX);
    end.exit_code = Some(i32::MIN);
    end.signal = Some(i32::MIN);
    end.timed_out = false;
    end.duration_us = u64::MAX;
    end.pids_max_hits = Some(u64::MAX);
    end.oom_kills = Some(u64::MAX);
    end.memory_peak = Some(u64::MAX);
    end.pids_peak = Some(u64::MAX);
    end.masks = Some(
        begin
            .secrets_granted
            .iter()
            .map(|n| (n.clone(), u64::MAX))
            .collect(),
    );
    end.secrets_as_files = begin.secrets_granted.clone();
    end.stdout_bytes = u64::MAX;
    end.stderr_bytes = u64::MAX;
    end.launch_error = Some("x".repeat(MAX_CODE));
    end.verdict = "refuse".into();
    end.network = "proxy".into();
    end.view = "private".into();
    end.time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    end.worker_pid = u32::MAX;
    // Anything a JSON encoding could add, and the newline.
    serde_json::to_vec(&end).map_or(MAX_LINE, |l| l.len() as u64) + 64
}

/// A call whose begin record is written: what its end record needs.
#[derive(Debug)]
#[must_use = "a begun call's end record is written with AuditLog::end"]
pub struct Begun {
    /// The begin record's `seq`.
    pub seq: u64,
    /// The call's id, the same in both records.
    pub call_id: String,
    /// The bytes held for its end record.
    bound: u64,
    /// Its begin record's place among the records this log has written.
    ticket: u64,
}

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
    /// No room could be reserved for a record and the ends of the calls in
    /// flight: no call begins.
    #[error("audit log {path}: cannot hold room for the next record, the ends of the calls in flight and the failure reserve (fallocate: {source}); no call begins until the worker restarts with room")]
    NoRoom {
        /// The file.
        path: PathBuf,
        /// What `fallocate` said.
        source: io::Error,
    },
    /// The log ran out of room earlier (see [`AuditError::NoRoom`]).
    #[error("the audit log is full since: {0}")]
    Full(String),
    /// The call's receipt would be longer than a record may be: the call
    /// is refused (its refusal recorded without its names); the log goes
    /// on.
    #[error("the call's receipt would take {bytes} bytes, more than the {max} a record may; it asks for too many secret names")]
    TooLarge {
        /// The bound of its end record.
        bytes: u64,
        /// [`MAX_RECORD`].
        max: u64,
    },
}

impl AuditError {
    /// A stable code for the refusal of a call this error stopped.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoRoom { .. } | Self::Full(_) => "audit_full",
            Self::TooLarge { .. } => "receipt_too_large",
            _ => "audit_unavailable",
        }
    }
}

/// Why a write did not happen.
enum WriteError {
    /// The reservation ahead of it failed: nothing was written.
    NoRoom(AuditError),
    /// Anything else (the file is as it was before the write).
    Other(AuditError),
}

impl From<AuditError> for WriteError {
    fn from(e: AuditError) -> Self {
        Self::Other(e)
    }
}

impl From<RootDirError> for WriteError {
    fn from(e: RootDirError) -> Self {
        Self::Other(e.into())
    }
}

/// How a record's room is found.
#[derive(Clone, Copy)]
enum Room {
    /// Reserve the line, the ends in flight, `extra` more and the failure
    /// reserve before writing.
    Grow { extra: u64 },
    /// Write into the reserve held already.
    Reserved,
}

/// When a record is made durable.
#[derive(Clone, Copy)]
enum Commit {
    /// `fsync` here, under the locks (a record of a failure).
    Inline,
    /// The caller waits, once the locks are let go, for an `fsync` that
    /// covers it ([`AuditLog::durable`]).
    Group,
    /// As `Group` once [`AuditConfig::fsync_every`] records are not yet
    /// durable, else not waited for.
    Batched,
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
    /// Shared with the group commit, which `fsync`s it outside the state's
    /// lock.
    file: Arc<File>,
    inode: u64,
    size: u64,
    /// The last record's `seq` and hash; `None` before the first record.
    last: Option<(u64, String)>,
}

/// What a worker knows of its log, across reopened files.
struct State {
    active: Active,
    /// Bytes held for the end records of calls begun and not ended.
    pending_ends: u64,
    /// Set when a write failed: nothing more is written.
    broken: Option<String>,
    /// Set when a reservation failed: no call begins.
    full: Option<String>,
    /// Records this worker has written to the log (whole, in any file):
    /// each record's ticket is the count once it is written.
    written: u64,
}

/// An open audit log, shared by every call of a worker.
pub struct AuditLog {
    dir: RootDir,
    name: Component,
    config: AuditConfig,
    active: Mutex<State>,
    calls: AtomicU64,
    /// The group commit's lock, taken before the state's (never while it is
    /// held); `Some` once an `fsync` failed: nothing is durable after it.
    sync: Mutex<Option<String>>,
    /// Every record with a ticket up to this one is durable.
    synced: AtomicU64,
    /// `fsync`s made, for the benches and tests.
    fsyncs: AtomicU64,
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
        reserve(&active.file, active.size, FAILURE_RESERVE).map_err(|source| {
            AuditError::NoRoom {
                path: config.path.clone(),
                source,
            }
        })?;
        let log = Self {
            dir,
            name,
            config,
            active: Mutex::new(State {
                active,
                pending_ends: 0,
                broken: None,
                full: None,
                written: 0,
            }),
            calls: AtomicU64::new(0),
            sync: Mutex::new(None),
            synced: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
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
            file: Arc::new(file),
            inode,
            size,
            last,
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

    /// Fails once a write has failed, or the log ran out of room: no call
    /// should begin that cannot get its receipt.
    pub fn check(&self) -> Result<(), AuditError> {
        self.writable_state().map(drop)
    }

    /// The writer's state, unless a write has failed or the log ran out of
    /// room (what a new record needs).
    fn writable_state(&self) -> Result<std::sync::MutexGuard<'_, State>, AuditError> {
        let state = self.state()?;
        if let Some(why) = &state.broken {
            return Err(AuditError::Broken(why.clone()));
        }
        if let Some(why) = &state.full {
            return Err(AuditError::Full(why.clone()));
        }
        Ok(state)
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, AuditError> {
        self.active
            .lock()
            .map_err(|_| AuditError::Broken("a writer panicked".into()))
    }

    /// Writes the begin record of a call about to start (`phase` set to
    /// `begin`) and `fsync`s it, with room held for its end record; the
    /// call may start only on `Ok`. When no room can be held, the refusal
    /// is recorded (a whole record of this call, `reason_code`
    /// `audit_unavailable`, `launch_error` `audit_full`) in the reserve
    /// and no later call begins.
    pub fn begin(&self, record: AuditRecord) -> Result<Begun, AuditError> {
        let (begun, wait) = self.begin_written(record)?;
        // Not durable: the call does not start (the log is broken).
        self.durable(wait)?;
        begun
    }

    /// [`AuditLog::begin`] up to the write: the begun call (or its
    /// refusal, recorded) and the ticket to wait for, once the locks are
    /// let go.
    #[allow(clippy::type_complexity)]
    fn begin_written(
        &self,
        mut record: AuditRecord,
    ) -> Result<(Result<Begun, AuditError>, u64), AuditError> {
        let mut state = self.writable_state()?;
        let _lock = self.dir.lock()?;
        record.phase = Phase::Begin;
        record.begin_seq = None;
        let bound = end_bound(&record);
        if bound > MAX_RECORD {
            // Refused, and recorded (a whole record, without the names
            // that made it too long); the log goes on.
            let e = AuditError::TooLarge {
                bytes: bound,
                max: MAX_RECORD,
            };
            let mut refusal = record;
            refusal.phase = Phase::Whole;
            refusal.verdict = "refuse".into();
            refusal.reason_code = "audit_unavailable".into();
            refusal.launch_error = Some(e.code().into());
            fit(&mut refusal, MAX_RECORD);
            return match self.write_locked(
                &mut state,
                &mut refusal,
                Room::Grow { extra: 0 },
                Commit::Group,
            ) {
                Ok((_, ticket)) => Ok((Err(e), ticket)),
                Err(WriteError::NoRoom(full)) => {
                    state.full = Some(full.to_string());
                    self.write_failure_locked(&mut state, refusal);
                    Err(full)
                }
                Err(WriteError::Other(broken)) => {
                    state.broken = Some(broken.to_string());
                    Err(broken)
                }
            };
        }
        match self.write_locked(
            &mut state,
            &mut record,
            Room::Grow { extra: bound },
            Commit::Group,
        ) {
            Ok((seq, ticket)) => {
                state.pending_ends += bound;
                Ok((
                    Ok(Begun {
                        seq,
                        call_id: record.call_id,
                        bound,
                        ticket,
                    }),
                    ticket,
                ))
            }
            Err(WriteError::NoRoom(e)) => {
                state.full = Some(e.to_string());
                let mut refusal = record;
                refusal.phase = Phase::Whole;
                refusal.verdict = "refuse".into();
                refusal.reason_code = "audit_unavailable".into();
                refusal.launch_error = Some(e.code().into());
                self.write_failure_locked(&mut state, refusal);
                Err(e)
            }
            Err(WriteError::Other(e)) => {
                state.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Writes the end record of `begun` (`phase` `end`, its `begin_seq`
    /// and `call_id`) into the room held for it; also once the log is
    /// full.
    pub fn end(&self, begun: Begun, record: AuditRecord) -> Result<u64, AuditError> {
        let (seq, wait) = self.end_written(begun, record)?;
        self.durable(wait)?;
        Ok(seq)
    }

    /// [`AuditLog::end`] up to the write: its `seq` and the ticket to wait
    /// for (0: none).
    fn end_written(&self, begun: Begun, mut record: AuditRecord) -> Result<(u64, u64), AuditError> {
        let mut state = self.state()?;
        state.pending_ends = state.pending_ends.saturating_sub(begun.bound);
        if let Some(why) = &state.broken {
            return Err(AuditError::Broken(why.clone()));
        }
        let _lock = self.dir.lock()?;
        record.phase = Phase::End;
        record.begin_seq = Some(begun.seq);
        record.call_id = begun.call_id;
        if let Some(code) = &mut record.launch_error {
            // Within the room held for it; a code is a short word (cut at
            // a character's boundary, never inside one).
            let mut at = MAX_CODE.min(code.len());
            while !code.is_char_boundary(at) {
                at -= 1;
            }
            code.truncate(at);
        }
        match self.write_locked(&mut state, &mut record, Room::Reserved, Commit::Batched) {
            Ok(written) => Ok(written),
            Err(WriteError::NoRoom(e) | WriteError::Other(e)) => {
                state.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Appends one whole record of something already done (`phase`
    /// `whole`), setting its chain fields (`v`, `seq`, `time`,
    /// `worker_pid`, `prev`, and `call_id` if empty). Returns its `seq`.
    /// When no room can be held for it, it is written into the failure
    /// reserve (it happened) and no later call begins.
    pub fn append(&self, record: AuditRecord) -> Result<u64, AuditError> {
        let (seq, wait) = self.append_written(record)?;
        self.durable(wait)?;
        Ok(seq)
    }

    /// [`AuditLog::append`] up to the write: its `seq` and the ticket to
    /// wait for (0: none).
    fn append_written(&self, mut record: AuditRecord) -> Result<(u64, u64), AuditError> {
        let mut state = self.writable_state()?;
        let _lock = self.dir.lock()?;
        record.phase = Phase::Whole;
        record.begin_seq = None;
        fit(&mut record, MAX_RECORD);
        match self.write_locked(
            &mut state,
            &mut record,
            Room::Grow { extra: 0 },
            Commit::Batched,
        ) {
            Ok(written) => Ok(written),
            Err(WriteError::NoRoom(e)) => {
                state.full = Some(e.to_string());
                self.write_failure_locked(&mut state, record)
                    .map(|seq| (seq, 0))
                    .ok_or_else(|| AuditError::Broken(e.to_string()))
            }
            Err(WriteError::Other(e)) => {
                state.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Writes the record of a failure into the failure reserve, made to
    /// fit it; a failed write breaks the log.
    fn write_failure_locked(&self, state: &mut State, mut record: AuditRecord) -> Option<u64> {
        fit(&mut record, FAILURE_RESERVE);
        match self.write_locked(state, &mut record, Room::Reserved, Commit::Inline) {
            Ok((seq, _)) => Some(seq),
            Err(WriteError::NoRoom(e) | WriteError::Other(e)) => {
                state.broken = Some(e.to_string());
                None
            }
        }
    }

    /// Writes `record` (the caller holds the state and the folder lock);
    /// its `seq` and the ticket to wait for with [`AuditLog::durable`]
    /// once the locks are let go (0: none).
    fn write_locked(
        &self,
        state: &mut State,
        record: &mut AuditRecord,
        room: Room,
        commit: Commit,
    ) -> Result<(u64, u64), WriteError> {
        let path = &self.config.path;
        let io_err = |what, source| AuditError::Io {
            path: path.clone(),
            what,
            source,
        };
        let written = state.written;
        let active = &mut state.active;
        // Another worker may have written or rotated since.
        if self.dir.inode_of(&self.name)? != Some(active.inode) {
            self.sync_before_leaving(active, written)?;
            *active = Self::open_active(&self.dir, &self.name, path)?;
        } else {
            let size = active.file.metadata().map_err(|e| io_err("stat", e))?.len();
            if size != active.size {
                let (last, torn) = read_tail(&active.file, size, path)?;
                if torn {
                    self.sync_before_leaving(active, written)?;
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
        let held = state.pending_ends + FAILURE_RESERVE;
        if let Room::Grow { extra } = room {
            let want = line.len() as u64 + extra + held;
            let no_room = |source| {
                WriteError::NoRoom(AuditError::NoRoom {
                    path: path.clone(),
                    source,
                })
            };
            if active.size > 0 && active.size + line.len() as u64 > self.config.max_bytes {
                self.sync_before_leaving(active, written)?;
                // The next file is made and its room held under another
                // name first, while the old file's reserve still holds the
                // ends of the calls in flight: when it cannot be held, the
                // log is not rotated and those ends (and the record of the
                // failure) still land in the old file's reserve.
                let next = Component::parse(&format!("{}.next", self.name.as_str()))
                    .map_err(AuditError::from)?;
                let fresh = self.dir.open_append(&next, 0o600)?;
                let fresh_size = fresh.metadata().map_err(|e| io_err("stat", e))?.len();
                if fresh_size != 0 {
                    return Err(WriteError::Other(AuditError::Unchainable {
                        path: self.dir.entry_path(&next),
                        detail: format!("the next file holds {fresh_size} bytes already"),
                    }));
                }
                if let Err(e) = reserve(&fresh, 0, want) {
                    // What a failed fallocate held is given back.
                    let _ = fresh.set_len(0);
                    return Err(no_room(e));
                }
                drop(fresh);
                active
                    .file
                    .set_len(active.size)
                    .map_err(|e| io_err("trim the reserve", e))?;
                Self::rotate(&self.dir, &self.name)?;
                self.dir.rename_noreplace(&next, &self.name)?;
                let last = active.last.take();
                *active = Self::open_active(&self.dir, &self.name, path)?;
                active.last = last;
            }
            reserve(&active.file, active.size, want).map_err(no_room)?;
        }
        // One write of the whole line: O_APPEND places it at the end.
        let before = active.size;
        let wrote = (&*active.file).write(&line);
        let failed = match wrote {
            Ok(n) if n == line.len() => None,
            Ok(n) => Some(io::Error::other(format!(
                "short write: {n} of {} bytes",
                line.len()
            ))),
            Err(e) => Some(e),
        };
        if let Some(e) = failed {
            // No torn line: the file is cut back to the record boundary
            // before this write, and its reserve held again if it can be.
            let cut = active.file.set_len(before);
            let _ = reserve(&active.file, before, held);
            let what = if cut.is_ok() {
                "write (cut back to the last whole record)"
            } else {
                "write (and cutting it back failed: run `tono-seal audit verify`)"
            };
            return Err(WriteError::Other(io_err(what, e)));
        }
        active.size += line.len() as u64;
        let ticket = written + 1;
        let wait = match commit {
            Commit::Inline => {
                active.file.sync_data().map_err(|e| io_err("fsync", e))?;
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                self.synced.fetch_max(ticket, Ordering::AcqRel);
                0
            }
            Commit::Group => ticket,
            Commit::Batched => {
                let behind = ticket - self.synced.load(Ordering::Acquire).min(ticket);
                if behind >= u64::from(self.config.fsync_every.max(1)) {
                    ticket
                } else {
                    0
                }
            }
        };
        active.last = Some((record.seq, hash));
        state.written = ticket;
        // The same receipt as an event with fields (not a formatted
        // string), for a collector behind `tracing`.
        tracing::info!(
            target: "tono_seal::audit",
            seq = record.seq,
            call_id = %record.call_id,
            kind = ?record.kind,
            phase = record.phase.as_str(),
            begin_seq = record.begin_seq,
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
        Ok((record.seq, wait))
    }

    /// Before the active file is let go (rotated, or replaced by one
    /// another worker made): its records not yet durable are `fsync`ed,
    /// so every record up to `written` is durable.
    fn sync_before_leaving(&self, active: &Active, written: u64) -> Result<(), AuditError> {
        if self.synced.load(Ordering::Acquire) >= written {
            return Ok(());
        }
        active.file.sync_data().map_err(|e| AuditError::Io {
            path: self.config.path.clone(),
            what: "fsync",
            source: e,
        })?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.synced.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    /// Returns once the record of `ticket` is durable (0: at once): the
    /// group commit. The first waiter to take the sync lock `fsync`s for
    /// every record written before it did; those who waited behind it find
    /// theirs covered, or `fsync` once for all that came since. A failed
    /// `fsync` breaks the log: no later record counts as durable.
    fn durable(&self, ticket: u64) -> Result<(), AuditError> {
        if ticket == 0 || self.synced.load(Ordering::Acquire) >= ticket {
            return Ok(());
        }
        let mut failed = self
            .sync
            .lock()
            .map_err(|_| AuditError::Broken("a writer panicked".into()))?;
        if let Some(why) = &*failed {
            return Err(AuditError::Broken(why.clone()));
        }
        if self.synced.load(Ordering::Acquire) >= ticket {
            return Ok(());
        }
        // Every record up to `written` is in `file` or in a file let go
        // (and made durable) before it.
        let (file, written) = {
            let state = self.state()?;
            (Arc::clone(&state.active.file), state.written)
        };
        match file.sync_data() {
            Ok(()) => {
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                self.synced.fetch_max(written, Ordering::AcqRel);
                Ok(())
            }
            Err(source) => {
                let e = AuditError::Io {
                    path: self.config.path.clone(),
                    what: "fsync",
                    source,
                };
                *failed = Some(e.to_string());
                if let Ok(mut state) = self.state() {
                    state.broken = Some(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// Whether `begun`'s begin record is durable: an `fsync` that began
    /// after its write returned has succeeded.
    pub fn is_durable(&self, begun: &Begun) -> bool {
        self.synced.load(Ordering::Acquire) >= begun.ticket
    }

    /// Whether an `fsync` of the group commit is running now: a writer
    /// that finds none makes its own at once (a call alone pays no wait
    /// for another thread), one that finds one may wait elsewhere.
    pub fn is_syncing(&self) -> bool {
        matches!(
            self.sync.try_lock(),
            Err(std::sync::TryLockError::WouldBlock)
        )
    }

    /// How many `fsync`s this worker has made of its log.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }
}

/// Makes `record` fit in `max` bytes: when its line (with room for the
/// chain fields) is longer, its names are dropped — they are what a caller
/// can make long (secret names, a tool's name); who and why are kept.
fn fit(record: &mut AuditRecord, max: u64) {
    let fits = |r: &AuditRecord| serde_json::to_vec(r).is_ok_and(|l| (l.len() as u64) + 256 < max);
    if !fits(record) {
        record.secrets_requested.clear();
        record.secrets_granted.clear();
        record.secrets_as_files.clear();
        record.tool = None;
    }
}

/// Holds `len` bytes of `file` from `offset` (its size) without changing
/// its size (`FALLOC_FL_KEEP_SIZE`): a write there needs no new block.
fn reserve(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let off = |n: u64| i64::try_from(n).map_err(io::Error::other);
    nix::fcntl::fallocate(
        file.as_raw_fd(),
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        off(offset)?,
        off(len)?,
    )
    .map_err(io::Error::from)
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if let Ok(state) = self.active.get_mut() {
            let _ = (&*state.active.file).flush();
            let _ = state.active.file.sync_data();
        }
    }
}
