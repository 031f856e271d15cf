//! Whose user a run goes as, the users and turn folders the worker makes,
//! and the provider programs (sign-in, sign-out, status) that run as that
//! user.
//!
//! Guarantees: the Cloud is asked before every run and a [`RunAs`] is made
//! only from its answer ([`run_as`]); a user is created exactly as allotted
//! ([`account`]); a turn folder is made where only root can write and handed
//! over by fd ([`turn_dir`]), and what was handed over is remembered in the
//! worker's state ([`state`]), never learned by looking; a provider program starts only
//! through the launcher, as a [`RunAs`] ([`signin`]), and a sign-in link is
//! read only from the program's own output pipes.
#![forbid(unsafe_code)]

pub mod account;
pub mod run_as;
pub mod signin;
pub mod signin_error;
pub mod signin_link;
pub mod state;
pub mod turn_dir;

pub use run_as::{resolve, who_runs, Cloud, Resolution, RunAs};
