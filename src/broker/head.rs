//! The strict reading of the HTTP/1.1 heads the broker passes on: a tool's
//! request and a host's answer, and how long each body is.
//!
//! Guarantees: a head is accepted only in the shape every parser reads
//! alike (the rules of the worker's proxy end): lines ended by CRLF, no
//! bare CR or LF, no control byte but HTAB, no folded line, header names
//! that are tokens, `HTTP/1.0` or `HTTP/1.1`. A request's body is framed
//! by one `Content-Length` or by `Transfer-Encoding: chunked`, never both
//! and never another transfer coding; a request asking to `Upgrade` is
//! refused ([`HeadError::Unsupported`], answered `501`), as is an `Expect`
//! other than `100-continue`. Header values are held in wiped buffers
//! (one may be a credential) and no value appears in an error or `Debug`.
#![forbid(unsafe_code)]

use std::fmt;

use zeroize::Zeroizing;

/// Why a head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Not in the strict shape (answered `400`, or `502` for an answer).
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// A form the broker does not carry (answered `501`).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

/// One header line: its name and value (wiped when dropped).
pub struct Header {
    /// The name as sent.
    pub name: String,
    /// The value, without the spaces around it.
    pub value: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: <{} bytes>", self.name, self.value.len())
    }
}

impl Header {
    /// Whether its name is `name` (any case).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }

    /// The value as text, trimmed, lower case (for framing headers only).
    pub fn token(&self) -> String {
        String::from_utf8_lossy(&self.value)
            .trim()
            .to_ascii_lowercase()
    }
}

/// How a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (answers only).
    ToClose,
}

/// A request head, read strictly.
pub struct Request {
    /// The method.
    pub method: String,
    /// The target as sent (may hold a placeholder; never logged).
    pub target: Zeroizing<String>,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    /// The header lines in order.
    pub headers: Vec<Header>,
}

impl fmt::Debug for Request {
    // The target may hold a placeholder: only its length is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("target_len", &self.target.len())
            .field("version", &self.version)
            .field("headers", &self.headers)
            .finish()
    }
}

/// An answer's head, read strictly.
#[derive(Debug)]
pub struct Response {
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// The header lines in order.
    pub headers: Vec<Header>,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The lines of a head ending in `\r\n\r\n`, each checked: CRLF only, no
/// control byte but HTAB.
fn lines(head: &[u8]) -> Result<Vec<&[u8]>, HeadError> {
    let body = head.strip_suffix(b"\r\n\r\n").ok_or(HeadError::Malformed(
        "the head does not end with an empty line",
    ))?;
    let raw: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let last = raw.len() - 1;
    let mut out = Vec::with_capacity(raw.len());
    for (i, line) in raw.into_iter().enumerate() {
        let line = if i < last {
            line.strip_suffix(b"\r")
                .ok_or(HeadError::Malformed("a line ends in a bare LF"))?
        } else {
            line
        };
        if line.contains(&b'\r') {
            return Err(HeadError::Malformed("a bare CR"));
        }
        if !line
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
        {
            return Err(HeadError::Malformed("a control byte"));
        }
        out.push(line);
    }
    Ok(out)
}

fn headers(lines: &[&[u8]]) -> Result<Vec<Header>, HeadError> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if line.is_empty() {
            return Err(HeadError::Malformed("an empty line inside the head"));
        }
        if line[0] == b' ' || line[0] == b'\t' {
            return Err(HeadError::Malformed("a folded header line"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::Malformed("a header line without a colon"))?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(HeadError::Malformed("a header name that is not a token"));
        }
        let value = &line[colon + 1..];
        let start = value
            .iter()
            .position(|b| *b != b' ' && *b != b'\t')
            .unwrap_or(value.len());
        let end = value
            .iter()
            .rposition(|b| *b != b' ' && *b != b'\t')
            .map_or(start, |e| e + 1);
        out.push(Header {
            // A token is ASCII.
            name: String::from_utf8_lossy(name).into_owned(),
            value: Zeroizing::new(value[start..end.max(start)].to_vec()),
        });
    }
    Ok(out)
}

