//! Target users: who a launch runs as ([`target`], looked up in the local
//! passwd file), which of them a worker may act as at all ([`allowed`]),
//! and the worker's snapshot of the passwd and group files that answers
//! both without a read per call ([`accounts`]).
//!
//! Guarantees: uid 0, gid 0 and uid −1 are refused before any syscall;
//! paths come from the passwd entry, never from the name; a worker acts
//! only as a user inside the allotted range, never a system account or
//! `nobody`, and only one whose primary group is its own and unshared.
#![forbid(unsafe_code)]

pub mod accounts;
pub mod allowed;
pub mod target;

pub use accounts::{check_worker_target, Accounts};
pub use allowed::AllottedRange;
pub use target::{valid_login_name, TargetUser, UserError, UserSpec, PASSWD_PATH};
