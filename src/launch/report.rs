//! The launcher's status pipe: how a launch reports, in typed form, that it
//! refused, failed, or handed over to the program.
//!
//! The pipe is CLOEXEC in the launcher. Just before `execve` the launcher
//! writes [`EXEC_MARK`]; a successful exec then closes the pipe. So the
//! worker reads: nothing (the launcher died before exec: a crash), the mark
//! alone (the program is running), the mark then an error (exec failed), or
//! one [`StatusMessage`] (a refusal, or a built-in operation's result).
//! Exit statuses come from `waitpid`; nothing is scraped from output.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Written just before `execve`.
pub const EXEC_MARK: u8 = b'X';
/// The largest status message the worker reads.
pub const MAX_STATUS_BYTES: usize = 1024 * 1024;

/// Where in a launch something failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The worker could not build or start the launch.
    Spawn,
    /// The plan was malformed or disagreed with the passwd file.
    Plan,
    /// A credential-changing syscall failed.
    Drop,
    /// The drop did not hold (ids, groups, capabilities, no_new_privs).
    Verify,
    /// The call's own namespaces or mounts could not be made.
    View,
    /// Opening the identity or a secret failed.
    Unseal,
    /// Preparing or performing the `execve` failed.
    Exec,
    /// A built-in operation failed.
    Op,
    /// The launcher died before reporting.
    Launcher,
    /// A read that stayed in the worker failed or was refused mid-way.
    Stay,
}

/// A typed launch error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{stage:?}: {message} ({code})")]
pub struct LaunchError {
    /// Where it failed.
    pub stage: Stage,
    /// Stable machine-readable code (e.g. `identity_insecure`).
    pub code: String,
    /// Human explanation; never a secret value.
    pub message: String,
    /// The errno, when a syscall failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

impl LaunchError {
    /// A new error without errno.
    pub fn new(stage: Stage, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            stage,
            code: code.into(),
            message: message.into(),
            errno: None,
        }
    }

    /// A new error from a failed syscall.
    pub fn sys(stage: Stage, code: &str, what: &str, errno: nix::errno::Errno) -> Self {
        Self {
            stage,
            code: code.into(),
            message: format!("{what}: {}", errno.desc()),
            errno: Some(errno as i32),
        }
    }
}

/// One message on the status pipe (after the optional exec mark).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusMessage {
    /// A built-in operation succeeded with this result.
    Ok(serde_json::Value),
    /// The launch failed.
    Error(LaunchError),
    /// A relayed program ended.
    Ended(Ended),
}

/// How a program the launcher relayed ended (sent after the exec mark):
/// the program's own exit, and how many times each secret was masked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Masks made in its output, by secret name.
    pub masks: std::collections::BTreeMap<String, u64>,
    /// Each request the call's broker substituted a value in or refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broker: Vec<crate::broker::uses::BrokerUse>,
}

/// What the status pipe said, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusReport {
    /// The program was exec'd (the mark, then EOF).
    Execed,
    /// The program ran behind the launcher's relay and ended so.
    Ended(Ended),
    /// A built-in operation's result.
    Done(serde_json::Value),
    /// A typed failure.
    Failed(LaunchError),
    /// Nothing at all: the launcher died before it could report.
    Silent,
}

impl StatusReport {
    /// Decodes the bytes read from the status pipe up to EOF.
    pub fn decode(bytes: &[u8]) -> Self {
        let rest = bytes.strip_prefix(&[EXEC_MARK]).unwrap_or(bytes);
        let execed = rest.len() != bytes.len();
        if rest.is_empty() {
            return if execed { Self::Execed } else { Self::Silent };
        }
        match serde_json::from_slice::<StatusMessage>(rest) {
            Ok(StatusMessage::Ok(v)) => Self::Done(v),
            Ok(StatusMessage::Error(e)) => Self::Failed(e),
            Ok(StatusMessage::Ended(end)) if execed => Self::Ended(end),
            Ok(StatusMessage::Ended(_)) => Self::Failed(LaunchError::new(
                Stage::Launcher,
                "status_garbled",
                "the launcher reported an end without a start",
            )),
            Err(e) => Self::Failed(LaunchError::new(
                Stage::Launcher,
                "status_garbled",
                format!("the launcher's status could not be decoded: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_shape() {
        assert_eq!(StatusReport::decode(b""), StatusReport::Silent);
        assert_eq!(StatusReport::decode(b"X"), StatusReport::Execed);
        let err = LaunchError::new(Stage::Exec, "exec_failed", "no such file");
        let mut bytes = vec![EXEC_MARK];
        bytes.extend(serde_json::to_vec(&StatusMessage::Error(err.clone())).unwrap());
        assert_eq!(StatusReport::decode(&bytes), StatusReport::Failed(err));
        let ok = serde_json::to_vec(&StatusMessage::Ok(serde_json::json!({"n": 1}))).unwrap();
        assert_eq!(
            StatusReport::decode(&ok),
            StatusReport::Done(serde_json::json!({"n": 1}))
        );
        assert!(matches!(
            StatusReport::decode(b"junk"),
            StatusReport::Failed(_)
        ));
    }
}