fn version_ok(v: &[u8]) -> bool {
    v == b"HTTP/1.1" || v == b"HTTP/1.0"
}

/// Reads a request head (ending in `\r\n\r\n`).
pub fn parse_request(head: &[u8]) -> Result<Request, HeadError> {
    let lines = lines(head)?;
    let (first, rest) = lines
        .split_first()
        .ok_or(HeadError::Malformed("no request line"))?;
    let parts: Vec<&[u8]> = first.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(HeadError::Malformed(
            "the request line is not METHOD SP target SP version",
        ));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HeadError::Malformed("a method that is not a token"));
    }
    if !version_ok(version) {
        return Err(HeadError::Malformed("a version other than HTTP/1.0 or 1.1"));
    }
    if target.is_empty() || !target.iter().all(u8::is_ascii_graphic) {
        return Err(HeadError::Malformed("an empty or non-ASCII target"));
    }
    Ok(Request {
        method: String::from_utf8_lossy(method).into_owned(),
        target: Zeroizing::new(String::from_utf8_lossy(target).into_owned()),
        version: String::from_utf8_lossy(version).into_owned(),
        headers: headers(rest)?,
    })
}

/// Reads an answer's head (ending in `\r\n\r\n`).
pub fn parse_response(head: &[u8]) -> Result<Response, HeadError> {
    let lines = lines(head)?;
    let (first, rest) = lines
        .split_first()
        .ok_or(HeadError::Malformed("no status line"))?;
    let mut parts = first.splitn(3, |&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    let reason = parts.next().unwrap_or_default();
    if !version_ok(version) {
        return Err(HeadError::Malformed("a version other than HTTP/1.0 or 1.1"));
    }
    if code.len() != 3 || !code.iter().all(u8::is_ascii_digit) {
        return Err(HeadError::Malformed("a status that is not three digits"));
    }
    let status: u16 = String::from_utf8_lossy(code).parse().unwrap_or(0);
    if status < 100 {
        return Err(HeadError::Malformed("a status below 100"));
    }
    Ok(Response {
        version: String::from_utf8_lossy(version).into_owned(),
        status,
        reason: String::from_utf8_lossy(reason).into_owned(),
        headers: headers(rest)?,
    })
}

/// The one `Content-Length` or `chunked` of a message's headers; `None`
/// when it has neither.
fn framing_of(headers: &[Header]) -> Result<Option<Framing>, HeadError> {
    let te: Vec<&Header> = headers
        .iter()
        .filter(|h| h.is("transfer-encoding"))
        .collect();
    let cl: Vec<&Header> = headers.iter().filter(|h| h.is("content-length")).collect();
    match (te.len(), cl.len()) {
        (0, 0) => Ok(None),
        (0, 1) => {
            let v = &cl[0].value;
            if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
                return Err(HeadError::Malformed(
                    "a Content-Length that is not a number",
                ));
            }
            let n = String::from_utf8_lossy(v).parse().unwrap_or(u64::MAX);
            Ok(Some(Framing::Length(n)))
        }
        (0, _) => Err(HeadError::Malformed("more than one Content-Length")),
        (1, 0) if te[0].token() == "chunked" => Ok(Some(Framing::Chunked)),
        (1, 0) => Err(HeadError::Unsupported(
            "a Transfer-Encoding other than chunked",
        )),
        (_, 0) => Err(HeadError::Malformed("more than one Transfer-Encoding")),
        _ => Err(HeadError::Malformed(
            "both Content-Length and Transfer-Encoding",
        )),
    }
}

impl Request {
    /// The request's body framing; refuses upgrades and `Expect`s other
    /// than `100-continue`.
    pub fn framing(&self) -> Result<Framing, HeadError> {
        if self.headers.iter().any(|h| h.is("upgrade")) {
            return Err(HeadError::Unsupported(
                "Upgrade (a WebSocket or HTTP/2 switch) through the broker",
            ));
        }
        if self
            .headers
            .iter()
            .any(|h| h.is("expect") && h.token() != "100-continue")
        {
            return Err(HeadError::Unsupported("an Expect other than 100-continue"));
        }
        if self.version == "HTTP/1.0" && self.headers.iter().any(|h| h.is("transfer-encoding")) {
            return Err(HeadError::Malformed("chunked in an HTTP/1.0 request"));
        }
        Ok(framing_of(&self.headers)?.unwrap_or(Framing::None))
    }

