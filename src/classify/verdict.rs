//! The verdict: hard to ignore, hard to flip.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// What may happen to a call. The discriminants are far apart in Hamming
/// distance, so no single flipped bit turns one into another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum VerdictKind {
    /// Run inside the worker (registered, fully checked reads only).
    Stay = 0x5A1C_3E96,
    /// Run as the user through the launcher.
    Drop = 0xA3E4_C169,
    /// Do not run at all.
    Refuse = 0x0F0F_F0F0,
}

/// A classification with its reason.
#[must_use = "a verdict decides whether a call runs as root; it must be acted on"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    kind: VerdictKind,
    code: &'static str,
    reason: Cow<'static, str>,
}

impl Verdict {
    /// A stay verdict.
    pub fn stay(code: &'static str, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind: VerdictKind::Stay,
            code,
            reason: reason.into(),
        }
    }

    /// A drop verdict.
    pub fn drop(code: &'static str, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind: VerdictKind::Drop,
            code,
            reason: reason.into(),
        }
    }

    /// A refuse verdict.
    pub fn refuse(code: &'static str, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind: VerdictKind::Refuse,
            code,
            reason: reason.into(),
        }
    }

    /// Which way it went.
    pub fn kind(&self) -> VerdictKind {
        self.kind
    }

    /// Stable machine-readable reason code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// Human reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
