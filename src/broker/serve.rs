//! The call's broker as a server: the tool's `HTTPS_PROXY`, listening on a
//! loopback socket in the call's network namespace, run by threads of the
//! launcher as the user.
//!
//! Guarantees: a `CONNECT` to a host some binding names is intercepted —
//! answered `200`, TLS ended with the call CA's leaf for that host, and
//! each request carried by [`super::exchange`]; a `CONNECT` to any other
//! host is tunnelled untouched through the call's network end, never
//! intercepted; a plain `http://` request that carries a placeholder (raw,
//! percent-encoded or in a `Basic` credential) is refused `403
//! placeholder_needs_tls` and recorded, never substituted, and any other is
//! passed on through the network end with `Connection: close`, its answer
//! scrubbed. At most [`MAX_CONNECTIONS`] tool connections at once (more
//! get `503`); a head must come within [`HEAD_TIMEOUT`] of the last
//! bytes; the leaf cache holds at most [`MAX_LEAVES`] hosts and the record
//! is bounded ([`super::uses`]), so nothing grows per request. No value or
//! placeholder reaches an error, a log or a record.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection, StreamOwned};
use zeroize::Zeroizing;

use super::ca::CallCa;
use super::exchange::{answer, exchange, head_refusal, CallState, Next};
use super::head::{parse_request, Request};
use super::scrub::scrubber;
use super::substitute::{rewrite_head, BoundSecret, Refusal};
use super::upstream::{self, UPSTREAM_TIMEOUT};
use super::uses::{host_for_record, path_for_record, BrokerUse, UseLog};
use super::wire::Wire;

/// Tool connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long the broker waits for the next bytes of a tool's head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Hosts whose TLS configuration is kept.
pub const MAX_LEAVES: usize = 64;

/// What a call's broker is started with.
pub struct BrokerSetup {
    /// The call's bound secrets (values wiped when dropped).
    pub secrets: Vec<BoundSecret>,
    /// The call's CA.
    pub ca: CallCa,
    /// The certificates trusted for hosts: the system's roots and the
    /// operator's `upstream_ca`, PEM.
    pub roots_pem: Vec<u8>,
    /// The call's network end (the worker's, `127.0.0.1:3128`).
    pub upstream_proxy: SocketAddr,
}

