//! The worker's side of a dropped call: classify, build the launch plan,
//! start (or take a waiting) `tono-launch`, contain and watch it, and
//! return a structured [`outcome::Outcome`].
//!
//! Guarantees: the worker never reads a secret and never touches a user's
//! files — it names secrets in the plan and the launcher unseals them after
//! the drop ([`crate::launch`]); the launcher starts with an empty
//! environment and no fd of the worker's beyond its plan and status pipe,
//! its stdio being `/dev/null` or pipes (the worker's own only for the key
//! built-ins whose stdin or stdout carries a value, [`spawn::Input`],
//! [`spawn::Output`]); a call's processes are killed and reaped when it ends, its
//! timeout fires, or its future is dropped.
#![forbid(unsafe_code)]

pub mod action;
pub mod broker_only;
pub mod direct;
pub mod launch_as;
pub mod outcome;
pub mod pool;
pub mod proxy;
pub mod proxy_head;
pub mod receipt;
pub mod request;
pub mod run;
pub mod spawn;
pub mod start;
pub mod stdio;

pub use outcome::Outcome;
pub use request::{DropRequest, RunOptions, SecretGrant};
pub use run::drop_and_run;
pub use start::Launcher;
