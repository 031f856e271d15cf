//! The first request a call sends to its proxy, read strictly and passed on
//! with the proxy's credentials added by the worker.
//!
//! Guarantees: a head is accepted only in the one shape every HTTP parser
//! reads alike — lines ended by CRLF, no bare CR or LF, no control byte but
//! HTAB, no line folding, header names that are tokens, a request line of
//! `CONNECT host:port` or an absolute `http://` target, `HTTP/1.0` or
//! `HTTP/1.1` — so the `Proxy-Authorization` line the worker inserts is a
//! header of that request to every reader, never part of a body or of a
//! second request a tool smuggled in. Any `Proxy-Authorization` the tool
//! sent is removed. A plain (non-`CONNECT`) request also loses its
//! `Connection`, `Proxy-Connection` and `Keep-Alive` lines and gets
//! `Connection: close`, so a later request on the same connection, which
//! would not carry the credentials, is never made on it. The rewritten head
//! holds the credentials and is wiped when dropped.
#![forbid(unsafe_code)]

use zeroize::Zeroizing;

use crate::env::AllowHosts;

/// The longest head read from a call.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Why a head was refused (answered `400` to the call).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Longer than [`MAX_HEAD_BYTES`] without an end.
    #[error("the request head is longer than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    /// Not in the strict shape.
    #[error("malformed request head: {0}")]
    Malformed(&'static str),
    /// A request form a proxy is not asked for this way.
    #[error("refused request: {0}")]
    Refused(&'static str),
    /// A destination outside the operator's `proxy_allow_hosts`
    /// (answered `403`).
    #[error("destination {0:?} is not among the allowed hosts")]
    NotAllowed(String),
}

/// The host of an authority (`host[:port]`, `[v6][:port]`), without its
/// port; `None` if it carries userinfo.
fn authority_host(authority: &str) -> Option<&str> {
    if authority.contains('@') {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map(|(v6, _)| v6);
    }
    Some(
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    )
}

/// The host a request line asks the proxy for: the `CONNECT` authority's,
/// or the absolute `http://` target's.
fn target_host(target: &str) -> Option<&str> {
    let authority = match target.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case("http://") => {
            let rest = &target[7..];
            rest.split(['/', '?', '#']).next().unwrap_or(rest)
        }
        _ => target,
    };
    authority_host(authority)
}

/// Where a request head (already checked by [`rewrite`]) asks to go: the
/// host and port of its `CONNECT` authority or absolute `http://` target
/// (port 80 when the target names none), and whether it is a `CONNECT`.
pub fn destination(head: &[u8]) -> Option<(String, u16, bool)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    let connect = method == "CONNECT";
    let authority = if connect {
        target
    } else {
        let rest = target.get(7..)?;
        rest.split(['/', '?', '#']).next().unwrap_or(rest)
    };
    if authority.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        (v6, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None if connect => return None,
        None => 80,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port, connect))
}

/// Where a request head ends: the index just past its `\r\n\r\n`.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a line holds only visible ASCII, SP and HTAB (and, in header
/// values, bytes above 0x7F).
fn line_bytes_ok(line: &[u8]) -> bool {
    line.iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
}

