//! File operations that never follow a link: root's own folders by fd and
//! one validated name ([`root_dir::RootDir`]), and a tree removal through
//! fds ([`tree`]) that both root and the launcher (as the user) use.
//!
//! Guarantees: every folder is entered by an fd opened `O_NOFOLLOW` (or
//! `openat2` with `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`) relative to its
//! parent's fd; nothing is opened, chowned or removed by a path a user
//! could have changed between the look and the act.
#![forbid(unsafe_code)]

pub mod root_dir;
pub mod root_path;
pub mod tree;

pub use root_dir::{Component, RootDir, RootDirError};
