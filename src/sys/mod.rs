//! Every raw syscall of the crate that needs `unsafe`, each wrapped once:
//! the bottom layer, below everything that launches or contains a call.
//!
//! Guarantees: nothing outside this room says `unsafe` (every other module
//! is `#![forbid(unsafe_code)]`, and `tests/architecture.rs` checks it). Each
//! block states why it is sound. Ids cross this boundary as
//! [`nix::unistd::Uid`]/[`nix::unistd::Gid`] newtypes; errors as
//! [`nix::errno::Errno`] / [`std::io::Error`]. No function here allocates
//! in a child between fork and exec of a multi-threaded process: the
//! launcher is started with `posix_spawn`, whose child runs no code of
//! ours, and the launcher itself forks only while it has one thread
//! ([`process::fork_single_threaded`] checks).
//!
//! One file per kind of resource: [`spawn`] (starting the launcher),
//! [`process`] (reaping, pidfds, signal dispositions), [`fd`] (inherited
//! fds and no-follow opens).

pub mod fd;
pub mod process;
pub mod spawn;

pub use fd::{close_fds_from, open_beneath, take_inherited_fd};
pub use process::{
    default_all_signals, drop_capability_bounding_set, fork_single_threaded, pidfd_open,
    pidfd_send_signal, reap, try_reap, watch_pidfd, ForkSide,
};
pub use spawn::{dup_above, pipe_above_status, spawn_launcher, StdioFrom, PLAN_FD, STATUS_FD};
