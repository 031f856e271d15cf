//! What runs inside the root worker, without a drop: the HTTP read tool
//! for calls the classifier judged `Stay` (`http_get`, `http_head` to a
//! public address, no secret asked for).
//!
//! Guarantees: every address a name resolves to, and every redirect hop, is
//! checked against the classifier's own egress rules before a connection
//! is made, and the connection goes only to the checked address
//! ([`fetch()`]); no proxy, no cookies, no ambient credentials; body and
//! time are capped. Nothing here launches, reads a home or holds a secret.
//! Built only with the `read-tool` feature; without it a stay verdict runs
//! as the user.
#![forbid(unsafe_code)]

pub mod fetch;

pub use fetch::{fetch, FetchConfig, FetchError, SystemResolver};
