//! The call's credential broker: what lets a tool hold a placeholder where
//! a secret bound to hosts would be, so that the value is added only on the
//! way to those hosts (issue 34; `DESIGN.md` invariant 8).
//!
//! What is here: the placeholder a bound secret becomes ([`placeholder`]),
//! the call's own CA with its leaves ([`ca`]), the substitution of a value
//! for its placeholder in a request for a bound host, refusing one for any
//! other ([`substitute`]), the value and its encodings taken back out of an
//! answer ([`scrub`]), both as same-length replacement in a stream split
//! anywhere ([`stream`]); and the server that does it in a call
//! ([`serve`]), with one intercepted exchange ([`exchange`]), the strict
//! heads ([`head`]), bodies ([`body`]), the stream under both ([`wire`]),
//! the way to a host through the call's network end ([`upstream`]) and the
//! record of each use ([`uses`]). The operator's bindings are read by
//! [`crate::env::binding`]. The launcher starts the server for a call that
//! names a bound secret (issue 34's wiring, on the lead's side).
#![forbid(unsafe_code)]

pub mod body;
pub mod ca;
pub mod encode;
pub mod exchange;
pub mod head;
pub mod placeholder;
pub mod scrub;
pub mod serve;
pub mod stream;
pub mod substitute;
pub mod upstream;
pub mod uses;
pub mod wire;
