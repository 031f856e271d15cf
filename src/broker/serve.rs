//! STUB: replaced by the broker helper's server.
#![forbid(unsafe_code)]
use serde::{Deserialize, Serialize};

use super::ca::CallCa;
use super::substitute::BoundSecret;

/// The broker's set-up.
pub struct BrokerSetup {
    /// Bound secrets.
    pub secrets: Vec<BoundSecret>,
    /// The CA.
    pub ca: CallCa,
    /// Roots.
    pub roots_pem: Vec<u8>,
    /// The worker's end.
    pub upstream_proxy: std::net::SocketAddr,
}
/// A running broker.
pub struct Broker;
/// Error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BrokerError(String);
/// One use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerUse {
    /// s
    pub secrets: Vec<String>,
    /// h
    pub host: String,
    /// m
    pub method: String,
    /// p
    pub path: String,
    /// s
    pub status: u16,
    /// b
    pub bytes_up: u64,
    /// b
    pub bytes_down: u64,
    /// r
    pub refused: Option<String>,
}
/// Starts.
pub fn start(_listener: std::net::TcpListener, _setup: BrokerSetup) -> Result<Broker, BrokerError> {
    Err(BrokerError("stub".into()))
}
impl Broker {
    /// Uses.
    pub fn uses(&self) -> Vec<BrokerUse> {
        Vec::new()
    }
}
