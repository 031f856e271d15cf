//! `tono-seal verify`: probes that prove, on this machine, that separation
//! by uid is real and not cosmetic.
//!
//! Guarantees: every probe that acts as a user runs through the same
//! launcher, drop and containment as the worker's calls ([`as_user`]): the
//! launcher itself makes each attempt and reports the kernel's errno, and
//! only `EACCES`/`EPERM` counts as a denial — any other answer fails the
//! probe as inconclusive. Each probe reports what it tried, as which uid,
//! what was expected, what happened and whether it passed
//! ([`probe::Probe`]). Containment is probed as a user — escapes, a fork
//! past the limit, an allocation past it ([`containment`]) — and so is the
//! call's network, each mode beside the host's as control ([`network`]),
//! and the doors around a call — its syscall filter, root's keyring, its
//! IPC, its home's mode and the login folders ([`side_doors`]). The code trees
//! are walked entry by entry, bounded, never through a link
//! ([`tree_walk`]). Facts about the machine are read by root from
//! root-owned files only ([`machine`]), and so is whether a user could
//! become root outside a call — a sudoer, a privileged group
//! ([`privilege`]); anything in a home is inspected as its owner. The top of the library: it uses the worker's side of a call
//! and the turn's constants, and nothing below imports it.
#![forbid(unsafe_code)]

pub mod as_user;
pub mod broker;
pub mod containment;
pub mod machine;
pub mod network;
pub mod privilege;
pub mod probe;
pub mod side_doors;
pub mod tree_walk;

pub use as_user::verify;
pub use probe::{Expect, Probe, Roles, VerifyPlan};
