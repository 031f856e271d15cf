//! Containment: no process outlives its call, and a call stays inside the
//! limits it was given.
//!
//! Guarantees: where the host has cgroups, every call runs in a cgroup of
//! its own ([`cgroup::CallCgroup`]), made under root-owned bases and
//! entered while the launcher is still root, so the user cannot move out;
//! when the call ends it is killed as a whole and waited for until empty
//! (bounded), and a cgroup that cannot be emptied marks its user dirty (no
//! new call of that user starts). Where the host has none, the per-user
//! [`sweep`] kills every process of the uid when the user's last live call
//! ends — a weaker guarantee, which `tono-seal verify` names. The cgroups
//! of a SIGKILLed worker are removed by the next one ([`dead_workers`]).
//! What was really applied is reported ([`limits::AppliedLimits`]), never
//! assumed. This room decides *when* a sweep runs; the worker's side of a
//! call (`drop`) runs it through the launcher.
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod cgroupfs;
pub mod dead_workers;
pub mod delegate;
pub mod limits;
pub mod mounts;
pub mod sweep;

pub use cgroup::{
    cleanup, is_dirty, remove_in_place, settle, CallCgroup, EMPTY_TIMEOUT, UNASSIGNED,
};
pub use dead_workers::sweep_dead_workers;
pub use limits::{AppliedLimits, Counters, DEFAULT_MEMORY_MAX, DEFAULT_PIDS_MAX};
pub use mounts::{mounts, untracked, use_mounts, v2_only, Mounts};
