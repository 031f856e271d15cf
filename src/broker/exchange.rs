//! One request and its answer on a connection the broker intercepted: the
//! request read strictly, the value put in for a bound host, the answer
//! read strictly and scrubbed before the tool sees a byte of it.
//!
//! Guarantees: nothing is sent to the host before the whole head has been
//! read, checked and substituted, and the host's certificate verified; a
//! placeholder for a host its binding does not name answers `403
//! placeholder_not_bound` and nothing is sent. Every answer's head and
//! body pass the scrubber of every bound secret (whatever the host), split
//! anywhere; a `gzip` or `deflate` body is decompressed first and sent on
//! chunked without its `Content-Encoding`; an answer in any other coding
//! is refused (`502 answer_not_scrubbable`), never passed through; the
//! request asks the host for `Accept-Encoding: identity`. Each request is
//! recorded as a [`BrokerUse`]. Buffers that may hold a value are wiped.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use rustls::ClientConfig;
use zeroize::Zeroizing;

use super::body::{end_chunks, write_chunk, BodyReader};
use super::head::{parse_request, parse_response, Framing, HeadError, Request};
use super::scrub::scrubber;
use super::substitute::{rewrite_head, BodyRewriter, BoundSecret, Refusal};
use super::upstream::{self, Upstream};
use super::uses::{host_for_record, path_for_record, BrokerUse, UseLog};
use super::wire::{Wire, WireError};

/// What every connection of one broker shares.
pub struct CallState {
    /// The call's bound secrets.
    pub secrets: Vec<BoundSecret>,
    /// TLS toward hosts.
    pub client: Arc<ClientConfig>,
    /// The call's network end.
    pub upstream_proxy: SocketAddr,
    /// The record.
    pub uses: Mutex<UseLog>,
}

impl CallState {
    /// Adds a record.
    pub fn record(&self, u: BrokerUse) {
        if let Ok(mut log) = self.uses.lock() {
            log.record(u);
        }
    }
}

/// Whether the connection goes on after an exchange.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Read the next request.
    KeepAlive,
    /// Close it.
    Close,
}

/// A refusal or error the broker answers itself, always closing: the code
/// first, in the body and in `X-Tono-Broker`.
pub fn answer(out: &mut impl Write, status: u16, code: &str, detail: &str) -> io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("{code}: {detail}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nX-Tono-Broker: {code}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}

/// The status and code a head error is answered with.
pub fn head_refusal(e: &HeadError) -> (u16, &'static str) {
    match e {
        HeadError::Malformed(_) => (400, "malformed_request"),
        HeadError::Unsupported(what) if what.starts_with("Upgrade") => {
            (501, "upgrade_not_supported")
        }
        HeadError::Unsupported(_) => (501, "unsupported_request"),
    }
}

/// Request headers not passed on (hop-by-hop, or replaced by the broker).
const DROPPED_UP: &[&str] = &[
    "accept-encoding",
    "expect",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
];

/// Answer headers not passed on: hop-by-hop (the first three) and, for an
/// answer with a body, its framing (the broker frames it itself).
const DROPPED_DOWN: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "content-length",
];

enum Decode {
    Plain,
    Gzip,
    Deflate,
}

struct Record<'a> {
    state: &'a CallState,
    base: BrokerUse,
}

impl Record<'_> {
    fn done(mut self, status: u16, refused: Option<&str>) {
        self.base.status = status;
        self.base.refused = refused.map(str::to_string);
        self.state.record(self.base);
    }
}

/// Whether a `Host` header names `host` (with or without a port).
fn host_matches(value: &[u8], host: &str, port: u16) -> bool {
    let v = String::from_utf8_lossy(value).to_ascii_lowercase();
    let v = v.trim_end_matches('.');
    v == host || v == format!("{host}:{port}")
}