/// Why a broker did not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The TLS client configuration could not be built.
    #[error("the broker's TLS client configuration could not be built")]
    NoRoots,
    /// The listener failed.
    #[error("the broker's listener: {0}")]
    Listener(#[source] io::Error),
    /// The accept thread could not start.
    #[error("starting the broker's thread: {0}")]
    Thread(#[source] io::Error),
}

struct Shared {
    state: CallState,
    ca: CallCa,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
    open: AtomicUsize,
}

/// A running broker.
pub struct Broker {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Broker {
    /// What it did so far: one record per request intercepted or refused.
    pub fn uses(&self) -> Vec<BrokerUse> {
        self.shared
            .state
            .uses
            .lock()
            .map(|l| l.all())
            .unwrap_or_default()
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tool connections being served now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Waits until no tool connection is open, so that every request
    /// answered has been recorded (a connection records its use after the
    /// tool has its answer), for at most [`SETTLE_ROUNDS`] × 5 ms;
    /// whether it got there. A connection the tool left open (a process
    /// of its still holding one) keeps it from getting there.
    pub fn settle(&self) -> bool {
        for _ in 0..SETTLE_ROUNDS {
            if self.open_connections() == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.open_connections() == 0
    }
}

/// How many times [`Broker::settle`] looks before it gives up.
pub const SETTLE_ROUNDS: usize = 200;

/// Starts serving on `listener` (a thread accepting, one per connection);
/// returns at once.
pub fn start(listener: TcpListener, setup: BrokerSetup) -> Result<Broker, BrokerError> {
    let client = upstream::client_config(&setup.roots_pem).ok_or(BrokerError::NoRoots)?;
    let addr = listener.local_addr().map_err(BrokerError::Listener)?;
    listener
        .set_nonblocking(false)
        .map_err(BrokerError::Listener)?;
    let shared = Arc::new(Shared {
        state: CallState {
            secrets: setup.secrets,
            client,
            upstream_proxy: setup.upstream_proxy,
            uses: Mutex::new(UseLog::default()),
        },
        ca: setup.ca,
        leaves: Mutex::new(HashMap::new()),
        open: AtomicUsize::new(0),
    });
    let accepting = shared.clone();
    std::thread::Builder::new()
        .name("tono-broker".into())
        .spawn(move || accept_loop(&listener, &accepting))
        .map_err(BrokerError::Thread)?;
    Ok(Broker { shared, addr })
}

/// Holds one of the [`MAX_CONNECTIONS`] places until dropped.
struct Place(Arc<Shared>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let mut tcp = match listener.accept() {
            Ok((tcp, _)) => tcp,
            Err(_) => {
                // Out of descriptors or a connection reset before accept:
                // wait a moment rather than spin.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            let _ = answer(
                &mut tcp,
                503,
                "broker_busy",
                &format!("the broker serves {MAX_CONNECTIONS} connections at once"),
            );
            continue;
        }
        let place = Place(shared.clone());
        let spawned = std::thread::Builder::new()
            .name("tono-broker-conn".into())
            .spawn(move || {
                let place = place;
                serve_connection(&place.0, tcp);
            });
        // A thread that could not start dropped its place with its closure.
        let _ = spawned;
    }
}

/// The host and port of a `CONNECT` target (`host:port`, `[v6]:port`),
/// the host lower case without a trailing dot.
fn authority(target: &str) -> Option<(String, u16)> {
    if target.contains(['/', '@', '?', '#']) {
        return None;
    }
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || host.contains(':') && !target.starts_with('[') {
        return None;
    }
    Some((host.trim_end_matches('.').to_ascii_lowercase(), port))
}

fn serve_connection(shared: &Arc<Shared>, tcp: TcpStream) {
    tcp.set_read_timeout(Some(HEAD_TIMEOUT)).ok();
    tcp.set_nodelay(true).ok();
    let mut wire = Wire::new(tcp, b"");
    let Ok(head) = wire.read_head() else {
        let _ = answer(&mut wire, 400, "malformed_request", "no request head");
        return;
    };
    let req = match parse_request(&head) {
        Ok(req) => req,
        Err(e) => {
            let (status, code) = head_refusal(&e);
            let _ = answer(&mut wire, status, code, &e.to_string());
            return;
        }
    };
    if req.method == "CONNECT" {
        let Some((host, port)) = authority(&req.target) else {
            let _ = answer(
                &mut wire,
                400,
                "malformed_request",
                "CONNECT names something other than host:port",
            );
            return;
        };
        let bound = shared
            .state
            .secrets
            .iter()
            .any(|s| s.binding.hosts.allows(&host));
        if bound {
            intercept(shared, wire, &host, port);
        } else {
            tunnel(shared, wire, &req.target);
        }
    } else if req
        .target
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    {
        plain(shared, wire, &req);
    } else {
        let _ = answer(
            &mut wire,
            400,
            "malformed_request",
            "a request to the broker is a CONNECT or names an absolute http:// target",
        );
    }
}

fn server_config(shared: &Shared, host: &str) -> Option<Arc<ServerConfig>> {
    let mut leaves = shared.leaves.lock().ok()?;
    if let Some(config) = leaves.get(host) {
        return Some(config.clone());
    }
    let leaf = shared.ca.leaf_for(host).ok()?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_no_client_auth()
            .with_single_cert(leaf.chain, leaf.key)
            .ok()?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    if leaves.len() >= MAX_LEAVES {
        leaves.clear();
    }
    leaves.insert(host.to_string(), config.clone());
    Some(config)
}

fn intercept(shared: &Arc<Shared>, mut wire: Wire<TcpStream>, host: &str, port: u16) {
    let Some(config) = server_config(shared, host) else {
        let _ = answer(
            &mut wire,
            502,
            "broker_failed",
            "no certificate could be made for the host",
        );
        return;
    };
    if wire
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut tool = Wire::new(StreamOwned::new(conn, wire), b"");
    let mut up = None;
    while exchange(&shared.state, &mut tool, &mut up, host, port) == Next::KeepAlive {}
    tool.inner.conn.send_close_notify();
    let _ = tool.flush();
    linger(&tool.inner.sock.inner);
}

/// Closes a tool connection so that an answer already written is read
/// before the close: no more writes, then what the tool still sends read
/// and dropped for a moment (a close with unread bytes would reset the
/// connection and could take the answer with it).
fn linger(tcp: &TcpStream) {
    let _ = tcp.shutdown(Shutdown::Write);
    tcp.set_read_timeout(Some(Duration::from_millis(500))).ok();
    let mut sink = Zeroizing::new([0u8; 4096]);
    let mut left: usize = 1 << 20;
    let mut r = tcp;
    while left > 0 {
        match r.read(&mut sink[..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn copy(mut from: impl Read, mut to: impl Write) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

fn tunnel(shared: &Arc<Shared>, mut wire: Wire<TcpStream>, target: &str) {
    let mut up = match upstream::tunnel(shared.state.upstream_proxy, target) {
        Ok(up) => up,
        Err(e) => {
            let _ = answer(&mut wire, 502, e.code(), &e.to_string());
            return;
        }
    };
    if wire
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    // Bytes each side sent ahead of the tunnel, then the sockets.
    if up.write_all(wire.pending()).is_err() || wire.inner.write_all(up.pending()).is_err() {
        return;
    }
    let (tool, far) = (wire.inner, up.inner);
    // A tunnel may idle as long as its ends like (a long poll, a stream).
    tool.set_read_timeout(None).ok();
    far.set_read_timeout(None).ok();
    let (Ok(tool2), Ok(far2)) = (tool.try_clone(), far.try_clone()) else {
        return;
    };
    let upward = std::thread::Builder::new()
        .name("tono-broker-tunnel".into())
        .spawn(move || {
            copy(&tool2, &far2);
            let _ = far2.shutdown(Shutdown::Write);
        });
    copy(&far, &tool);
    let _ = tool.shutdown(Shutdown::Write);
    match upward {
        Ok(t) => {
            let _ = t.join();
        }
        Err(_) => {
            let _ = far.shutdown(Shutdown::Both);
        }
    }
}

/// The host of an absolute `http://` target, for the record.
fn http_host(target: &str) -> String {
    let rest = &target[7..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split(']')
            .next()
            .unwrap_or(host)
            .trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or(host)
    };
    host.to_ascii_lowercase()
}

/// A host name no binding allows (a bound host has two labels at least):
/// `rewrite_head` for it finds every placeholder and substitutes none.
const NO_HOST: &str = "";

fn plain(shared: &Arc<Shared>, mut wire: Wire<TcpStream>, req: &Request) {
    let host = http_host(&req.target);
    let mut head = Zeroizing::new(Vec::with_capacity(1024));
    head.extend_from_slice(format!("{} ", req.method).as_bytes());
    head.extend_from_slice(req.target.as_bytes());
    head.extend_from_slice(format!(" {}\r\n", req.version).as_bytes());
    for h in &req.headers {
        if [
            "connection",
            "proxy-connection",
            "keep-alive",
            "proxy-authorization",
        ]
        .iter()
        .any(|d| h.is(d))
        {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(&h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    if let Err(Refusal::NotBound { secret, .. }) =
        rewrite_head(&head, NO_HOST, &shared.state.secrets)
    {
        let path = path_for_record(&req.target[7..], &shared.state.secrets);
        let path = path
            .find('/')
            .map_or("/".to_string(), |i| path[i..].to_string());
        shared.state.record(BrokerUse {
            secrets: Vec::new(),
            host: host_for_record(&host, &shared.state.secrets),
            method: req.method.clone(),
            path,
            status: 403,
            bytes_up: 0,
            bytes_down: 0,
            refused: Some("placeholder_needs_tls".into()),
        });
        let _ = answer(
            &mut wire,
            403,
            "placeholder_needs_tls",
            &format!("{secret}'s placeholder was sent over plain http to {host}: a value is put in only over https (CONNECT) to a bound host; nothing was sent"),
        );
        linger(&wire.inner);
        return;
    }
    let framing = match req.framing() {
        Ok(f) => f,
        Err(e) => {
            let (status, code) = head_refusal(&e);
            let _ = answer(&mut wire, status, code, &e.to_string());
            linger(&wire.inner);
            return;
        }
    };
    let mut up = match TcpStream::connect(shared.state.upstream_proxy) {
        Ok(up) => {
            up.set_nodelay(true).ok();
            up
        }
        Err(e) => {
            let _ = answer(
                &mut wire,
                502,
                "upstream_unreachable",
                &format!("the call's network end refused the connection: {e}"),
            );
            return;
        }
    };
    up.set_read_timeout(Some(UPSTREAM_TIMEOUT)).ok();
    if up.write_all(&head).is_err() {
        return;
    }
    {
        let mut body = super::body::BodyReader::new(&mut wire, framing);
        let mut buf = Zeroizing::new(vec![0u8; 16 * 1024]);
        let chunked = framing == super::head::Framing::Chunked;
        loop {
            match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let sent = if chunked {
                        super::body::write_chunk(&mut up, &buf[..n])
                    } else {
                        up.write_all(&buf[..n])
                    };
                    if sent.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        if chunked && super::body::end_chunks(&mut up).is_err() {
            return;
        }
    }
    // The answer, scrubbed as it streams (same length: its framing holds).
    let mut scrub = scrubber(&shared.state.secrets);
    let mut buf = Zeroizing::new(vec![0u8; 16 * 1024]);
    loop {
        match up.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if wire.write_all(&scrub.push(&buf[..n])).is_err() {
                    return;
                }
            }
        }
    }
    let _ = wire.write_all(&scrub.finish());
    linger(&wire.inner);
}
