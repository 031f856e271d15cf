//! Whose user a run goes as, and what environment it gets.
//!
//! Guarantees: a launched program's environment is built here from nothing,
//! by name ([`env::EnvBuilder`]); nothing is copied from the worker's own
//! environment.
#![forbid(unsafe_code)]

pub mod account;
pub mod env;

pub use env::EnvBuilder;
