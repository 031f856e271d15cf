//! The call's credential broker: what lets a tool hold a placeholder where
//! a secret bound to hosts would be, so that the value is added only on the
//! way to those hosts (issue 34; `DESIGN.md` invariant 8).
//!
//! The placeholder a bound secret becomes ([`placeholder`]), the call's
//! own CA with its leaves ([`ca`]), the substitution of a value for its
//! placeholder in a request for a bound host, refusing one for any other
//! ([`substitute`]), the value and its encodings taken back out of an
//! answer ([`scrub`]), both as same-length replacement in a stream split
//! anywhere ([`stream`]); the server the launcher runs in its threads
//! ([`serve`], with [`head`], [`wire`], [`body`], [`exchange`],
//! [`upstream`] and [`uses`]); what the call trusts and the variables that
//! say so ([`trust`]). The operator's bindings are read by
//! [`crate::env::binding`] and applied by the worker when it plans a call.
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
pub mod trust;
pub mod upstream;
pub mod uses;
pub mod wire;