    /// Whether it asked `Expect: 100-continue`.
    pub fn expects_continue(&self) -> bool {
        self.headers.iter().any(|h| h.is("expect"))
    }

    /// Whether the connection ends after this request.
    pub fn closes(&self) -> bool {
        let close = self
            .headers
            .iter()
            .any(|h| h.is("connection") && h.token().split(',').any(|t| t.trim() == "close"));
        close || self.version == "HTTP/1.0"
    }
}

impl Response {
    /// The answer's body framing for a request of `method`.
    pub fn framing(&self, method: &str) -> Result<Framing, HeadError> {
        if method.eq_ignore_ascii_case("HEAD")
            || self.status < 200
            || self.status == 204
            || self.status == 304
        {
            return Ok(Framing::None);
        }
        Ok(framing_of(&self.headers)?.unwrap_or(Framing::ToClose))
    }

    /// Whether the host closes the connection after this answer.
    pub fn closes(&self) -> bool {
        let close = self
            .headers
            .iter()
            .any(|h| h.is("connection") && h.token().split(',').any(|t| t.trim() == "close"));
        close || self.version == "HTTP/1.0"
    }

    /// The content codings of the answer, outermost last, lower case.
    pub fn content_codings(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|h| h.is("content-encoding"))
            .flat_map(|h| {
                h.token()
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(head: &str) -> Result<Framing, HeadError> {
        parse_request(head.as_bytes())?.framing()
    }

    #[test]
    fn a_request_is_framed_by_one_length_or_chunked_never_both() {
        assert_eq!(
            framing("GET / HTTP/1.1\r\nHost: h\r\n\r\n"),
            Ok(Framing::None)
        );
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(Framing::Chunked)
        );
        for bad in [
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            "POST / HTTP/1.1\r\nX : a\r\n\r\n",
        ] {
            assert!(
                matches!(framing(bad), Err(HeadError::Malformed(_))),
                "{bad:?}"
            );
        }
        for unsupported in [
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "PUT / HTTP/1.1\r\nExpect: something-else\r\n\r\n",
        ] {
            assert!(
                matches!(framing(unsupported), Err(HeadError::Unsupported(_))),
                "{unsupported:?}"
            );
        }
    }

    #[test]
    fn an_answer_without_length_runs_to_close_and_some_have_no_body() {
        let r = |h: &str| parse_response(h.as_bytes()).unwrap();
        assert_eq!(
            r("HTTP/1.1 200 OK\r\n\r\n").framing("GET"),
            Ok(Framing::ToClose)
        );
        assert_eq!(
            r("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").framing("HEAD"),
            Ok(Framing::None)
        );
        assert_eq!(
            r("HTTP/1.1 304 Not Modified\r\n\r\n").framing("GET"),
            Ok(Framing::None)
        );
        assert_eq!(r("HTTP/1.1 200\r\n\r\n").status, 200);
        assert_eq!(
            r("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\ncontent-encoding: BR\r\n\r\n")
                .content_codings(),
            ["gzip", "br"]
        );
        assert!(parse_response(b"HTTP/1.1 20 OK\r\n\r\n").is_err());
        assert!(parse_response(b"ICY 200 OK\r\n\r\n").is_err());
    }

    #[test]
    fn a_header_value_never_shows_in_debug() {
        let r =
            parse_request(b"GET /SECRETPATH HTTP/1.1\r\nAuthorization: Bearer SECRETVALUE\r\n\r\n")
                .unwrap();
        assert!(!format!("{r:?}").contains("SECRETPATH"));
        assert!(!format!("{r:?}").contains("SECRETVALUE"));
    }
}
