//! The call's credential broker: what lets a tool hold a placeholder where
//! a secret bound to hosts would be, so that the value is added only on the
//! way to those hosts (issue 34; `DESIGN.md` invariant 8).
//!
//! What is here so far: the placeholder a bound secret becomes
//! ([`placeholder`]), the call's own CA with its leaves ([`ca`]), and the
//! substitution of a value for its placeholder in a request for a bound
//! host, refusing one for any other ([`substitute`]), the value and its
//! encodings taken back out of an answer ([`scrub`]), both as same-length
//! replacement in a stream split anywhere ([`stream`]). The operator's bindings are read by
//! [`crate::env::binding`]. Nothing yet binds a secret in a call: until the
//! broker that substitutes and scrubs runs in the call, a secret reaches a
//! tool as its value, as it did before, and no config may bind one.
#![forbid(unsafe_code)]

pub mod ca;
pub mod encode;
pub mod placeholder;
pub mod scrub;
pub mod serve;
pub mod stream;
pub mod substitute;
pub mod trust;
