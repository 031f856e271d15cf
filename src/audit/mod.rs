//! Receipts: an append-only, hash-chained log of every call the worker
//! ran, which an operator can check after the fact.
//!
//! Guarantees: a record ([`record::AuditRecord`]) names the user, the tool,
//! the verdict and the secrets by name, and how the call ended — never a
//! secret's value, an environment or tool output; each record carries the
//! SHA-256 of the one before it ([`chain`]), so an edited, removed,
//! reordered or cut record is found by [`chain::verify_files`]; the log
//! file is root's alone and written one whole line at a time, `fsync`ed
//! ([`log::AuditLog`]). Below the worker's side of a call (`drop`), which
//! writes a record per call.
#![forbid(unsafe_code)]

pub mod chain;
pub mod log;
pub mod record;

pub use chain::{rotated_set, verify_files, Break, BreakKind, ChainSummary};
pub use log::{AuditConfig, AuditError, AuditLog, DEFAULT_PATH};
pub use record::{AuditRecord, RecordKind};
