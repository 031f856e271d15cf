//! Which tool names are which kind. Names match byte for byte.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The built-in kinds of tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// Tool names and their kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    names: BTreeMap<String, ToolKind>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            names: ToolKind::ALL
                .iter()
                .map(|k| (k.name().to_owned(), *k))
                .collect(),
        }
    }
}

impl Policy {
    /// The kind registered under exactly `name`.
    pub fn kind_of(&self, name: &str) -> Option<ToolKind> {
        self.names.get(name).copied()
    }
}