/// The head `head` (ending in `\r\n\r\n`) as sent on to the proxy, with
/// `authorization` (a `Proxy-Authorization` value) if any; with `allow`,
/// the request's target host and every `Host` it names must be allowed.
pub fn rewrite(
    head: &[u8],
    authorization: Option<&str>,
    allow: Option<&AllowHosts>,
) -> Result<Zeroizing<Vec<u8>>, HeadError> {
    if head.len() > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let body = head
        .strip_suffix(b"\r\n\r\n")
        .ok_or(HeadError::Malformed("it does not end with an empty line"))?;
    // Split on LF; every line but the last (whose CRLF was stripped above)
    // must end in CR, and no line may hold another CR: the only line ends
    // are CRLF.
    let raw: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let last = raw.len() - 1;
    let mut checked: Vec<&[u8]> = Vec::with_capacity(raw.len());
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
        if !line_bytes_ok(line) {
            return Err(HeadError::Malformed("a control byte"));
        }
        checked.push(line);
    }
    let (request_line, headers) = checked
        .split_first()
        .ok_or(HeadError::Malformed("no request line"))?;
    let connect = check_request_line(request_line)?;
    // Checked as text: the request line is visible ASCII (checked above).
    let check = |host: Option<&str>, what: &str| -> Result<(), HeadError> {
        let Some(allow) = allow else { return Ok(()) };
        match host {
            Some(host) if allow.allows(host) => Ok(()),
            Some(host) => Err(HeadError::NotAllowed(host.to_owned())),
            None => Err(HeadError::NotAllowed(what.to_owned())),
        }
    };
    let target = String::from_utf8_lossy(request_line.split(|&b| b == b' ').nth(1).unwrap_or(b""));
    check(target_host(&target), &target)?;
    let mut out = Zeroizing::new(Vec::with_capacity(head.len() + 128));
    out.extend_from_slice(request_line);
    out.extend_from_slice(b"\r\n");
    if let Some(value) = authorization {
        out.extend_from_slice(b"Proxy-Authorization: ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for line in headers {
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
        let dropped: &[&[u8]] = if connect {
            &[b"proxy-authorization"]
        } else {
            &[
                b"proxy-authorization",
                b"connection",
                b"proxy-connection",
                b"keep-alive",
            ]
        };
        if dropped.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        if name.eq_ignore_ascii_case(b"host") {
            let value = String::from_utf8_lossy(&line[colon + 1..]);
            let value = value.trim_matches([' ', '\t']);
            check(authority_host(value), value)?;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    if !connect {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// Checks `METHOD SP target SP HTTP/1.x`; returns whether it is a
/// `CONNECT`.
fn check_request_line(line: &[u8]) -> Result<bool, HeadError> {
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(HeadError::Malformed(
            "the request line is not METHOD SP target SP version",
        ));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HeadError::Malformed("a method that is not a token"));
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(HeadError::Malformed("a version other than HTTP/1.0 or 1.1"));
    }
    if target.is_empty() || !target.iter().all(|b| b.is_ascii_graphic()) {
        return Err(HeadError::Malformed("an empty or non-ASCII target"));
    }
    if method == b"CONNECT" {
        // authority-form: host:port, nothing else.
        let ok = target.contains(&b':')
            && !target.iter().any(|b| b"/@?#".contains(b))
            && target.rsplit(|&b| b == b':').next().is_some_and(|port| {
                !port.is_empty() && port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
            });
        if !ok {
            return Err(HeadError::Refused(
                "CONNECT names something other than host:port",
            ));
        }
        return Ok(true);
    }
    if !target
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case(b"http://"))
    {
        return Err(HeadError::Refused(
            "a request through the proxy must name an absolute http:// target (use CONNECT for https)",
        ));
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTH: &str = "Basic dTpw";

    fn ok(head: &str) -> String {
        String::from_utf8(rewrite(head.as_bytes(), Some(AUTH), None).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn connect_gets_the_workers_credentials_and_loses_the_tools() {
        let out = ok("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nUser-Agent: curl\r\n\r\n");
        assert_eq!(
            out,
            "CONNECT example.com:443 HTTP/1.1\r\nProxy-Authorization: Basic dTpw\r\nHost: example.com:443\r\nUser-Agent: curl\r\n\r\n"
        );
        let none = rewrite(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", None, None).unwrap();
        assert_eq!(&none[..], b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn a_destination_is_the_connect_authority_or_the_absolute_targets() {
        for (head, want) in [
            (
                "CONNECT Api.Example.com:8443 HTTP/1.1\r\n\r\n",
                Some(("api.example.com", 8443, true)),
            ),
            (
                "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
                Some(("::1", 443, true)),
            ),
            ("GET http://h/x HTTP/1.1\r\n\r\n", Some(("h", 80, false))),
            ("GET http://h:81?q HTTP/1.1\r\n\r\n", Some(("h", 81, false))),
            ("CONNECT h HTTP/1.1\r\n\r\n", None),
            ("GET http://u@h/ HTTP/1.1\r\n\r\n", None),
            ("CONNECT h:99999 HTTP/1.1\r\n\r\n", None),
        ] {
            let got = destination(head.as_bytes());
            assert_eq!(got, want.map(|(h, p, c)| (h.to_string(), p, c)), "{head}");
        }
    }

    #[test]
    fn a_plain_request_is_closed_after_its_one_response() {
        let out = ok("GET http://h/x HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nproxy-connection: Keep-Alive\r\nKeep-Alive: 5\r\n\r\n");
        assert_eq!(
            out,
            "GET http://h/x HTTP/1.1\r\nProxy-Authorization: Basic dTpw\r\nHost: h\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn heads_that_two_parsers_could_read_apart_are_refused() {
        let bad: &[&[u8]] = &[
            b"GET http://h/ HTTP/1.1\nHost: h\r\n\r\n",      // bare LF
            b"GET http://h/ HTTP/1.1\r\nHost: h\n\r\n\r\n",  // bare LF line
            b"GET http://h/ HTTP/1.1\r\nX: a\rb\r\n\r\n",    // bare CR
            b"GET http://h/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n", // folded
            b"GET http://h/ HTTP/1.1\r\nX : a\r\n\r\n",      // space before colon
            b"GET http://h/ HTTP/1.1\r\nX: a\x00b\r\n\r\n",  // NUL
            b"GET http://h/ HTTP/1.1\r\nNoColon\r\n\r\n",    // no colon
            b"GET  http://h/ HTTP/1.1\r\n\r\n",              // two spaces
            b"GET http://h/ HTTP/2\r\n\r\n",                 // version
            b"GET http://h/ HTTP/1.1\r\nHost: h\r\n",        // no end
            b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",            // origin-form
            b"GET https://h/ HTTP/1.1\r\n\r\n",              // TLS without CONNECT
            b"CONNECT h HTTP/1.1\r\n\r\n",                   // no port
            b"CONNECT u@h:443 HTTP/1.1\r\n\r\n",             // userinfo
            b"CONNECT h:443/x HTTP/1.1\r\n\r\n",             // path
            b"CONNECT h:99999999 HTTP/1.1\r\n\r\n",          // port
        ];
        for head in bad {
            assert!(
                rewrite(head, Some(AUTH), None).is_err(),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        let long = format!(
            "GET http://h/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert_eq!(
            rewrite(long.as_bytes(), None, None),
            Err(HeadError::TooLarge)
        );
    }

    #[test]
    fn only_allowed_destinations_pass_by_target_and_by_every_host_line() {
        let allow: AllowHosts =
            serde_json::from_str(r#"["api.github.com", "*.pypi.org", "::1"]"#).unwrap();
        let pass = |head: &str| rewrite(head.as_bytes(), None, Some(&allow));
        for ok in [
            "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n",
            "CONNECT files.pypi.org:443 HTTP/1.1\r\n\r\n",
            "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
            "GET http://api.github.com/x?y#z HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "GET http://files.pypi.org:8080 HTTP/1.1\r\n\r\n",
        ] {
            assert!(pass(ok).is_ok(), "{ok}");
        }
        for (bad, host) in [
            ("CONNECT github.com:443 HTTP/1.1\r\n\r\n", "github.com"),
            (
                "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
                "169.254.169.254",
            ),
            (
                "GET http://evil.example/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
                "evil.example",
            ),
            (
                "GET http://api.github.com/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                "evil.example",
            ),
            (
                "CONNECT api.github.com:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
                "evil.example",
            ),
            (
                "GET http://u@api.github.com/ HTTP/1.1\r\n\r\n",
                "http://u@api.github.com/",
            ),
        ] {
            assert_eq!(pass(bad), Err(HeadError::NotAllowed(host.into())), "{bad}");
        }
    }

    #[test]
    fn the_end_of_a_head_is_its_first_empty_line() {
        assert_eq!(head_end(b"GET http://h/ HTTP/1.1\r\n\r\nbody"), Some(26));
        assert_eq!(head_end(b"GET http://h/ HTTP/1.1\r\n"), None);
    }
}
