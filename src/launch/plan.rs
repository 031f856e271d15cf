//! The launch plan: everything `tono-launch` needs, sent as JSON on a pipe
//! (never in argv or the environment). A plan names secrets, never holds
//! their values.
//!
//! On the pipe (fd 3) a plan is framed: its length (4 bytes, little-endian)
//! and its JSON, then, once the worker may let the call go on, one byte,
//! [`GO`]. The worker writes the plan as soon as it is made, so the launcher
//! prepares the call (its view, its cgroups, the drop, the syscall filter)
//! while the worker makes the call's begin record durable; the launcher
//! opens no key and runs nothing of the user's choosing before it has read
//! [`GO`] ([`crate::launch::sequence`]). A pipe that ends before it, or any
//! other byte, refuses the call (`begin_not_durable`).
#![forbid(unsafe_code)]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::env::Network;

/// Default `RLIMIT_NOFILE` (soft and hard) of a launched program.
pub const DEFAULT_NOFILE: u64 = 1024;
/// Default `RLIMIT_NPROC` of a launched program: processes of its uid.
pub const DEFAULT_NPROC: u64 = 512;
/// The largest plan the launcher reads.
pub const MAX_PLAN_BYTES: usize = 8 * 1024 * 1024;

/// The byte after a plan that lets the launcher go on past its preparation:
/// the call's begin record is durable, or the call has none.
pub const GO: u8 = b'G';

/// A plan's JSON as it goes on the pipe: its length, then the bytes (wiped
/// when dropped: a turn's plan can hold a credential).
pub fn frame(json: &[u8]) -> zeroize::Zeroizing<Vec<u8>> {
    let mut framed = zeroize::Zeroizing::new(Vec::with_capacity(4 + json.len()));
    // A plan over MAX_PLAN_BYTES is refused by the launcher: its length
    // still fits.
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    framed.extend_from_slice(&len.to_le_bytes());
    framed.extend_from_slice(json);
    framed
}

/// One launch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaunchPlan {
    /// Login name of the target; checked against the passwd file.
    pub user: String,
    /// Target uid; must agree with the passwd entry and not be 0.
    pub uid: u32,
    /// Target gid; must agree with the passwd entry and not be 0.
    pub gid: u32,
    /// Target home; must agree with the passwd entry.
    pub home: PathBuf,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// `cgroup.procs` files of the call's own cgroups, entered as root.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// What a program or file tool sees of the machine (provisioning and
    /// the sweep always see the store: they run no program of the user's).
    #[serde(default)]
    pub view: super::view::View,
    /// The call's network: `none` and `proxy` run a program, file tool or
    /// probe in a network namespace of its own (see [`Self::in_own_network`]).
    #[serde(default = "host_network")]
    pub network: Network,
    /// The worker's own network namespace, which the launcher's must be
    /// (`host`) or must not be (`none`, `proxy`).
    #[serde(default)]
    pub worker_netns: Option<crate::sys::NetnsId>,
    /// The home a launch of the private view sees (its writes, what of it
    /// is hidden): made as root in the call's mount namespace.
    #[serde(default)]
    pub home_view: crate::env::HomeView,
    /// Syscalls the operator refuses besides the built-in filter's
    /// ([`super::syscall_filter`]), by name.
    #[serde(default)]
    pub refuse_syscalls: Vec<String>,
    /// What to do once dropped.
    pub action: Action,
}

impl LaunchPlan {
    /// Whether the plan's program is given a secret as a file (which only
    /// a launch in its own namespaces can hold: [`super::credentials`]).
    pub fn has_file_secrets(&self) -> bool {
        matches!(&self.action, Action::Exec(exec) if exec.secrets.iter().any(|s| s.file.is_some()))
    }

    /// Whether the plan's program is given a secret bound to hosts, which
    /// it gets as a placeholder beside the call's broker ([`super::broker`]).
    pub fn has_bound_secrets(&self) -> bool {
        matches!(&self.action, Action::Exec(exec) if exec.secrets.iter().any(|s| s.bound.is_some()))
    }

