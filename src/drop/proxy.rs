//! The worker's end of a call's proxy (network mode `proxy`): a listening
//! socket at [`CALL_PROXY_ADDR`] inside the call's own network namespace,
//! held by the worker, whose every connection the worker carries to the
//! configured proxy, adding the proxy's credentials itself.
//!
//! Guarantees:
//! - The socket is made by the worker as root, in the launcher's network
//!   namespace, by a thread of its own ([`crate::sys::listen_in_netns_of`]),
//!   before the launcher has a plan, so it is there before the tool and no
//!   tool can take the address first; it is never in any process of the
//!   call (the worker holds it), and no path names it: no user can reach
//!   another call's, which lives in another namespace.
//! - Each connection goes to the configured proxy's address and nowhere
//!   else, whatever the tool names: what the tool asks for is the proxy's
//!   to allow, or, with the operator's `proxy_allow_hosts`, the worker's
//!   end checks first (`403` for any other destination). The first request
//!   head is read strictly and rewritten ([`super::proxy_head`]); a head
//!   that is refused is answered `400` and goes nowhere.
//! - The proxy's password never enters the call: it is added on the
//!   worker's side of the connection, in a buffer wiped once sent.
//! - At most [`MAX_CONNECTIONS`] connections of one call are carried at
//!   once (the worker's descriptors are shared by every call); a head must
//!   arrive within [`HEAD_TIMEOUT`].
//! - Everything ends with the call: dropping the [`CallProxy`] closes the
//!   listening socket and every connection, so nothing of the call's
//!   namespace is held after it.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::proxy_head::{head_end, rewrite, HeadError, MAX_HEAD_BYTES};
use crate::env::{ProxyUpstream, CALL_PROXY_ADDR};
use crate::launch::report::{LaunchError, Stage};
use crate::sys;

/// How many connections of one call are carried at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send its first request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a call's end carries its connections.
#[derive(Debug, Clone)]
pub enum CallEnd {
    /// To the configured proxy, its credentials added (network `proxy`).
    Proxy(Arc<ProxyUpstream>),
    /// Straight to each destination the egress rules pass (network `host`
    /// for a call holding a bound secret: [`super::direct`]).
    Direct(Arc<super::direct::DirectRules>),
}

/// A call's proxy end, serving until dropped.
#[derive(Debug)]
pub struct CallProxy {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CallProxy {
    fn drop(&mut self) {
        // Aborting drops the listener and the set of connections, which
        // aborts each of them and closes their sockets.
        self.task.abort();
    }
}

/// Opens the proxy end in the network namespace of the launcher `pid`
/// (an unreaped child of the worker) and starts serving it.
pub async fn open(
    pid: libc::pid_t,
    upstream: CallEnd,
    broker_only: super::broker_only::BrokerOnly,
) -> Result<CallProxy, LaunchError> {
    let failed = |what: &str, e: std::io::Error| LaunchError {
        stage: Stage::Spawn,
        code: "proxy_unavailable".into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    };
    let addr = CALL_PROXY_ADDR
        .parse()
        .map_err(|e| LaunchError::new(Stage::Spawn, "proxy_unavailable", format!("{e}")))?;
    let listener = tokio::task::spawn_blocking(move || sys::listen_in_netns_of(pid, addr))
        .await
        .map_err(|e| failed("the namespace thread", std::io::Error::other(e.to_string())))?
        .map_err(|e| failed("listen in the call's network namespace", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed("set the listener non-blocking", e))?;
    let listener =
        TcpListener::from_std(listener).map_err(|e| failed("register the listener", e))?;
    Ok(CallProxy {
        task: tokio::spawn(serve(listener, upstream, Arc::new(broker_only))),
    })
}

async fn serve(
    listener: TcpListener,
    upstream: CallEnd,
    broker_only: Arc<super::broker_only::BrokerOnly>,
) {
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                // A relay writes what it reads at once: no Nagle delay
                // (with the peer's delayed ACK, 40 ms a small write).
                stream.set_nodelay(true).ok();
                let upstream = upstream.clone();
                let broker_only = broker_only.clone();
                connections.spawn(async move {
                    carry(stream, &upstream, &broker_only).await;
                    drop(permit);
                });
            }
            Err(e) => {
                // Out of descriptors or the like: wait, do not spin.
                tracing::warn!(error = %e, "the call's proxy could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn answer(stream: &mut TcpStream, status: &str, why: &str) {
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}\n",
        why.len() + 1
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Carries one connection of the call to the proxy, or, for a direct
/// end, to its destination.
async fn carry(
    mut call: TcpStream,
    call_end: &CallEnd,
    broker_only: &super::broker_only::BrokerOnly,
) {
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = head_end(&head) {
                return Ok(end);
            }
            if head.len() > MAX_HEAD_BYTES {
                return Err("the request head is too long");
            }
            match call.read(&mut buf).await {
                Ok(0) | Err(_) => return Err("the connection ended before a request head"),
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let end = match read {
        Ok(Ok(end)) => end,
        Ok(Err(why)) => return answer(&mut call, "400 Bad Request", why).await,
        Err(_) => return answer(&mut call, "408 Request Timeout", "no request head in time").await,
    };
    if let (Some((host, _, _)), Ok(peer)) = (
        super::proxy_head::destination(&head[..end]),
        call.peer_addr(),
    ) {
        if let Some(why) = broker_only.refuses(&host, peer) {
            return answer(&mut call, "403 Forbidden", &why).await;
        }
    }
    let upstream = match call_end {
        CallEnd::Proxy(upstream) => upstream,
        CallEnd::Direct(rules) => {
            if let Err(refused) = super::direct::carry(&mut call, &head, end, rules).await {
                answer(&mut call, refused.status, &refused.why).await;
            }
            return;
        }
    };
    let rewritten = match rewrite(
        &head[..end],
        upstream.authorization(),
        upstream.allow_hosts.as_ref(),
    ) {
        Ok(r) => r,
        Err(e @ HeadError::NotAllowed(_)) => {
            return answer(&mut call, "403 Forbidden", &e.to_string()).await
        }
        Err(e) => return answer(&mut call, "400 Bad Request", &e.to_string()).await,
    };
    let mut proxy = match TcpStream::connect(&upstream.address).await {
        Ok(p) => {
            p.set_nodelay(true).ok();
            p
        }
        Err(e) => {
            let why = format!("the proxy {} could not be reached: {e}", upstream.address);
            return answer(&mut call, "502 Bad Gateway", &why).await;
        }
    };
    if proxy.write_all(&rewritten).await.is_err() || proxy.write_all(&head[end..]).await.is_err() {
        return;
    }
    drop(rewritten);
    let _ = tokio::io::copy_bidirectional(&mut call, &mut proxy).await;
}
