//! One probe's result and what `tono-seal verify` is asked to probe.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::user::TargetUser;

/// What a probe expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The kernel must refuse.
    Denied,
    /// It must work (scratch folders, reading and running the code).
    Allowed,
    /// A fact about the machine that must hold.
    Holds,
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What was tried.
    pub tried: String,
    /// As which user (`root` for machine facts).
    pub user: String,
    /// As which uid.
    pub uid: u32,
    /// What was expected.
    pub expected: Expect,
    /// What happened (an errno text, or the fact found).
    pub got: String,
    /// Whether it passed.
    pub pass: bool,
    /// It failed because it proved nothing either way: the kernel gave an
    /// errno other than `EACCES`/`EPERM` (a missing target, `EROFS`,
    /// `EISDIR`), a program was missing, or a walk stopped at its bound.
    #[serde(default)]
    pub inconclusive: bool,
}

/// What to probe.
#[derive(Debug, Clone)]
pub struct VerifyPlan {
    /// The probed users.
    pub users: Vec<TargetUser>,
    /// Tenant secret folder, probed if present.
    pub tenant_secrets: PathBuf,
    /// Extra paths nobody probed may read or write.
    pub protect: Vec<PathBuf>,
    /// Installed code nobody probed may write (but all may read and run).
    pub code: Vec<PathBuf>,
    /// Three-uid mode (agent, executor, gate), by uid: the `--protect` paths
    /// are the gate's assets; the agent may neither read nor write them,
    /// the executor may not write them, the gate itself is not probed on
    /// them.
    pub roles: Option<Roles>,
    /// Where each probe call's receipt goes, if anywhere.
    pub audit: Option<std::sync::Arc<crate::audit::AuditLog>>,
    /// The operator's environment settings (the proxy probed in mode
    /// `proxy`).
    pub env: crate::env::RunEnv,
    /// The network the probe calls get (as a worker's calls would).
    pub network: Option<crate::env::Network>,
    /// The home the probe calls get (as a worker's calls would).
    pub home: Option<crate::env::HomeMode>,
}

/// The three uids of the three-uid mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// The agent's uid.
    pub agent: u32,
    /// The executor's uid.
    pub executor: u32,
    /// The gate's uid.
    pub gate: u32,
}

/// How a probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// What was expected happened, and the evidence shows it.
    Pass,
    /// The opposite of what was expected happened.
    Fail,
    /// Nothing was proven either way; a failure.
    Inconclusive,
}

impl Probe {
    /// A probe made as `user`.
    pub fn of(
        user: &TargetUser,
        tried: impl Into<String>,
        expected: Expect,
        got: impl Into<String>,
        verdict: Verdict,
    ) -> Self {
        Self {
            tried: tried.into(),
            user: user.name.clone(),
            uid: user.uid,
            expected,
            got: got.into(),
            pass: verdict == Verdict::Pass,
            inconclusive: verdict == Verdict::Inconclusive,
        }
    }
}

pub(super) fn fact(tried: impl Into<String>, got: impl Into<String>, pass: bool) -> Probe {
    Probe {
        tried: tried.into(),
        user: "root".into(),
        uid: 0,
        expected: Expect::Holds,
        got: got.into(),
        pass,
        inconclusive: false,
    }
}
