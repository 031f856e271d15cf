//! The fresh environment of a launched program.
//!
//! [`EnvBuilder`] starts empty and adds variables by name. It never reads
//! the worker's environment: `PATH` is a fixed system path, and `HOME`,
//! `USER`, `LOGNAME` and `SHELL` come from the passwd entry.
#![forbid(unsafe_code)]

use crate::drop::user::TargetUser;

/// The `PATH` every launched program gets.
pub const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The locale every launched program gets.
pub const DEFAULT_LANG: &str = "C.UTF-8";

/// Why a variable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// The name is empty or holds `=` or NUL.
    #[error("invalid environment variable name {0:?}")]
    BadName(String),
    /// The value holds NUL.
    #[error("the value of {0} holds a NUL byte")]
    BadValue(String),
}

/// An environment built by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvBuilder {
    vars: Vec<(String, String)>,
}

impl EnvBuilder {
    /// An empty environment.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The base environment of `user`: `PATH`, `HOME`, `USER`, `LOGNAME`,
    /// `SHELL`, `LANG`, `TMPDIR`.
    pub fn for_user(user: &TargetUser) -> Self {
        let mut env = Self::empty();
        let home = user.home.display().to_string();
        let shell = user.shell.display().to_string();
        for (k, v) in [
            ("PATH", SYSTEM_PATH),
            ("HOME", home.as_str()),
            ("USER", user.name.as_str()),
            ("LOGNAME", user.name.as_str()),
            ("SHELL", shell.as_str()),
            ("LANG", DEFAULT_LANG),
            ("TMPDIR", "/tmp"),
        ] {
            // Passwd fields hold neither NUL nor a bad name.
            let _ = env.set(k, v);
        }
        env
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut Self, EnvError> {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(EnvError::BadName(name.escape_debug().to_string()));
        }
        if value.contains('\0') {
            return Err(EnvError::BadValue(name.to_owned()));
        }
        match self.vars.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.to_owned(),
            None => self.vars.push((name.to_owned(), value.to_owned())),
        }
        Ok(self)
    }

    /// The variables, in insertion order.
    pub fn build(self) -> Vec<(String, String)> {
        self.vars
    }
}
