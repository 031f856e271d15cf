//! Turn folders: made by root where only root can make entries, handed to
//! the turn's user by fd, and emptied by that user before root removes the
//! empty entry.
//!
//! Guarantees:
//! - the base (default [`DEFAULT_TURN_BASE`]) is root's, mode 0711, and so
//!   is every ancestor ([`RootDir`]): a user can enter its own folder but
//!   can neither list the base nor create, rename or remove entries in it;
//! - a folder is named by a validated [`TurnId`] (one plain component), is
//!   made with `mkdirat`, opened `O_NOFOLLOW`, and handed over with
//!   `fchown`/`fchmod` (0700) on that fd — never by path;
//! - the handover is recorded in the worker state *before* the `fchown`, and
//!   whether a folder was handed over is read only from there;
//! - removal deletes the contents as the user through the launcher, then
//!   root removes the emptied entry by name in its own base
//!   (`unlinkat(AT_REMOVEDIR)`); if the user raced new entries in, the
//!   contents are deleted as the user again.
#![forbid(unsafe_code)]

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Gid, Uid};

use super::state::{Handover, StateError, WorkerState};
use crate::drop::launch_as::launch_as;
use crate::drop::spawn::Output;
use crate::drop::Launcher;
use crate::drop::RunOptions;
use crate::fs::root_dir::{Component, RootDir, RootDirError};
use crate::launch::plan::{Action, FileOp};
use crate::launch::report::{LaunchError, StatusReport};
use crate::user::{TargetUser, UserSpec};

/// Where turn folders are made by default.
pub const DEFAULT_TURN_BASE: &str = "/var/lib/tono/turns";
/// The base's mode: root may do all; others may only pass through.
pub const TURN_BASE_MODE: u32 = 0o711;
/// How often removal empties a folder as the user before giving up.
pub const REMOVE_ATTEMPTS: usize = 5;