/// Reads one request from `tool` (a connection intercepted for `host`),
/// carries it to the host over `up` (opened on first need) and its
/// scrubbed answer back.
pub fn exchange<T: Read + Write>(
    state: &CallState,
    tool: &mut Wire<T>,
    up: &mut Option<Upstream>,
    host: &str,
    port: u16,
) -> Next {
    let head = match tool.read_head() {
        Ok(head) => head,
        Err(WireError::TooLarge(_)) => {
            let _ = answer(
                tool,
                431,
                "malformed_request",
                "the request head is too large",
            );
            return Next::Close;
        }
        Err(_) => return Next::Close,
    };
    let req = match parse_request(&head) {
        Ok(req) => req,
        Err(e) => {
            // Refused before a method or path could be read: on the
            // record without them.
            let (status, code) = head_refusal(&e);
            let _ = answer(tool, status, code, &e.to_string());
            state.record(BrokerUse {
                secrets: Vec::new(),
                host: host_for_record(host, &state.secrets),
                method: String::new(),
                path: String::new(),
                status,
                bytes_up: 0,
                bytes_down: 0,
                refused: Some(code.to_string()),
            });
            return Next::Close;
        }
    };
    let mut record = Record {
        state,
        base: BrokerUse {
            secrets: Vec::new(),
            host: host_for_record(host, &state.secrets),
            method: req.method.clone(),
            path: path_for_record(&req.target, &state.secrets),
            status: 0,
            bytes_up: 0,
            bytes_down: 0,
            refused: None,
        },
    };
    let refuse = |tool: &mut Wire<T>, record: Record, status: u16, code: &str, detail: &str| {
        let _ = answer(tool, status, code, detail);
        record.done(status, Some(code));
        Next::Close
    };
    let framing = match req.framing() {
        Ok(f) => f,
        Err(e) => {
            let (status, code) = head_refusal(&e);
            return refuse(tool, record, status, code, &e.to_string());
        }
    };
    if !(req.target.starts_with('/') || (*req.target == "*" && req.method == "OPTIONS")) {
        return refuse(
            tool,
            record,
            400,
            "malformed_request",
            "inside a CONNECT tunnel a request names its path (origin form)",
        );
    }
    let hosts: Vec<_> = req.headers.iter().filter(|h| h.is("host")).collect();
    // Exactly one Host, the tunnel's: without one the host would answer
    // as whichever name it serves by default.
    if hosts.len() != 1 || hosts.iter().any(|h| !host_matches(&h.value, host, port)) {
        return refuse(
            tool,
            record,
            400,
            "host_mismatch",
            &format!(
                "a request in this tunnel names exactly one Host, {host}, which the tunnel \
                 was opened to"
            ),
        );
    }
    let rebuilt = rebuild(&req);
    let (sent_head, subs) = match rewrite_head(&rebuilt, host, &state.secrets) {
        Ok(done) => done,
        Err(Refusal::NotBound { secret, host }) => {
            return refuse(
                tool,
                record,
                403,
                "placeholder_not_bound",
                &format!(
                    "{secret}'s placeholder was sent to {host}, which its binding does not name; nothing was sent"
                ),
            )
        }
    };
    for s in subs {
        if !record.base.secrets.contains(&s.secret) {
            record.base.secrets.push(s.secret);
        }
    }
    if up.is_none() {
        let opened = upstream::tunnel(state.upstream_proxy, &format!("{host}:{port}"))
            .and_then(|t| upstream::tls(t, host, state.client.clone()));
        match opened {
            Ok(conn) => *up = Some(conn),
            Err(e) => {
                record.base.secrets.clear();
                return refuse(tool, record, 502, e.code(), &e.to_string());
            }
        }
    }
    let Some(upc) = up.as_mut() else {
        return Next::Close;
    };
    if req.expects_continue()
        && (tool.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err() || tool.flush().is_err())
    {
        return Next::Close;
    }
    // The request: head, then body (rewritten where a binding says body).
    let sent = send_request(state, tool, upc, &sent_head, framing, host, &mut record);
    if let Err(e) = sent {
        *up = None;
        return refuse(
            tool,
            record,
            502,
            "upstream_failed",
            &format!("sending the request: {e}"),
        );
    }
    relay_answer(state, tool, up, &req, record)
}

/// The request's head as sent on: the tool's lines but the dropped ones,
/// and `Accept-Encoding: identity`.
fn rebuild(req: &Request) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(1024));
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.version.as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in &req.headers {
        if DROPPED_UP.iter().any(|d| h.is(d)) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Accept-Encoding: identity\r\n\r\n");
    out
}

fn send_request<T: Read + Write>(
    state: &CallState,
    tool: &mut Wire<T>,
    up: &mut Upstream,
    head: &[u8],
    framing: Framing,
    host: &str,
    record: &mut Record,
) -> io::Result<()> {
    up.write_all(head)?;
    let mut rewriter = BodyRewriter::new(host, &state.secrets);
    let mut body = BodyReader::new(tool, framing);
    let mut buf = Zeroizing::new(vec![0u8; 16 * 1024]);
    let chunked = framing == Framing::Chunked;
    let mut put = |up: &mut Upstream, piece: &[u8]| -> io::Result<()> {
        record.base.bytes_up += piece.len() as u64;
        if chunked {
            write_chunk(up, piece)
        } else {
            up.write_all(piece)
        }
    };
    loop {
        let n = body.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let out = rewriter.push(&buf[..n]);
        put(up, &out)?;
    }
    let out = rewriter.finish();
    put(up, &out)?;
    if chunked {
        end_chunks(up)?;
    }
    for name in &rewriter.substituted {
        if !record.base.secrets.contains(name) {
            record.base.secrets.push(name.clone());
        }
    }
    up.flush()
}

