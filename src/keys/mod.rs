//! Per-user age keys and the secrets sealed to them.
//!
//! Guarantees:
//! - the on-disk layout is `~/.tono/` (0700), `~/.tono/identity` (0600),
//!   `~/.tono/recipient` (0644) and `~/.tono/secrets/NAME.age` (0600), all
//!   written by the user itself (this module never changes a process's
//!   credentials: callers run it as the owner, through `tono-launch`);
//! - an identity is opened only if it is a regular file, not a symlink, owned
//!   by the opening uid, not group/other accessible and at most 64 KiB;
//! - every write is atomic (temp file in the same folder, fsync, rename,
//!   fsync of the folder), so an interrupted write never replaces a good file;
//! - plaintext lives only in [`secrecy`]/[`zeroize`] buffers that are wiped
//!   on drop, and no value appears in a `Debug` output or an error message.
#![forbid(unsafe_code)]

pub mod atomic;
pub mod error;
pub mod health;
pub mod identity;
pub mod name;
pub mod seal;
pub mod store;

pub use error::KeysError;
pub use health::{EntryHealth, State, StoreHealth};
pub use identity::IdentitySet;
pub use name::SecretName;
pub use store::{KeyStore, SecretInfo};
