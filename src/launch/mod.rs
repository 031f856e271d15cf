//! The launcher program's side of a dropped call: what `tono-launch` does
//! between its start as root and the program's first instruction, and the
//! two messages it speaks with the worker (the [`plan::LaunchPlan`] it
//! reads on fd 3, the [`report::StatusMessage`] it writes on fd 4).
//!
//! Guarantees: every program for a user starts through [`sequence::main`],
//! which drops to the user's uid and own gid with no other group and
//! no_new_privs, and proves the drop held ([`drop_held`]) before any key is
//! opened or any user-chosen code runs; a refusal is a typed
//! [`report::LaunchError`] on the status pipe, never a log line. The
//! launcher is its own single-threaded program started by `posix_spawn`, so
//! nothing of ours runs between fork and exec. Nothing here imports the
//! worker's side (`drop`).
#![forbid(unsafe_code)]

pub mod access;
pub mod broker;
pub mod builtin;
pub mod credentials;
pub mod drop_held;
pub mod home;
pub mod network;
pub mod plan;
pub mod relay;
pub mod report;
pub mod sequence;
pub mod sweep;
pub mod syscall_filter;
pub mod view;