    /// Whether the launch runs in the call's own namespaces (the private
    /// view of a program or a file tool): the worker starts its launcher in
    /// a PID namespace of its own, and the launcher checks it was.
    pub fn in_own_namespaces(&self) -> bool {
        self.view == super::view::View::Private
            && matches!(self.action, Action::Exec(_) | Action::File { .. })
    }

    /// Whether the launch runs in a network namespace of its own: a
    /// network other than the host's, for a launch of the private view
    /// (see [`Self::in_own_namespaces`]) or for probes (`verify` tries
    /// each network mode this way).
    /// A program given a bound secret gets one in every network mode: its
    /// broker listens there, and no other process of the host reaches it.
    pub fn in_own_network(&self) -> bool {
        (self.network.own_namespace() && matches!(self.action, Action::Probe { .. }))
            || ((self.network.own_namespace() || self.has_bound_secrets())
                && self.in_own_namespaces())
    }

    /// The namespaces the worker starts this plan's launcher in.
    pub fn namespaces(&self) -> crate::sys::NewNamespaces {
        crate::sys::NewNamespaces {
            pid: self.in_own_namespaces(),
            net: self.in_own_network(),
        }
    }

    /// A plan to do `action` as `user`, with the default limits and no
    /// cgroup (the caller adds those it has).
    pub fn for_user(user: &crate::user::TargetUser, action: Action) -> Self {
        Self {
            user: user.name.clone(),
            uid: user.uid,
            gid: user.gid,
            home: user.home.clone(),
            limits: Limits::default(),
            cgroups: Vec::new(),
            view: super::view::View::default(),
            network: Network::Host,
            worker_netns: None,
            home_view: crate::env::HomeView::persistent(),
            refuse_syscalls: Vec::new(),
            action,
        }
    }
}

fn host_network() -> Network {
    Network::Host
}

/// Resource limits set while still root, before the drop.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// `RLIMIT_NOFILE`, soft and hard.
    pub nofile: u64,
    /// `RLIMIT_NPROC`, soft and hard (counts every process of the uid).
    pub nproc: u64,
    /// `RLIMIT_AS`, soft and hard: set only where no memory cgroup limits
    /// the call.
    #[serde(default)]
    pub address_space: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            nofile: DEFAULT_NOFILE,
            nproc: DEFAULT_NPROC,
            address_space: None,
        }
    }
}

/// What the launcher does as the user.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Unseal the named secrets and `execve` a program.
    Exec(ExecPlan),
    /// A key store operation, done by the launcher itself.
    Keys {
        /// The operation.
        op: KeysOp,
    },
    /// A file tool, done by the launcher itself.
    File {
        /// The operation.
        op: FileOp,
    },
    /// Kill every process of the user (`kill(-1, SIGKILL)` as the user):
    /// the after-call sweep of a host where calls have no cgroup.
    Sweep,
    /// Make each attempt as the user and report the kernel's answer
    /// (`tono-seal verify`).
    Probe {
        /// The attempts, in order.
        probes: Vec<super::access::AccessProbe>,
    },
}

/// A program to run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExecPlan {
    /// Program and arguments; `argv[0]` without a `/` is looked up in the
    /// plan's own `PATH`.
    pub argv: Vec<String>,
    /// Absolute working folder, entered after the drop; the home if absent.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The whole environment of the program (secrets are added to it).
    pub env: PlanEnv,
    /// Secrets to unseal, each into its own variable.
    #[serde(default)]
    pub secrets: Vec<SecretBinding>,
    /// CA certificates (PEM) the call's broker trusts for bound hosts
    /// besides the system's roots: the operator's `upstream_ca`, read by
    /// the worker.
    #[serde(default)]
    pub upstream_ca: Option<String>,
}

/// A launched program's environment, by name. A turn's credential or the
/// worker's Bedrock secret can be among the values, so each value is wiped
/// when the environment is dropped and `Debug` shows names only.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlanEnv(Vec<(String, String)>);

impl PlanEnv {
    /// Sets `name` to `value`: in its place if it is there (the old value
    /// wiped), else at the end.
    pub fn set(&mut self, name: &str, value: String) {
        use zeroize::Zeroize;
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, old)) => {
                old.zeroize();
                *old = value;
            }
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// Adds `name=value` at the end.
    pub fn push(&mut self, name: String, value: String) {
        self.0.push((name, value));
    }
}

