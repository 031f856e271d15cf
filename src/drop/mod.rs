//! The launch plan, the privilege drop and its verification, spawning,
//! outcomes and timeouts.
//!
//! Guarantees: every program for a user starts through `tono-launch`
//! ([`launcher`]), which drops to the user's uid and own gid with no other
//! group and no_new_privs, and proves the drop held ([`verify`]) before any
//! user-chosen code runs. All `unsafe` of the crate is in [`sys`].

pub mod builtin;
pub mod cgroup;
#[cfg(feature = "read-tool")]
pub mod fetch;
pub mod launcher;
pub mod outcome;
pub mod plan;
pub mod pool;
pub mod probe;
pub mod report;
pub mod run;
pub mod spawn;
pub mod sweep;
pub mod sys;
pub mod user;
pub mod verify;
