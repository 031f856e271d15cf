//! The CLI's errors and their stable exit codes.
#![forbid(unsafe_code)]

use crate::launch::report::{LaunchError, Stage};
use crate::user::UserError;

/// Success.
pub const OK: i32 = 0;
/// The operation failed (any other reason).
pub const FAILED: i32 = 1;
/// Usage error (bad arguments, an invalid or root target, a bad name).
pub const USAGE: i32 = 2;
/// The user is unknown.
pub const USER_UNKNOWN: i32 = 3;
/// The user's identity is insecure (symlink, owner, mode, type, size).
pub const IDENTITY_INSECURE: i32 = 4;
/// The named secret does not exist.
pub const SECRET_MISSING: i32 = 5;
/// The secret (or an imported file) exists but does not open.
pub const SECRET_CORRUPT: i32 = 6;
/// The launch was refused: the plan disagreed with passwd, or the drop did
/// not hold.
pub const LAUNCH_REFUSED: i32 = 7;
/// The user has no usable identity (missing or malformed).
pub const IDENTITY_UNUSABLE: i32 = 8;
/// The host does not grant what the command needs (a capability; the
/// message names it and how to grant it).
pub const NOT_GRANTED: i32 = 9;

/// Every exit code with what it means, for the manual page.
pub const EXIT_CODES: &[(i32, &str)] = &[
    (OK, "success (for `verify`: every probe passed)"),
    (FAILED, "the operation failed (for `verify`: a probe failed or was inconclusive)"),
    (USAGE, "usage error: bad arguments, an invalid or root target, a bad name, an unusable config"),
    (USER_UNKNOWN, "the user is unknown"),
    (IDENTITY_INSECURE, "the user's identity is insecure (a symlink, another owner, group or other bits, not a file, too large)"),
    (SECRET_MISSING, "the named secret does not exist"),
    (SECRET_CORRUPT, "the secret (or an imported file) exists but does not open"),
    (LAUNCH_REFUSED, "the launch was refused: the plan disagreed with passwd, or the drop did not hold"),
    (IDENTITY_UNUSABLE, "the user has no usable identity (missing or malformed)"),
    (NOT_GRANTED, "the host does not grant what the command needs: the message names the capability (CAP_SYS_ADMIN for the private view, CAP_NET_ADMIN for a network of the call's own) and how to grant it"),
];

/// A CLI failure: a message for stderr and an exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// What to tell the operator.
    pub message: String,
    /// The exit code.
    pub code: i32,
    /// The launch error's own code, when a launch failed (for receipts).
    pub launch_code: Option<String>,
}

impl CliError {
    /// A failure with an explicit code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
            launch_code: None,
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }
}

impl From<UserError> for CliError {
    fn from(e: UserError) -> Self {
        let code = match e {
            UserError::Unknown(_) => USER_UNKNOWN,
            UserError::Passwd(_) | UserError::BadEntry { .. } => FAILED,
            _ => USAGE,
        };
        Self::new(code, e.to_string())
    }
}

/// The exit code for a launch error's code.
pub fn code_of(error: &LaunchError) -> i32 {
    match error.code.as_str() {
        "user_unknown" => USER_UNKNOWN,
        "identity_insecure" => IDENTITY_INSECURE,
        "identity_missing" | "identity_malformed" => IDENTITY_UNUSABLE,
        "secret_missing" => SECRET_MISSING,
        "secret_corrupt" | "import_rejected" | "secret_has_nul" => SECRET_CORRUPT,
        "invalid_secret_name" | "value_empty" | "value_too_large" | "identity_exists" => USAGE,
        "home_missing" => LAUNCH_REFUSED,
        code if code.ends_with("_not_granted") => NOT_GRANTED,
        _ if matches!(error.stage, Stage::Plan | Stage::Drop | Stage::Verify) => LAUNCH_REFUSED,
        _ => FAILED,
    }
}

impl From<crate::host::Lacking> for CliError {
    fn from(e: crate::host::Lacking) -> Self {
        Self {
            launch_code: Some(e.code().to_string()),
            ..Self::new(NOT_GRANTED, e.message())
        }
    }
}

impl From<LaunchError> for CliError {
    fn from(e: LaunchError) -> Self {
        Self {
            launch_code: Some(e.code.clone()),
            ..Self::new(code_of(&e), e.message)
        }
    }
}
