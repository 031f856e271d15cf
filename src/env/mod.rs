//! The fresh environment of a launched program, and the provider table it
//! is partly built from.
//!
//! Guarantees: a launched program's environment is built here from
//! nothing, by name ([`EnvBuilder`]); nothing is copied from the worker's
//! own environment; a proxy's userinfo never reaches it; every name passes
//! [`valid_env_name`] (the launcher checks the same rule again after the
//! drop). Below both the worker's side of a call (`drop`) and the runs of a
//! turn (`turn`), which build environments the same way.
#![forbid(unsafe_code)]

pub mod binding;
pub mod builder;
pub mod home;
pub mod name;
pub mod network;
pub mod provider;

pub use binding::{Binding, Bindings, BoundHost, BoundHosts, NarrowError};
pub use builder::{
    sanitize_proxy, BedrockSettings, EnvBuilder, EnvConfig, EnvError, RunEnv, TurnCredential,
};
pub use home::{HomeMode, HomeView};
pub use name::valid_env_name;
pub use network::{
    AllowHosts, Network, ProxyUpstream, ALLOWABLE_RANGES, BROKER_ADDR, CALL_PROXY_ADDR,
    PROXY_VARIABLES,
};
pub use provider::{Provider, ProviderSpec};
