//! Every raw syscall of the crate that needs `unsafe`, each wrapped once:
//! the bottom layer, below everything that launches or contains a call.
//!
//! Guarantees: nothing outside this room says `unsafe` (every other module
//! is `#![forbid(unsafe_code)]`, and `tests/architecture.rs` checks it). Each
//! block states why it is sound. Ids cross this boundary as
//! [`nix::unistd::Uid`]/[`nix::unistd::Gid`] newtypes; errors as
//! [`nix::errno::Errno`] / [`std::io::Error`]. Nothing forks: every child
//! (the launcher, a tool) is started by [`spawn`]'s
//! `clone(CLONE_VM|CLONE_VFORK)` (or `clone3` with the same flags, into a
//! cgroup), whose child runs only syscalls — no allocation, no lock —
//! between the clone and `execve`.
//!
//! One file per kind of resource: [`spawn`] (starting the launcher or a tool),
//! [`process`] (reaping, pidfds, signal dispositions), [`fd`] (inherited
//! fds and no-follow opens), [`net`] (network namespaces), [`keyring`]
//! (the call's own session keyring), [`mounts`] (changes of the mount
//! table).

pub mod fd;
pub mod keyring;
pub mod mounts;
pub mod net;
pub mod process;
pub mod spawn;

pub use fd::{close_fds_from, nothing_to_read, open_beneath, reader_gone, take_inherited_fd};
pub use keyring::{
    add_session_key, invalidate_key, join_anonymous_session_keyring, session_keyring_id,
};
pub use mounts::MountTableWatch;
pub use net::{current_netns, in_netns_of, listen_in_netns_of, loopback_up, NetnsId};
pub use process::{
    default_all_signals, drop_capability_bounding_set, pidfd_open, pidfd_send_signal, reap,
    set_idle_scheduling, set_normal_scheduling, try_reap, watch_pidfd, x32_abi_enabled,
};
pub use spawn::{
    dup_above, pipe_above_status, spawn_launcher, spawn_program, NewNamespaces, SpawnedLauncher,
    StdioFrom, AHEAD_OF_NEED, PLAN_FD, STATUS_FD,
};
