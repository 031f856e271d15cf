//! Receipts: an append-only, hash-chained log of every call the worker
//! ran, which an operator can check after the fact.
//!
//! Guarantees: a record ([`record::AuditRecord`]) names the user, the tool,
//! the verdict and the secrets by name, and how the call ended — never a
//! secret's value, an environment or tool output; each record carries the
//! SHA-256 of the one before it ([`chain`]), so an edited, removed or
//! reordered record is found by [`chain::verify_files`], and records cut
//! from either end by [`chain::verify_anchored`] against an anchor kept
//! off the host; a call's begin record is written and `fsync`ed before
//! the call starts, with room held for its end record, so a call that
//! could not get its receipt never starts; the log file is root's alone
//! and written one whole line at a time, `fsync`ed, and a failed write is
//! cut back, never left torn ([`log::AuditLog`]). Below the worker's side
//! of a call (`drop`), which writes a begin and an end record per call.
#![forbid(unsafe_code)]

pub mod chain;
pub mod log;
pub mod record;

pub use chain::{
    rotated_set, verify_anchored, verify_files, Anchor, Break, BreakKind, ChainSummary,
};
pub use log::{AuditConfig, AuditError, AuditLog, Begun, DEFAULT_PATH};
pub use record::{AuditRecord, Phase, RecordKind};
