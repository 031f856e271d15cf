//! The worker's end of a call that holds a bound secret in network `host`:
//! the call runs in a network namespace of its own (its broker listens
//! there, out of every other process's reach), and this end, in the
//! worker's namespace, connects each request to its destination directly.
//!
//! Guarantees:
//! - A destination is connected to only after the egress rules
//!   ([`crate::classify::egress`]) pass its name and each address it
//!   resolves to; an address they refuse is used only when the operator's
//!   `egress_allow_ranges` names its range (`loopback`, `private`,
//!   `link-local`: [`crate::classify::egress::range_name`]). The address
//!   connected to is one that was checked: a name is resolved once.
//! - A refused destination is answered `403` with the reason; one that
//!   cannot be reached, `502`. Nothing of the request is sent to it.
//! - The request head is read strictly ([`super::proxy_head`]); a tool's
//!   `Proxy-Authorization` is removed, and a plain request is closed after
//!   its one response.
//! - The bytes carried are the call's own (TLS between the broker and the
//!   host): the worker sees no value.
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::proxy_head::{destination, rewrite, HeadError};
use crate::classify::egress;

/// What a direct end may connect to.
#[derive(Debug, Clone, Default)]
pub struct DirectRules {
    /// Range names the egress rules refuse that the operator allows.
    pub allow_ranges: Vec<String>,
}

impl DirectRules {
    /// Whether `addr` may be connected to, or the reason it may not.
    pub fn check(&self, addr: std::net::IpAddr) -> Result<(), String> {
        let refused = match addr {
            std::net::IpAddr::V4(a) => egress::check_v4(a),
            std::net::IpAddr::V6(a) => egress::check_v6(a),
        };
        match refused {
            Ok(()) => Ok(()),
            Err(_)
                if egress::range_name(addr)
                    .is_some_and(|r| self.allow_ranges.iter().any(|a| a == r)) =>
            {
                Ok(())
            }
            Err(e) => Err(format!("{} ({})", e.reason, e.code)),
        }
    }
}

/// How a head was answered when it could not be carried.
pub(super) struct Answer {
    /// The status line's code and reason.
    pub status: &'static str,
    /// Why, for the tool.
    pub why: String,
}

fn answer(status: &'static str, why: impl Into<String>) -> Answer {
    Answer {
        status,
        why: why.into(),
    }
}

/// The checked addresses of `host:port`.
async fn checked_addresses(
    host: &str,
    port: u16,
    rules: &DirectRules,
) -> Result<Vec<SocketAddr>, Answer> {
    let literal = host.parse::<std::net::IpAddr>().ok();
    if literal.is_none() {
        egress::check_name(host, &[]).map_err(|e| {
            answer(
                "403 Forbidden",
                format!("{host}: {} ({})", e.reason, e.code),
            )
        })?;
    }
    let resolved: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| answer("502 Bad Gateway", format!("{host} does not resolve: {e}")))?
            .collect(),
    };
    let mut refusal = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|a| match rules.check(a.ip()) {
            Ok(()) => true,
            Err(why) => {
                refusal.get_or_insert(why);
                false
            }
        })
        .collect();
    if allowed.is_empty() {
        let why = refusal.unwrap_or_else(|| "no address".into());
        return Err(answer(
            "403 Forbidden",
            format!("{host} is not connected to: {why}"),
        ));
    }
    Ok(allowed)
}

/// Carries one connection whose first head is `buf[..end]` (what follows
/// it in `buf` is already the call's next bytes) to its destination.
pub(super) async fn carry(
    call: &mut TcpStream,
    buf: &[u8],
    end: usize,
    rules: &DirectRules,
) -> Result<(), Answer> {
    let rewritten = rewrite(&buf[..end], None, None).map_err(|e| match e {
        HeadError::NotAllowed(_) => answer("403 Forbidden", e.to_string()),
        e => answer("400 Bad Request", e.to_string()),
    })?;
    let (host, port, connect) = destination(&buf[..end])
        .ok_or_else(|| answer("400 Bad Request", "the request names no host and port"))?;
    let addresses = checked_addresses(&host, port, rules).await?;
    let mut upstream = None;
    let mut last = None;
    for addr in addresses {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                // Relayed at once, as the call's end does (no Nagle delay).
                s.set_nodelay(true).ok();
                upstream = Some(s);
                break;
            }
            Err(e) => last = Some(format!("{addr}: {e}")),
        }
    }
    let Some(mut upstream) = upstream else {
        return Err(answer(
            "502 Bad Gateway",
            format!(
                "{host}:{port} could not be reached ({})",
                last.unwrap_or_default()
            ),
        ));
    };
    if connect {
        if call
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return Ok(());
        }
    } else if upstream.write_all(&rewritten).await.is_err() {
        return Ok(());
    }
    if upstream.write_all(&buf[end..]).await.is_err() {
        return Ok(());
    }
    let _ = tokio::io::copy_bidirectional(call, &mut upstream).await;
    Ok(())
}