fn relay_answer<T: Read + Write>(
    state: &CallState,
    tool: &mut Wire<T>,
    up: &mut Option<Upstream>,
    req: &Request,
    mut record: Record,
) -> Next {
    let Some(upc) = up.as_mut() else {
        return Next::Close;
    };
    let refuse = |tool: &mut Wire<T>,
                  up: &mut Option<Upstream>,
                  record: Record,
                  code: &str,
                  detail: &str| {
        *up = None;
        let _ = answer(tool, 502, code, detail);
        record.done(502, Some(code));
        Next::Close
    };
    let resp = loop {
        let head = match upc.read_head() {
            Ok(h) => h,
            Err(e) => {
                return refuse(
                    tool,
                    up,
                    record,
                    "upstream_failed",
                    &format!("reading the answer: {e}"),
                )
            }
        };
        match parse_response(&head) {
            Ok(r) if r.status == 101 => {
                return refuse(
                    tool,
                    up,
                    record,
                    "answer_malformed",
                    "a switch of protocols nobody asked for",
                )
            }
            Ok(r) if r.status < 200 => continue,
            Ok(r) => break r,
            Err(e) => return refuse(tool, up, record, "answer_malformed", &e.to_string()),
        }
    };
    let framing = match resp.framing(&req.method) {
        Ok(f) => f,
        Err(HeadError::Unsupported(what)) => {
            return refuse(tool, up, record, "answer_not_scrubbable", what)
        }
        Err(e) => return refuse(tool, up, record, "answer_malformed", &e.to_string()),
    };
    let codings: Vec<String> = resp
        .content_codings()
        .into_iter()
        .filter(|c| c != "identity")
        .collect();
    let decode = if framing == Framing::None {
        Decode::Plain
    } else {
        match codings.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [] => Decode::Plain,
            ["gzip"] | ["x-gzip"] => Decode::Gzip,
            ["deflate"] => Decode::Deflate,
            _ => {
                return refuse(
                    tool,
                    up,
                    record,
                    "answer_not_scrubbable",
                    &format!(
                        "the host answered in Content-Encoding {:?}, which the broker cannot scrub",
                        codings.join(", ")
                    ),
                )
            }
        }
    };
    let decoded = !matches!(decode, Decode::Plain);
    let http11 = req.version == "HTTP/1.1";
    // How the tool gets the body.
    let (out_chunked, out_length) = match (framing, decoded) {
        (Framing::None, _) => (false, None),
        (Framing::Length(n), false) => (false, Some(n)),
        _ => (http11, None),
    };
    let close = req.closes()
        || resp.closes()
        || framing == Framing::ToClose
        || (framing != Framing::None && !out_chunked && out_length.is_none());
    // Sized up front: a growing Vec would leave unscrubbed copies behind.
    let size: usize = resp
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum::<usize>()
        + resp.reason.len()
        + 128;
    let mut head = Zeroizing::new(Vec::with_capacity(size));
    head.extend_from_slice(format!("HTTP/1.1 {} ", resp.status).as_bytes());
    head.extend_from_slice(resp.reason.as_bytes());
    head.extend_from_slice(b"\r\n");
    for h in &resp.headers {
        // Without a body (HEAD, 204, 304) the framing headers describe
        // what a GET would get and pass as they are.
        let framing_header = framing != Framing::None && DROPPED_DOWN[3..].iter().any(|d| h.is(d));
        if DROPPED_DOWN[..3].iter().any(|d| h.is(d))
            || framing_header
            || (decoded && h.is("content-encoding"))
        {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(&h.value);
        head.extend_from_slice(b"\r\n");
    }
    let mut scrub = scrubber(&state.secrets);
    let mut scrubbed = scrub.push(&head);
    scrubbed.extend_from_slice(&scrub.finish());
    if let Some(n) = out_length {
        scrubbed.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
    }
    if out_chunked {
        scrubbed.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if close {
        scrubbed.extend_from_slice(b"Connection: close\r\n");
    }
    scrubbed.extend_from_slice(b"\r\n");
    record.base.status = resp.status;
    if tool.write_all(&scrubbed).is_err() {
        *up = None;
        record.done(resp.status, Some("tool_gone"));
        return Next::Close;
    }
    let result = (|| -> io::Result<u64> {
        let body = BodyReader::new(upc, framing);
        let mut src: Box<dyn Read + '_> = match decode {
            Decode::Plain => Box::new(body),
            Decode::Gzip => Box::new(MultiGzDecoder::new(body)),
            Decode::Deflate => Box::new(ZlibDecoder::new(body)),
        };
        let mut scrub = scrubber(&state.secrets);
        let mut buf = Zeroizing::new(vec![0u8; 16 * 1024]);
        let mut down = 0u64;
        let mut put = |tool: &mut Wire<T>, piece: &[u8]| -> io::Result<()> {
            down += piece.len() as u64;
            if out_chunked {
                write_chunk(tool, piece)
            } else {
                tool.write_all(piece)
            }
        };
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let out = scrub.push(&buf[..n]);
            put(tool, &out)?;
        }
        let out = scrub.finish();
        put(tool, &out)?;
        if out_chunked {
            end_chunks(tool)?;
        }
        tool.flush()?;
        Ok(down)
    })();
    match result {
        Ok(down) => {
            record.base.bytes_down = down;
            if close || resp.closes() {
                *up = None;
            }
            let status = resp.status;
            record.done(status, None);
            if close {
                Next::Close
            } else {
                Next::KeepAlive
            }
        }
        Err(_) => {
            // The head is out: the tool sees the body cut short (no last
            // chunk, or fewer bytes than its length), never a whole answer.
            *up = None;
            record.done(resp.status, Some("answer_cut"));
            Next::Close
        }
    }
}
