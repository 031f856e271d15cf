//! The read tool that stays: `http_get`/`http_head` run inside the worker,
//! for calls the classifier judged `Stay`.
//!
//! Guarantees: the host is resolved here, by an injectable resolver, and
//! every address it returns is checked against the same egress table as
//! literal addresses (one refused address refuses the hop); the connection
//! goes only to the checked addresses (`resolve_to_addrs`), so DNS rebinding
//! between check and connect cannot reach the worker's network. Redirects
//! are followed by hand, at most [`MAX_REDIRECTS`], each hop re-checked by
//! the full URL rules and re-resolved; the caller's headers are sent only
//! to the origin the call named, never to a hop on another origin. No
//! proxy (the worker's `HTTP_PROXY` is ignored), no cookies, no ambient
//! credentials; body and time capped.
#![forbid(unsafe_code)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use url::{Host, Url};

use crate::classify::egress::{check_url, check_v4, check_v6, EgressRefusal};
use crate::classify::{Policy, ToolKind};

/// Most redirects followed.
pub const MAX_REDIRECTS: usize = 5;
/// Default cap on the body kept.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;
/// Default time for the whole read, redirects included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// A future of resolved addresses.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves host names for the read tool (injectable for tests).
pub trait AddrResolver: Send + Sync {
    /// Every address of `host`.
    fn resolve<'a>(&'a self, host: &'a str) -> Resolving<'a>;
}

/// The system resolver, through tokio.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl AddrResolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> Resolving<'a> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host, 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// Limits of one read.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Cap on body bytes kept.
    pub max_body: usize,
    /// Time for the whole read.
    pub timeout: Duration,
    /// Addresses allowed although the table refuses them: tests only, to
    /// reach a local server; empty in every real configuration.
    pub test_only_allow: Vec<IpAddr>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            max_body: DEFAULT_MAX_BODY,
            timeout: DEFAULT_TIMEOUT,
            test_only_allow: Vec::new(),
        }
    }
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetched {
    /// HTTP status of the last hop.
    pub status: u16,
    /// The URL of the last hop.
    pub url: String,
    /// Redirects followed.
    pub redirects: usize,
    /// The `content-type`, if any.
    pub content_type: Option<String>,
    /// The body (at most the cap).
    pub body: Vec<u8>,
    /// The body was longer than the cap.
    pub truncated: bool,
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A hop, or an address a hop resolved to, broke an egress rule.
    #[error("refused: {} ({})", .0.reason, .0.code)]
    Refused(EgressRefusal),
    /// Too many redirects.
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    /// The name did not resolve.
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
    /// The request failed.
    #[error("request failed: {0}")]
    Http(String),
    /// The whole read took too long.
    #[error("timed out")]
    Timeout,
}

impl FetchError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Refused(r) => r.code,
            Self::TooManyRedirects => "too_many_redirects",
            Self::Resolve(..) => "resolve_failed",
            Self::Http(_) => "http_failed",
            Self::Timeout => "fetch_timed_out",
        }
    }
}

fn check_ip(ip: IpAddr, cfg: &FetchConfig) -> Result<(), FetchError> {
    if cfg.test_only_allow.contains(&ip) {
        return Ok(());
    }
    let checked = match ip {
        IpAddr::V4(a) => check_v4(a),
        IpAddr::V6(a) => check_v6(a),
    };
    checked.map_err(FetchError::Refused)
}

/// Checks one hop's URL by the full rules; a test-only allowed literal is
/// let through the address table, never through the other rules.
fn check_hop(url: &str, policy: &Policy, cfg: &FetchConfig) -> Result<Url, FetchError> {
    match check_url(url, policy.stay_ports(), policy.denied_suffixes()) {
        Ok(checked) => Ok(checked.0),
        Err(refusal) => {
            let parsed = Url::parse(url).ok();
            let literal = parsed.as_ref().and_then(|u| match u.host() {
                Some(Host::Ipv4(a)) => Some(IpAddr::V4(a)),
                Some(Host::Ipv6(a)) => Some(IpAddr::V6(a)),
                _ => None,
            });
            match (parsed, literal) {
                (Some(u), Some(ip))
                    if refusal.code == "ip_not_public" && cfg.test_only_allow.contains(&ip) =>
                {
                    Ok(u)
                }
                _ => Err(FetchError::Refused(refusal)),
            }
        }
    }
}

/// Runs a stayed read of `url` with `headers`.
pub async fn fetch(
    kind: ToolKind,
    url: &str,
    headers: &[(String, String)],
    policy: &Policy,
    cfg: &FetchConfig,
    resolver: &dyn AddrResolver,
) -> Result<Fetched, FetchError> {
    tokio::time::timeout(
        cfg.timeout,
        fetch_hops(kind, url, headers, policy, cfg, resolver),
    )
    .await
    .map_err(|_| FetchError::Timeout)?
}

async fn fetch_hops(
    kind: ToolKind,
    url: &str,
    headers: &[(String, String)],
    policy: &Policy,
    cfg: &FetchConfig,
    resolver: &dyn AddrResolver,
) -> Result<Fetched, FetchError> {
    let mut current = check_hop(url, policy, cfg)?;
    // The caller's headers (a token, say) go only to the origin it named,
    // never to one a redirect names.
    let origin = current.origin();
    for redirects in 0..=MAX_REDIRECTS {
        let port = current.port_or_known_default().unwrap_or(80);
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .user_agent(concat!("tono-seal/", env!("CARGO_PKG_VERSION")));
        if let Some(Host::Domain(name)) = current.host() {
            let name = name.to_owned();
            let addrs = resolver
                .resolve(&name)
                .await
                .map_err(|e| FetchError::Resolve(name.clone(), e.to_string()))?;
            if addrs.is_empty() {
                return Err(FetchError::Resolve(name, "no address".into()));
            }
            for ip in &addrs {
                check_ip(*ip, cfg)?;
            }
            let sockets: Vec<SocketAddr> =
                addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
            builder = builder.resolve_to_addrs(&name, &sockets);
        }
        let client = builder
            .build()
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let method = if kind == ToolKind::HttpHead {
            reqwest::Method::HEAD
        } else {
            reqwest::Method::GET
        };
        let mut request = client.request(method, current.clone());
        if current.origin() == origin {
            for (k, v) in headers {
                request = request.header(k, v);
            }
        }
        let response = request
            .send()
            .await
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let status = response.status();
        if status.is_redirection() {
            if let Some(location) = response.headers().get(reqwest::header::LOCATION) {
                if redirects == MAX_REDIRECTS {
                    return Err(FetchError::TooManyRedirects);
                }
                let location = location
                    .to_str()
                    .map_err(|_| FetchError::Http("a non-text Location".into()))?;
                let next = current
                    .join(location)
                    .map_err(|e| FetchError::Http(format!("bad Location: {e}")))?;
                current = check_hop(next.as_str(), policy, cfg)?;
                continue;
            }
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut truncated = false;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| FetchError::Http(e.to_string()))?;
            let room = cfg.max_body - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                truncated = true;
                break;
            }
        }
        return Ok(Fetched {
            status: status.as_u16(),
            url: current.to_string(),
            redirects,
            content_type,
            body,
            truncated,
        });
    }
    Err(FetchError::TooManyRedirects)
}
