//! The worker's own state: which turn folders were handed to which user,
//! and which provider session belongs to which conversation.
//!
//! Guarantees: the state lives in a root-only folder (mode 0700, every
//! ancestor root's: [`RootDir`]), never in a user's home, where a planted
//! link could turn a root write into an overwrite of any file; every change
//! is a locked read-modify-write with an atomic replace (temp, fsync,
//! rename, fsync), so a crash leaves the old state or the new, never half;
//! whether a folder was handed over is read from here, never learned by
//! looking at its owner or mode.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::env::provider::Provider;
use crate::fs::root_dir::{Component, RootDir, RootDirError};

/// Where the worker keeps its state by default.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/tono/state";
/// The state file's name in that folder.
pub const STATE_FILE: &str = "state.json";
/// The largest state file read.
pub const MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

/// A turn folder given to a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handover {
    /// The user's uid.
    pub uid: u32,
    /// The user's gid.
    pub gid: u32,
}

/// A provider's own session id for a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSession {
    /// The provider.
    pub provider: Provider,
    /// Its session id (for example a Codex session id).
    pub session: String,
}

/// Everything in the state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateData {
    /// Turn id → the user it was handed to.
    #[serde(default)]
    pub handovers: BTreeMap<String, Handover>,
    /// Conversation id → provider session.
    #[serde(default)]
    pub provider_sessions: BTreeMap<String, ProviderSession>,
}

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The folder or file.
    #[error(transparent)]
    Dir(#[from] RootDirError),
    /// The file does not parse.
    #[error("the worker state is corrupt: {0}")]
    Corrupt(String),
}

/// The worker's state folder.
#[derive(Debug)]
pub struct WorkerState {
    dir: RootDir,
    file: Component,
    in_process: Mutex<()>,
}

impl WorkerState {
    /// Opens (creating, 0700) the state folder at `path`.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        Ok(Self {
            dir: RootDir::open(path, Some(0o700))?,
            file: Component::parse(STATE_FILE)?,
            in_process: Mutex::new(()),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &RootDir {
        &self.dir
    }

    /// A snapshot of the state.
    pub fn read(&self) -> Result<StateData, StateError> {
        match self.dir.read_file(&self.file, MAX_STATE_BYTES)? {
            None => Ok(StateData::default()),
            Some(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt(e.to_string()))
            }
        }
    }

    /// Changes the state under the lock (this process's and `flock` for
    /// other workers) and writes it back atomically.
    pub fn update<R>(&self, change: impl FnOnce(&mut StateData) -> R) -> Result<R, StateError> {
        let _here = self.in_process.lock().unwrap_or_else(|p| p.into_inner());
        let _there = self.dir.lock()?;
        let mut data = self.read()?;
        let result = change(&mut data);
        let bytes =
            serde_json::to_vec_pretty(&data).map_err(|e| StateError::Corrupt(e.to_string()))?;
        self.dir.write_file(&self.file, &bytes, 0o600)?;
        Ok(result)
    }

    /// The handover of `turn`, if there was one.
    pub fn handover(&self, turn: &str) -> Result<Option<Handover>, StateError> {
        Ok(self.read()?.handovers.get(turn).copied())
    }

    /// Records which provider session belongs to `conversation`.
    pub fn set_provider_session(
        &self,
        conversation: &Component,
        session: ProviderSession,
    ) -> Result<(), StateError> {
        self.update(|d| {
            d.provider_sessions
                .insert(conversation.as_str().to_owned(), session);
        })
    }

    /// The provider session of `conversation`.
    pub fn provider_session(
        &self,
        conversation: &Component,
    ) -> Result<Option<ProviderSession>, StateError> {
        Ok(self
            .read()?
            .provider_sessions
            .get(conversation.as_str())
            .cloned())
    }
}
