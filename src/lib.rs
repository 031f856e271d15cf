//! tono-seal: per-user age-sealed secrets and one verified launcher, so that a
//! root-run AI agent worker never holds a user's secrets and never runs a
//! user's tool as root.
//!
//! The crate guarantees, and its tests check against a real kernel:
//!
//! 1. the worker holds no plaintext: secrets are unsealed only inside
//!    `tono-launch`, after it has dropped to the secret's owner;
//! 2. each user's age identity in `~/.tono/identity` is the boundary;
//! 3. side-effecting tools drop; only classified reads may stay;
//! 4. every program for a user starts through one launcher that verifies the
//!    drop held before the program's first instruction;
//! 5. root never acts by a path inside a folder a user controls.
//!
//! The rooms, bottom layer first (`ARCHITECTURE.md` is the map, and
//! `tests/architecture.rs` checks that every import points down): [`sys`]
//! (all `unsafe`); [`user`], [`fs`], [`host`] (what the host grants);
//! [`keys`], [`classify`], [`env`](mod@env), [`mask`]; [`broker`] (the call's
//! credential broker, being built); [`launch`] (the launcher program's side), [`contain`], `stay` (the
//! in-worker read tool); [`drop`](mod@drop) (the worker's side of a call);
//! [`turn`]; [`verify`]; [`mcp`], [`demo`]; [`cli`].
#![deny(unsafe_op_in_unsafe_fn)]

pub mod audit;
pub mod broker;
pub mod classify;
pub mod cli;
pub mod contain;
pub mod demo;
pub mod drop;
pub mod env;
pub mod fs;
pub mod host;
pub mod keys;
pub mod launch;
pub mod mask;
pub mod mcp;
#[cfg(feature = "read-tool")]
pub mod stay;
pub mod sys;
pub mod turn;
pub mod user;
pub mod verify;

pub use drop::Outcome;
pub use drop::{drop_and_run, DropRequest, RunOptions};
