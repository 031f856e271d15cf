//! The broker's way to a host: a `CONNECT` through the call's network end
//! (the worker's, at `127.0.0.1:3128` in the call's namespace), then TLS to
//! the host, verified against the system's roots and the operator's
//! `upstream_ca`.
//!
//! Guarantees: the host is reached only through the end given, never
//! directly; a `CONNECT` the end does not answer `2xx` is an error naming
//! its status and reason ([`UpstreamError::Refused`]); the TLS handshake
//! is completed — the host's certificate verified for the name the tool
//! asked for — before this returns, so a host that fails verification
//! ([`UpstreamError::Certificate`]) never receives a byte of a request.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::head::{parse_response, Framing};
use super::wire::Wire;

/// How long the broker waits for a host's next bytes.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a host could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The call's network end could not be reached (network `none`).
    #[error("the call's network end refused the connection: {0}")]
    Unreachable(String),
    /// The network end answered the `CONNECT` with something else than 2xx.
    #[error("the call's network end answered {status}: {reason}")]
    Refused {
        /// Its status.
        status: u16,
        /// Its reason and the start of its body.
        reason: String,
    },
    /// The host's certificate failed verification.
    #[error("{0}")]
    Certificate(String),
    /// TLS or the connection failed otherwise.
    #[error("{0}")]
    Failed(String),
}

impl UpstreamError {
    /// The refusal's code, which an answer puts before the message.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable(_) => "upstream_unreachable",
            UpstreamError::Refused { .. } => "upstream_refused",
            UpstreamError::Certificate(_) => "upstream_certificate_refused",
            UpstreamError::Failed(_) => "upstream_failed",
        }
    }
}

/// A TLS connection to a host through the call's network end.
pub type Upstream = Wire<StreamOwned<ClientConnection, Wire<TcpStream>>>;

/// The client configuration: `roots_pem`'s certificates trusted, HTTP/1.1
/// offered; with no certificate in `roots_pem` the store is empty and every
/// host is refused at its handshake. `None` only if rustls refuses the
/// configuration.
pub fn client_config(roots_pem: &[u8]) -> Option<Arc<ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(roots_pem)
        .filter_map(Result::ok)
        .collect();
    // No root at all (a host without ca-certificates, no upstream_ca):
    // the store is empty and every host is refused at its handshake
    // (`upstream_certificate_refused`), while the call itself runs.
    let _ = roots.add_parsable_certificates(certs);
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(Arc::new(config))
}

fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect::<String>()
        .trim()
        .to_string()
}

/// A tunnel to `authority` (`host:port`) through the end at `proxy`, with
/// whatever the end sent past its answer kept.
pub fn tunnel(proxy: SocketAddr, authority: &str) -> Result<Wire<TcpStream>, UpstreamError> {
    let tcp = TcpStream::connect(proxy).map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
    tcp.set_read_timeout(Some(UPSTREAM_TIMEOUT)).ok();
    tcp.set_nodelay(true).ok();
    let mut wire = Wire::new(tcp, b"");
    let ask = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    wire.write_all(ask.as_bytes())
        .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
    let head = wire
        .read_head()
        .map_err(|e| UpstreamError::Failed(format!("the network end's answer: {e}")))?;
    let resp = parse_response(&head)
        .map_err(|e| UpstreamError::Failed(format!("the network end's answer: {e}")))?;
    if (200..300).contains(&resp.status) {
        return Ok(wire);
    }
    let mut reason = resp.reason.clone();
    if let Ok(Framing::Length(n)) = resp.framing("CONNECT") {
        let mut body = vec![0u8; usize::try_from(n.min(1024)).unwrap_or(1024)];
        if wire.read_exact(&mut body).is_ok() && !body.is_empty() {
            reason = format!("{reason}: {}", printable(&body));
        }
    }
    Err(UpstreamError::Refused {
        status: resp.status,
        reason: printable(reason.as_bytes()),
    })
}

/// TLS to `host` over `tunnel`, the handshake done.
pub fn tls(
    tunnel: Wire<TcpStream>,
    host: &str,
    config: Arc<ClientConfig>,
) -> Result<Upstream, UpstreamError> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|_| UpstreamError::Failed(format!("{host:?} is not a server name")))?;
    let conn =
        ClientConnection::new(config, name).map_err(|e| UpstreamError::Failed(e.to_string()))?;
    let mut stream = StreamOwned::new(conn, tunnel);
    while stream.conn.is_handshaking() {
        if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
            let refused = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .is_some_and(|r| {
                    matches!(
                        r,
                        rustls::Error::InvalidCertificate(_)
                            | rustls::Error::NoCertificatesPresented
                    )
                });
            return Err(if refused {
                UpstreamError::Certificate(format!("{host}: {e}"))
            } else {
                UpstreamError::Failed(format!("TLS with {host}: {e}"))
            });
        }
    }
    Ok(Wire::new(stream, b""))
}
