//! The classifier's policy: which tool names are which kind, which reads may
//! stay, on which ports, and extra denied host suffixes.
//!
//! Names match byte for byte. A policy file is JSON, parsed with the same
//! duplicate-refusing parser as calls; it is rejected at load when it is
//! malformed, names an unknown kind, or would let a side-effecting kind stay.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The built-in kinds of tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// `/bin/sh -c COMMAND`.
    Shell,
    /// An argv.
    Spawn,
    /// Read a file (as the user: reading is a side effect on secrecy).
    ReadFile,
    /// Write a file.
    WriteFile,
    /// List a folder.
    ListDir,
    /// Delete a file.
    DeleteFile,
    /// HTTP GET.
    HttpGet,
    /// HTTP HEAD.
    HttpHead,
}

impl ToolKind {
    /// Every kind, in order.
    pub const ALL: [ToolKind; 8] = [
        Self::Shell,
        Self::Spawn,
        Self::ReadFile,
        Self::WriteFile,
        Self::ListDir,
        Self::DeleteFile,
        Self::HttpGet,
        Self::HttpHead,
    ];

    /// The built-in name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shell => "shell",
            Self::Spawn => "spawn",
            Self::ReadFile => "read_file",
            Self::WriteFile => "write_file",
            Self::ListDir => "list_dir",
            Self::DeleteFile => "delete_file",
            Self::HttpGet => "http_get",
            Self::HttpHead => "http_head",
        }
    }

    /// Everything but the two HTTP reads.
    pub fn has_side_effects(self) -> bool {
        !matches!(self, Self::HttpGet | Self::HttpHead)
    }
}

/// Why a policy was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy: {0}")]
pub struct PolicyError(pub String);

/// The policy file's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    /// Extra names for kinds: `{"Bash": "shell", "WebFetch": "http_get"}`.
    #[serde(default)]
    aliases: BTreeMap<String, ToolKind>,
    /// Built-in names to remove (the tool becomes unknown: it drops).
    #[serde(default)]
    hide: Vec<String>,
    /// Read kinds allowed to stay (default both).
    #[serde(default)]
    stay: Option<Vec<ToolKind>>,
    /// Ports a stay may use (default 80, 443).
    #[serde(default)]
    stay_ports: Option<Vec<u16>>,
    /// Extra refused host suffixes (e.g. `corp.example`).
    #[serde(default)]
    denied_host_suffixes: Vec<String>,
}

/// Tool names and their kinds, and the stay rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    names: BTreeMap<String, ToolKind>,
    stay: Vec<ToolKind>,
    ports: Vec<u16>,
    denied: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            names: ToolKind::ALL
                .iter()
                .map(|k| (k.name().to_owned(), *k))
                .collect(),
            stay: vec![ToolKind::HttpGet, ToolKind::HttpHead],
            ports: vec![80, 443],
            denied: Vec::new(),
        }
    }
}

impl Policy {
    /// Parses and validates a JSON policy.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PolicyError> {
        let value = super::call::parse_strict_json(bytes)
            .map_err(|v| PolicyError(v.reason().to_owned()))?;
        let file: PolicyFile =
            serde_json::from_value(value).map_err(|e| PolicyError(e.to_string()))?;
        let mut policy = Self::default();
        for name in &file.hide {
            if policy.names.remove(name).is_none() {
                return Err(PolicyError(format!(
                    "hide names {name:?}, which is not a built-in tool"
                )));
            }
        }
        for (name, kind) in file.aliases {
            if name.is_empty() || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(PolicyError(format!(
                    "alias {:?} is empty or holds whitespace or controls",
                    name.escape_debug().to_string()
                )));
            }
            if let Some(old) = policy.names.insert(name.clone(), kind) {
                if old != kind {
                    return Err(PolicyError(format!(
                        "alias {name:?} would change the built-in kind {old:?} to {kind:?}"
                    )));
                }
            }
        }
        if let Some(stay) = file.stay {
            if let Some(bad) = stay.iter().find(|k| k.has_side_effects()) {
                return Err(PolicyError(format!(
                    "{bad:?} has side effects and can never stay"
                )));
            }
            policy.stay = stay;
        }
        if let Some(ports) = file.stay_ports {
            if ports.is_empty() || ports.contains(&0) {
                return Err(PolicyError(
                    "stay_ports must be a non-empty list of ports 1-65535".into(),
                ));
            }
            policy.ports = ports;
        }
        for suffix in file.denied_host_suffixes {
            let s = suffix
                .trim_start_matches('.')
                .trim_end_matches('.')
                .to_ascii_lowercase();
            if s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                return Err(PolicyError(format!(
                    "denied host suffix {suffix:?} is not a DNS name"
                )));
            }
            policy.denied.push(s);
        }
        Ok(policy)
    }

    /// The kind registered under exactly `name`.
    pub fn kind_of(&self, name: &str) -> Option<ToolKind> {
        self.names.get(name).copied()
    }

    /// Whether reads of `kind` may stay.
    pub fn may_stay(&self, kind: ToolKind) -> bool {
        !kind.has_side_effects() && self.stay.contains(&kind)
    }

    /// Ports a stay may use.
    pub fn stay_ports(&self) -> &[u16] {
        &self.ports
    }

    /// Extra refused host suffixes.
    pub fn denied_suffixes(&self) -> &[String] {
        &self.denied
    }

    /// Every registered name and its kind (for tool listings).
    pub fn tools(&self) -> impl Iterator<Item = (&str, ToolKind)> {
        self.names.iter().map(|(n, k)| (n.as_str(), *k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_hide_and_rejections() {
        let p = Policy::from_json(
            br#"{"aliases":{"Bash":"shell","WebFetch":"http_get"},"hide":["delete_file"]}"#,
        )
        .unwrap();
        assert_eq!(p.kind_of("Bash"), Some(ToolKind::Shell));
        assert_eq!(p.kind_of("WebFetch"), Some(ToolKind::HttpGet));
        assert_eq!(p.kind_of("delete_file"), None);
        for bad in [
            &br#"{"stay":["shell"]}"#[..],
            br#"{"aliases":{"shell":"http_get"}}"#,
            br#"{"aliases":{"x":"nuke"}}"#,
            br#"{"stay_ports":[]}"#,
            br#"{"unknown":1}"#,
            br#"{"aliases":{"a":"shell","a":"http_get"}}"#,
            br#"{"aliases":{"Bash ":"shell"}}"#,
            b"not json",
        ] {
            assert!(
                Policy::from_json(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
