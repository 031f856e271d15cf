//! Whose user a run goes as, what environment it gets, and the provider
//! programs (sign-in, sign-out, status) that run as that user.
//!
//! Guarantees: the Cloud is asked before every run and a [`RunAs`] is made
//! only from its answer ([`run_as`]); a launched program's environment is
//! built here from nothing, by name ([`env::EnvBuilder`]), and nothing is
//! copied from the worker's own environment; a provider program starts only
//! through the launcher, as a [`RunAs`] ([`signin`]), and a sign-in link is
//! read only from the program's own output pipes.
#![forbid(unsafe_code)]

pub mod account;
pub mod env;
pub mod provider;
pub mod root_dir;
pub mod run_as;
pub mod signin;
pub mod state;
pub mod tree;
pub mod turn_dir;

pub use env::{EnvBuilder, EnvConfig, RunEnv, TurnCredential};
pub use provider::{Provider, ProviderSpec};
pub use run_as::{resolve, who_runs, Cloud, Resolution, RunAs};