impl From<Vec<(String, String)>> for PlanEnv {
    fn from(vars: Vec<(String, String)>) -> Self {
        Self(vars)
    }
}

impl std::ops::Deref for PlanEnv {
    type Target = [(String, String)];

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::fmt::Debug for PlanEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| format!("{name}=…")))
            .finish()
    }
}

impl Drop for PlanEnv {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for (_, value) in &mut self.0 {
            value.zeroize();
        }
    }
}

/// One secret and where it goes: the value into a variable, or a file of
/// the call's own credentials folder ([`super::credentials`]) whose path a
/// variable may hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SecretBinding {
    /// The secret's name in the store.
    pub name: String,
    /// The environment variable that receives its value, or, with
    /// [`Self::file`], the file's path.
    #[serde(default)]
    pub env: Option<String>,
    /// The file's name in the call's `$CREDENTIALS_DIRECTORY`.
    #[serde(default)]
    pub file: Option<String>,
    /// The hosts the value may be sent to, decided by root's config: the
    /// program gets a placeholder, and the call's broker puts the value in
    /// its place only on the way to these hosts.
    #[serde(default)]
    pub bound: Option<crate::env::Binding>,
}

/// Key store operations (`tono-seal` provisioning commands).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum KeysOp {
    /// Create the store; `force` replaces (and keeps) an old identity.
    Keygen {
        /// Replace an existing identity.
        force: bool,
    },
    /// The current recipient.
    Recipient,
    /// Seal the value on stdin as `name`.
    Seal {
        /// The secret's name.
        name: String,
        /// Accept an empty value.
        allow_empty: bool,
    },
    /// Seal a random value of `bytes` printable characters as `name`,
    /// made by the launcher as the user: no one else ever holds it
    /// (`verify`'s throwaway secret for its broker probe).
    SealRandom {
        /// The secret's name.
        name: String,
        /// The value's length (16 to 256).
        bytes: usize,
    },
    /// Install the age file on stdin as `name`, after checking it opens.
    Import {
        /// The secret's name.
        name: String,
    },
    /// List names.
    List,
    /// Remove a secret.
    Remove {
        /// The secret's name.
        name: String,
    },
    /// New identity; every secret re-sealed.
    Rotate,
    /// Write one value to stdout.
    Reveal {
        /// The secret's name.
        name: String,
    },
}

/// File tools, done as the user.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileOp {
    /// Write the file's bytes to stdout (at most `max_bytes`).
    Read {
        /// Path, absolute or relative to the home.
        path: PathBuf,
        /// Cap on bytes read.
        max_bytes: u64,
    },
    /// Create or replace a file with `content`.
    Write {
        /// Path, absolute or relative to the home.
        path: PathBuf,
        /// The new content.
        content: String,
    },
    /// List a folder's entries.
    ListDir {
        /// Path, absolute or relative to the home.
        path: PathBuf,
    },
    /// Remove a file (not a folder).
    Delete {
        /// Path, absolute or relative to the home.
        path: PathBuf,
    },
    /// Remove everything inside a folder, but not the folder (a turn
    /// folder before root removes the emptied entry). No tool maps to it.
    Clear {
        /// The folder, absolute.
        path: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plans_environment_prints_names_and_never_values() {
        let plan = ExecPlan {
            argv: vec!["/bin/true".into()],
            cwd: None,
            env: vec![("TURN_TOKEN".to_owned(), "canary-value".to_owned())].into(),
            secrets: Vec::new(),
            upstream_ca: None,
        };
        let shown = format!("{plan:?}");
        assert!(shown.contains("TURN_TOKEN=…"), "{shown}");
        assert!(!shown.contains("canary-value"), "{shown}");
        // The wire form is unchanged: a list of pairs.
        let json = serde_json::to_string(&plan.env).unwrap();
        assert_eq!(json, r#"[["TURN_TOKEN","canary-value"]]"#);
        let back: PlanEnv = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan.env);
    }
}
