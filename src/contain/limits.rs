//! The limits of a call as really applied, and what its cgroups counted:
//! reported in the call's outcome, so that nothing is claimed that was not
//! in force.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Default `pids.max` of one call.
pub const DEFAULT_PIDS_MAX: u64 = 256;
/// Default memory limit of one call (cgroup memory, else `RLIMIT_AS`).
pub const DEFAULT_MEMORY_MAX: u64 = 2 << 30;

/// The limits that were really in force for a call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLimits {
    /// The name of the call's own cgroup (`call-<worker pid>-<n>`, the same
    /// in every hierarchy), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The call ran in its own cgroup v2 (killed as a whole at the end).
    pub cgroup_v2: bool,
    /// `pids.max`, and by which controller.
    pub pids_max: Option<(u64, String)>,
    /// `RLIMIT_NPROC` (processes of the uid, across calls).
    pub rlimit_nproc: u64,
    /// `RLIMIT_NOFILE`.
    pub rlimit_nofile: u64,
    /// Why the call's cgroup could not be emptied and removed; the user is
    /// then dirty until a cleanup succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_error: Option<String>,
    /// How many times a fork in the call hit `pids.max`.
    #[serde(default)]
    pub pids_max_hits: u64,
    /// The memory limit in bytes, and by what (`cgroup v1 memory` or
    /// `RLIMIT_AS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<(u64, String)>,
    /// How many processes of the call the memory limit OOM-killed.
    #[serde(default)]
    pub oom_kills: u64,
    /// The most memory the call's cgroup charged, in bytes, where the
    /// kernel keeps it (`memory.peak`, `memory.max_usage_in_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak: Option<u64>,
    /// The most processes the call's cgroup held, where the kernel keeps
    /// it (`pids.peak`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_peak: Option<u64>,
    /// How many processes the call's cgroups still held after its launcher
    /// had exited, and were killed there when the call ended (by
    /// `cgroup.kill` on v2, one pidfd each on v1): what left the call's
    /// process group and, in the private view, outlived its PID namespace
    /// for a moment. Counted when the kill happened, never assumed.
    #[serde(default)]
    pub killed_at_end: u64,
    /// The fallback used when there is no cgroup v2 (the v1 cgroups killed
    /// through pidfds, or the per-user sweep), said so it is never assumed:
    /// the mechanism, set when the call's cgroups are made; what it killed
    /// is [`AppliedLimits::killed_at_end`].
    pub note: Option<String>,
    /// What the call saw: `private` (its own namespaces, the store hidden,
    /// its output masked) or `shared` (the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<String>,
    /// The call's network: `none`, `proxy` (both in a network namespace of
    /// its own) or `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The call's home, where it ran in its own view: `ephemeral`,
    /// `read-only` or `persistent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}

/// What a call's cgroups counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Forks refused by `pids.max`.
    pub pids_max_hits: u64,
    /// Processes killed by the memory limit.
    pub oom_kills: u64,
    /// The most memory the call's cgroup charged, where the kernel keeps it.
    pub memory_peak: Option<u64>,
    /// The most processes the call's cgroup held, where the kernel keeps it.
    pub pids_peak: Option<u64>,
    /// Processes the call's cgroups still held after its launcher exited,
    /// killed there (`cgroup.kill` on v2, a pidfd each on v1), each counted
    /// once.
    pub killed_at_end: u64,
}
