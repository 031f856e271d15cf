//! What a call's home is, as the operator chooses it: the mode (what a
//! call's writes become) and the paths of it that tool calls never see.
//! The launcher makes it ([`crate::launch::home`]); this is the choice.
//!
//! Guarantees: the default is the safe mode (`ephemeral`); a hidden path is
//! always a plain path inside the home (no `..`, no leading `/`).
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// What a call's writes to its home become.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HomeMode {
    /// Writable, and every write vanishes with the call.
    #[default]
    Ephemeral,
    /// Not writable.
    ReadOnly,
    /// The real home: what a call writes, the next call runs from.
    Persistent,
}

impl HomeMode {
    /// Every mode, strongest first.
    pub const ALL: [HomeMode; 3] = [Self::Ephemeral, Self::ReadOnly, Self::Persistent];

    /// The mode's name, as the CLI and the config spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ephemeral => "ephemeral",
            Self::ReadOnly => "read-only",
            Self::Persistent => "persistent",
        }
    }

    /// Parses a mode's name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for HomeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The home a launch of the private view makes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeView {
    /// What writes become.
    #[serde(default)]
    pub mode: HomeMode,
    /// Paths inside the home covered for the call besides `~/.tono`
    /// (relative, plain components).
    #[serde(default)]
    pub hidden: Vec<String>,
    /// Paths inside the home that must hold no link where they exist
    /// (checked, not covered): a provider's login folder for its own
    /// programs, which would otherwise write a login through a link that
    /// a tool planted to a place no cover hides.
    #[serde(default)]
    pub plain: Vec<String>,
}

impl HomeView {
    /// The real home with nothing hidden but the store: what provisioning,
    /// the sweep and a provider's own programs (sign-in, status) get.
    pub fn persistent() -> Self {
        Self {
            mode: HomeMode::Persistent,
            hidden: Vec::new(),
            plain: Vec::new(),
        }
    }
}

/// Whether `path` is a plain relative path inside the home: one or more
/// components, none empty, `.` or `..`, no NUL.
pub fn valid_hidden_path(path: &str) -> Result<(), String> {
    let plain = |c: &str| !c.is_empty() && c != "." && c != ".." && !c.contains('\0');
    if path.starts_with('/') || !path.split('/').all(plain) {
        return Err(format!(
            "{path:?} is not a plain path inside the home (relative, no empty, . or .. part)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_they_print_and_hidden_paths_stay_inside_the_home() {
        for mode in HomeMode::ALL {
            assert_eq!(HomeMode::parse(mode.name()), Some(mode));
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::Value::String(mode.name().into())
            );
        }
        assert_eq!(HomeMode::default(), HomeMode::Ephemeral);
        assert!(valid_hidden_path(".codex").is_ok());
        assert!(valid_hidden_path(".config/gcloud").is_ok());
        for bad in ["", "/etc", "../x", "a//b", "a/./b", ".", "a/..", "a\0b"] {
            assert!(valid_hidden_path(bad).is_err(), "{bad:?}");
        }
    }
}