/// Why a turn folder could not be made, handed over or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The base, the name or a file operation.
    #[error(transparent)]
    Dir(#[from] RootDirError),
    /// The worker state.
    #[error(transparent)]
    State(#[from] StateError),
    /// The turn already has a folder or a handover.
    #[error("turn {0} already has a folder")]
    Exists(String),
    /// The folder does not exist.
    #[error("turn {0} has no folder")]
    Missing(String),
    /// The handed-over user no longer exists as recorded.
    #[error("turn {turn} was handed to uid {uid}, who is no longer that user: {reason}")]
    UserGone {
        /// The turn.
        turn: String,
        /// The recorded uid.
        uid: u32,
        /// What is wrong.
        reason: String,
    },
    /// The user is root or in group 0.
    #[error("refusing to hand a turn folder to uid {0}")]
    RootUser(u32),
    /// Emptying the folder as the user failed.
    #[error("emptying turn {turn} as its user failed: {error}")]
    Clear {
        /// The turn.
        turn: String,
        /// What the launcher said.
        error: LaunchError,
    },
    /// The folder kept filling up while it was emptied.
    #[error("turn {0} was not empty after {REMOVE_ATTEMPTS} clean-ups as its user")]
    StillNotEmpty(String),
}

/// A turn's id: one plain name ([`Component`] rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnId(Component);

impl TurnId {
    /// Checks `id`: `../x`, `a/b`, `.`, empty, over 128 bytes or with NUL
    /// are refused.
    pub fn parse(id: &str) -> Result<Self, TurnError> {
        Ok(Self(Component::parse(id)?))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// A folder handed to a turn's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnDir {
    /// The turn.
    pub id: TurnId,
    /// Where the user finds it (root never opens it by this path).
    pub path: PathBuf,
    /// The owner.
    pub handover: Handover,
}

/// The root-owned folder that holds turn folders.
#[derive(Debug)]
pub struct TurnBase {
    dir: RootDir,
}

impl TurnBase {
    /// Opens (creating) the base at `path` and sets its mode to exactly
    /// 0711 through its fd.
    pub fn open(path: &Path) -> Result<Self, TurnError> {
        Ok(Self {
            dir: RootDir::open(path, Some(TURN_BASE_MODE))?,
        })
    }

    /// The base folder.
    pub fn dir(&self) -> &RootDir {
        &self.dir
    }

    /// Makes turn `id`'s folder and hands it to `user`.
    pub fn create(
        &self,
        state: &WorkerState,
        id: &TurnId,
        user: &TargetUser,
    ) -> Result<TurnDir, TurnError> {
        if user.uid == 0 || user.gid == 0 {
            return Err(TurnError::RootUser(user.uid));
        }
        let handover = Handover {
            uid: user.uid,
            gid: user.gid,
        };
        let fd = self
            .dir
            .create_dir(&id.0, 0o700)
            .map_err(|e| match e.errno() {
                Some(libc::EEXIST) => TurnError::Exists(id.as_str().into()),
                _ => e.into(),
            })?;
        // Record first: a crash after this leaves a folder the state says
        // was handed over, which removal empties as the user.
        let recorded = state.update(|d| {
            if d.handovers.contains_key(id.as_str()) {
                false
            } else {
                d.handovers.insert(id.as_str().to_owned(), handover);
                true
            }
        });
        match recorded {
            Ok(true) => {}
            other => {
                let _ = self.dir.remove_dir(&id.0);
                return Err(match other {
                    Err(e) => e.into(),
                    _ => TurnError::Exists(id.as_str().into()),
                });
            }
        }
        let path = self.dir.entry_path(&id.0);
        let handed = nix::unistd::fchown(
            fd.as_raw_fd(),
            Some(Uid::from_raw(user.uid)),
            Some(Gid::from_raw(user.gid)),
        )
        .and_then(|()| {
            nix::sys::stat::fchmod(
                fd.as_raw_fd(),
                nix::sys::stat::Mode::from_bits_truncate(0o700),
            )
        });
        if let Err(e) = handed {
            return Err(RootDirError::Io {
                what: "hand over",
                path,
                source: std::io::Error::from_raw_os_error(e as i32),
            }
            .into());
        }
        Ok(TurnDir {
            id: id.clone(),
            path,
            handover,
        })
    }

    /// Empties turn `id`'s folder as its user and removes it.
    pub async fn remove(
        &self,
        state: &WorkerState,
        launcher: &Launcher,
        id: &TurnId,
    ) -> Result<(), TurnError> {
        let Some(handover) = state.handover(id.as_str())? else {
            // Never handed over: root's own empty folder.
            return self.dir.remove_dir(&id.0).map_err(|e| match e.errno() {
                Some(libc::ENOENT) => TurnError::Missing(id.as_str().into()),
                _ => e.into(),
            });
        };
        let gone = |reason: String| TurnError::UserGone {
            turn: id.as_str().into(),
            uid: handover.uid,
            reason,
        };
        let user =
            TargetUser::lookup(&UserSpec::Uid(handover.uid)).map_err(|e| gone(e.to_string()))?;
        if user.gid != handover.gid {
            return Err(gone(format!("its gid is now {}", user.gid)));
        }
        let path = self.dir.entry_path(&id.0);
        for _ in 0..REMOVE_ATTEMPTS {
            self.clear_as_user(launcher, &user, &path, id).await?;
            match self.dir.remove_dir(&id.0) {
                Ok(()) => {
                    state.update(|d| d.handovers.remove(id.as_str()))?;
                    return Ok(());
                }
                Err(e) if e.errno() == Some(libc::ENOTEMPTY) => continue,
                Err(e) if e.errno() == Some(libc::ENOENT) => {
                    state.update(|d| d.handovers.remove(id.as_str()))?;
                    return Err(TurnError::Missing(id.as_str().into()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(TurnError::StillNotEmpty(id.as_str().into()))
    }

    async fn clear_as_user(
        &self,
        launcher: &Launcher,
        user: &TargetUser,
        path: &Path,
        id: &TurnId,
    ) -> Result<(), TurnError> {
        let options = RunOptions {
            output: Output::Capture(64 * 1024),
            ..RunOptions::default()
        };
        let action = Action::File {
            op: FileOp::Clear {
                path: path.to_path_buf(),
            },
        };
        let failed = |error| TurnError::Clear {
            turn: id.as_str().into(),
            error,
        };
        let (done, _) = launch_as(
            launcher,
            user,
            action,
            &options,
            Duration::from_secs(120),
            None,
        )
        .await
        .map_err(failed)?;
        match done.report {
            StatusReport::Done(_) => Ok(()),
            StatusReport::Failed(e) => Err(failed(e)),
            other => Err(failed(LaunchError::new(
                crate::launch::report::Stage::Launcher,
                "no_result",
                format!("the launcher ended without a result: {other:?}"),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_ids_are_one_plain_name() {
        let long = "x".repeat(300);
        for bad in ["../x", "a/b", ".", "..", "", long.as_str(), "a\0b", "/abs"] {
            assert!(TurnId::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            TurnId::parse("turn-2026-12-02_a1").unwrap().as_str(),
            "turn-2026-12-02_a1"
        );
    }
}
