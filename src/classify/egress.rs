//! Egress rules for a read that stays in the worker.
//!
//! The URL is parsed by the `url` crate's WHATWG parser — the one browsers
//! and HTTP clients agree with — so every IPv4 spelling (`2130706433`,
//! `0177.0.0.1`, `0x7f.1`, `127.1`) arrives here as the address it means,
//! IDNA hosts arrive as punycode, and percent-encoding is decoded. The
//! parsed host is then judged against [`V4_REFUSED`] / [`V6_REFUSED`] and
//! the name rules. Guarantees: scheme `http`/`https`, no userinfo, a port the
//! policy allows, and a host that is a public address or a dotted DNS name
//! outside the refused suffixes. Anything ambiguous is refused.
#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// The longest URL that may stay.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// Why a URL may not stay: a stable code and a human reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRefusal {
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human reason.
    pub reason: String,
}

fn refuse(code: &'static str, reason: impl Into<String>) -> EgressRefusal {
    EgressRefusal {
        code,
        reason: reason.into(),
    }
}

/// One refused range and the RFC it comes from.
pub struct Range<A> {
    /// First address of the range.
    pub base: A,
    /// Prefix length.
    pub prefix: u8,
    /// What it is, and its source.
    pub what: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8, what: &'static str) -> Range<Ipv4Addr> {
    Range {
        base: Ipv4Addr::new(a, b, c, d),
        prefix,
        what,
    }
}

/// IPv4 ranges that never stay (IANA special-purpose registry, RFC 6890).
pub const V4_REFUSED: &[Range<Ipv4Addr>] = &[
    v4(0, 0, 0, 0, 8, "\"this network\", RFC 791/RFC 1122"),
    v4(10, 0, 0, 0, 8, "private, RFC 1918"),
    v4(100, 64, 0, 0, 10, "shared address space (CGNAT), RFC 6598"),
    v4(127, 0, 0, 0, 8, "loopback, RFC 1122"),
    v4(
        169,
        254,
        0,
        0,
        16,
        "link-local (cloud metadata 169.254.169.254), RFC 3927",
    ),
    v4(172, 16, 0, 0, 12, "private, RFC 1918"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments, RFC 6890"),
    v4(192, 0, 2, 0, 24, "documentation TEST-NET-1, RFC 5737"),
    v4(192, 31, 196, 0, 24, "AS112-v4, RFC 7535"),
    v4(192, 52, 193, 0, 24, "AMT, RFC 7450"),
    v4(192, 88, 99, 0, 24, "6to4 relay anycast, RFC 7526"),
    v4(192, 168, 0, 0, 16, "private, RFC 1918"),
    v4(192, 175, 48, 0, 24, "direct delegation AS112, RFC 7534"),
    v4(198, 18, 0, 0, 15, "benchmarking, RFC 2544"),
    v4(198, 51, 100, 0, 24, "documentation TEST-NET-2, RFC 5737"),
    v4(203, 0, 113, 0, 24, "documentation TEST-NET-3, RFC 5737"),
    v4(224, 0, 0, 0, 4, "multicast, RFC 5771"),
    v4(
        240,
        0,
        0,
        0,
        4,
        "reserved, RFC 1112 (includes broadcast 255.255.255.255, RFC 919)",
    ),
];

const fn v6(segs: [u16; 8], prefix: u8, what: &'static str) -> Range<Ipv6Addr> {
    let [a, b, c, d, e, f, g, h] = segs;
    Range {
        base: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        prefix,
        what,
    }
}

/// IPv6 ranges that never stay, inside global unicast `2000::/3` (anything
/// outside it is refused outright, after the embedded-IPv4 forms below).
pub const V6_REFUSED: &[Range<Ipv6Addr>] = &[
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignments incl. Teredo, RFC 2928/RFC 4380",
    ),
    v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "documentation, RFC 3849",
    ),
    v6(
        [0x2002, 0, 0, 0, 0, 0, 0, 0],
        16,
        "6to4, RFC 3056 (embeds an IPv4)",
    ),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation, RFC 9637"),
];

fn in_v4(addr: Ipv4Addr, r: &Range<Ipv4Addr>) -> bool {
    let mask = if r.prefix == 0 {
        0
    } else {
        u32::MAX << (32 - r.prefix)
    };
    u32::from(addr) & mask == u32::from(r.base) & mask
}

fn in_v6(addr: Ipv6Addr, r: &Range<Ipv6Addr>) -> bool {
    let mask = if r.prefix == 0 {
        0
    } else {
        u128::MAX << (128 - r.prefix)
    };
    u128::from(addr) & mask == u128::from(r.base) & mask
}

/// What `addr` is, if it is in [`V4_REFUSED`].
fn v4_refused(addr: Ipv4Addr) -> Option<&'static str> {
    V4_REFUSED.iter().find(|r| in_v4(addr, r)).map(|r| r.what)
}

/// Why `addr` may not stay, if it may not: the code and what it is.
/// Embedded IPv4 forms are judged by their IPv4; only global unicast outside
/// [`V6_REFUSED`] passes.
fn v6_refused(addr: Ipv6Addr) -> Option<(&'static str, &'static str)> {
    let bits = u128::from(addr);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    // ::ffff:a.b.c.d (mapped, RFC 4291) and 64:ff9b::a.b.c.d (NAT64, RFC 6052).
    if bits >> 32 == 0xffff || bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
        return v4_refused(low32).map(|what| ("ip_embeds_refused_v4", what));
    }
    // ::a.b.c.d (compatible, deprecated by RFC 4291), ::1 and ::.
    if bits >> 32 == 0 {
        return Some((
            "ip_not_public",
            "unspecified, loopback or IPv4-compatible (RFC 4291)",
        ));
    }
    if bits >> 125 != 0b001 {
        return Some((
            "ip_not_public",
            "outside global unicast 2000::/3 (ULA fc00::/7 incl. fd00:ec2::254, link-local, multicast, reserved)",
        ));
    }
    V6_REFUSED
        .iter()
        .find(|r| in_v6(addr, r))
        .map(|r| ("ip_not_public", r.what))
}

/// The refusal for an address spelled `shown` (a code from the checks
/// above): an embedded IPv4 says so.
fn address_refusal(shown: &dyn std::fmt::Display, code: &'static str, what: &str) -> EgressRefusal {
    if code == "ip_embeds_refused_v4" {
        refuse(code, format!("{shown} embeds an IPv4 that is {what}"))
    } else {
        refuse(code, format!("{shown} is {what}"))
    }
}

/// Checks an IPv4 address against the table.
pub fn check_v4(addr: Ipv4Addr) -> Result<(), EgressRefusal> {
    match v4_refused(addr) {
        Some(what) => Err(address_refusal(&addr, "ip_not_public", what)),
        None => Ok(()),
    }
}

/// Checks an IPv6 address: embedded IPv4 forms are judged by their IPv4;
/// only global unicast outside the special ranges passes.
pub fn check_v6(addr: Ipv6Addr) -> Result<(), EgressRefusal> {
    match v6_refused(addr) {
        Some((code, what)) => Err(address_refusal(&addr, code, what)),
        None => Ok(()),
    }
}

/// The name of the range `addr` is in, for the few ranges an operator may
/// allow by name where the egress rules refuse them (`loopback`:
/// `127.0.0.0/8`, `::1`; `private`: RFC 1918 and the ULA `fc00::/7`;
/// `link-local`: `169.254.0.0/16`, `fe80::/10`), judging a mapped IPv6
/// by its IPv4; `None` for every other address.
pub fn range_name(addr: std::net::IpAddr) -> Option<&'static str> {
    let v4 = match addr {
        std::net::IpAddr::V4(a) => Some(a),
        std::net::IpAddr::V6(a) => a.to_ipv4_mapped(),
    };
    if let Some(a) = v4 {
        return match a.octets() {
            [127, ..] => Some("loopback"),
            [10, ..] | [192, 168, ..] => Some("private"),
            [172, b, ..] if (16..32).contains(&b) => Some("private"),
            [169, 254, ..] => Some("link-local"),
            _ => None,
        };
    }
    let std::net::IpAddr::V6(a) = addr else {
        return None;
    };
    let first = a.segments()[0];
    if a == Ipv6Addr::LOCALHOST {
        Some("loopback")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else {
        None
    }
}

/// Host names that never stay (matched on the lowercase name without
/// trailing dots, as a whole name or as a suffix after a dot).
pub const NAMES_REFUSED: &[&str] = &[
    "localhost",
    "local",
    "internal",
    "localdomain",
    "home.arpa",
    "intranet",
    "lan",
    "corp",
    "metadata.google.internal",
    "in-addr.arpa",
    "ip6.arpa",
    "onion",
];

/// Whether `label` is the last label of an entry of [`NAMES_REFUSED`] (a
/// unit test keeps the two in step).
fn ends_a_refused_name(label: &str) -> bool {
    matches!(
        label,
        "localhost"
            | "local"
            | "internal"
            | "localdomain"
            | "arpa"
            | "intranet"
            | "lan"
            | "corp"
            | "onion"
    )
}

fn name_matches(name: &str, suffix: &str) -> bool {
    let suffix = suffix.trim_start_matches('.');
    name == suffix
        || name
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Checks a DNS name as the URL parser gave it (lowercase, punycode).
pub fn check_name(host: &str, extra_denied: &[String]) -> Result<(), EgressRefusal> {
    let name = host.trim_end_matches('.');
    if name.len() + 1 < host.len() {
        return Err(refuse(
            "host_ambiguous",
            format!("{host:?} ends in more than one dot"),
        ));
    }
    if name.is_empty() {
        return Err(refuse("host_invalid", "the host is empty"));
    }
    if !name.contains('.') {
        return Err(refuse(
            "host_single_label",
            format!(
                "{name:?} has no dot: it would resolve through search domains to an internal host"
            ),
        ));
    }
    // A name is under a refused name only if their last labels agree; most
    // names end in a label no built-in entry ends in, and skip the table.
    let last_label = name.rsplit('.').next().unwrap_or_default();
    let builtin: &[&str] = if ends_a_refused_name(last_label) {
        NAMES_REFUSED
    } else {
        &[]
    };
    if let Some(s) = builtin
        .iter()
        .copied()
        .chain(extra_denied.iter().map(String::as_str))
        .find(|s| name_matches(name, s))
    {
        return Err(refuse(
            "host_internal",
            format!("{name:?} is under the refused name {s:?}"),
        ));
    }
    // One pass over the name: the byte set, and each label's shape.
    let invalid_label = |label: &[u8]| {
        label.is_empty() || label.len() > 63 || label[0] == b'-' || label[label.len() - 1] == b'-'
    };
    for label in name.as_bytes().split(|&b| b == b'.') {
        if !label
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(refuse(
                "host_invalid",
                format!("{name:?} is not a plain DNS name"),
            ));
        }
        if invalid_label(label) {
            return Err(refuse(
                "host_invalid",
                format!("{name:?} has an invalid label"),
            ));
        }
    }
    // Top-level domains are letters (or an IDN `xn--` label). A numeric or
    // mixed last label is either an IPv4 spelling the parser did not take
    // (`0x7f` forms) or no public name at all: refuse the whole family.
    let last = last_label.as_bytes();
    if !(last.iter().all(u8::is_ascii_lowercase) || last.starts_with(b"xn--")) || last.len() < 2 {
        return Err(refuse(
            "host_ambiguous",
            format!("{name:?} does not end in an alphabetic top-level label"),
        ));
    }
    Ok(())
}

/// A URL that passed: the parsed form the read tool must use as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUrl(pub Url);

/// Checks `raw` with every egress rule.
pub fn check_url(
    raw: &str,
    ports: &[u16],
    extra_denied: &[String],
) -> Result<CheckedUrl, EgressRefusal> {
    if raw.len() > MAX_URL_BYTES {
        return Err(refuse(
            "url_too_long",
            format!("the URL is over {MAX_URL_BYTES} bytes"),
        ));
    }
    // The WHATWG parser strips leading/trailing C0 controls and spaces and
    // removes tabs and newlines anywhere; a URL that needs that is ambiguous.
    // One branch-free pass for both checks below.
    let (control, backslash) = raw.bytes().fold((false, false), |(c, k), b| {
        (c | (b <= b' ') | (b == 0x7f), k | (b == b'\\'))
    });
    if control {
        return Err(refuse(
            "url_ambiguous",
            "the URL holds spaces or control characters",
        ));
    }
    if backslash {
        return Err(refuse(
            "url_ambiguous",
            "the URL holds a backslash, which parsers disagree on",
        ));
    }
    // The scheme is read before the parser sees the URL: only http and
    // https may stay, whatever the parser would make of the rest.
    let scheme = raw
        .split_once(':')
        .map(|(scheme, _)| scheme)
        .filter(|s| s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()))
        .filter(|s| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        });
    let scheme_len = match scheme {
        Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => s.len(),
        Some(s) => {
            return Err(refuse(
                "scheme_refused",
                format!("scheme {s:?} is not http or https"),
            ))
        }
        None => {
            return Err(refuse(
                "url_ambiguous",
                "a stay URL must start with http:// or https://",
            ))
        }
    };
    // WHATWG accepts `https:host` and `https:/host` for special schemes; an
    // HTTP client or a human may read those otherwise. Only `scheme://`.
    if !raw[scheme_len..].starts_with("://") {
        return Err(refuse(
            "url_ambiguous",
            "a stay URL must start with http:// or https://",
        ));
    }
    let url = Url::parse(raw)
        .map_err(|e| refuse("url_invalid", format!("the URL does not parse: {e}")))?;
    // The scheme was checked above, and the parser keeps it.
    debug_assert!(matches!(url.scheme(), "http" | "https"));
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("userinfo_refused", "the URL carries userinfo"));
    }
    // Userinfo is empty, so an '@' left in the authority text is a
    // differential between parsers: refuse.
    // The prefix check above put "://" right after the scheme.
    let after_slashes = raw.bytes().position(|b| b == b'/').map_or(0, |i| i + 2);
    let authority_end = raw.as_bytes()[after_slashes..]
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(raw.len(), |i| after_slashes + i);
    let authority = &raw.as_bytes()[..authority_end];
    if authority.contains(&b'@') {
        return Err(refuse("url_ambiguous", "an '@' in the authority"));
    }
    if authority.ends_with(b":") {
        return Err(refuse("url_ambiguous", "an empty port after ':'"));
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| refuse("port_refused", "no port"))?;
    // 80 and 443 belong to their own scheme: `https://host:80/` is refused.
    let crossed =
        (port == 80 && url.scheme() == "https") || (port == 443 && url.scheme() == "http");
    if crossed || !ports.contains(&port) {
        return Err(refuse(
            "port_refused",
            format!("port {port} is not an allowed port for a stay ({ports:?})"),
        ));
    }
    match url.host() {
        None => return Err(refuse("host_invalid", "the URL has no host")),
        // Refusals name the host as the parser wrote it (the normalised
        // address, no second formatting of it).
        Some(Host::Ipv4(a)) => {
            if let Some(what) = v4_refused(a) {
                let shown = url.host_str().unwrap_or_default();
                return Err(address_refusal(&shown, "ip_not_public", what));
            }
        }
        Some(Host::Ipv6(a)) => {
            if let Some((code, what)) = v6_refused(a) {
                let shown = url.host_str().unwrap_or_default();
                return Err(address_refusal(&shown, code, what));
            }
        }
        Some(Host::Domain(d)) => check_name(d, extra_denied)?,
    }
    Ok(CheckedUrl(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(u: &str) -> bool {
        check_url(u, &[80, 443], &[]).is_ok()
    }

    #[test]
    fn the_quick_reject_knows_every_refused_name() {
        for name in NAMES_REFUSED {
            let last = name.rsplit('.').next().unwrap();
            assert!(ends_a_refused_name(last), "{name}: add {last:?}");
            assert!(check_name(&format!("x.{name}"), &[]).is_err(), "{name}");
        }
        assert!(!ends_a_refused_name("com"));
    }

    #[test]
    fn public_reads_pass() {
        for u in [
            "https://example.com/",
            "http://example.org/a?b=c#d",
            "https://8.8.8.8/",
            "https://[2606:4700:4700::1111]/",
            "https://xn--mnchen-3ya.de/",
        ] {
            assert!(ok(u), "{u}");
        }
    }

    #[test]
    fn every_loopback_and_metadata_spelling_is_refused() {
        for u in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://0x7f000001/",
            "http://017700000001/",
            "http://169.254.169.254/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:a9fe:a9fe::]/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1%25eth0]/",
            "http://0.0.0.0/",
            "http://[::]/",
            "http://100.64.0.1/",
            "http://198.18.0.1/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://a.localhost/",
            "http://printer.local/",
            "http://x.internal/",
            "http://metadata.google.internal/",
            "http://metadata/",
            "http://example.com../",
            "http://255.255.255.255/",
            "http://224.0.0.1/",
            "http://192.0.2.1/",
            "http://[2001:db8::1]/",
            "ftp://example.com/",
            "http://u:p@example.com/",
            "http://example.com:8080/",
            "http://1.1.1.1 &@2.2.2.2# @3.3.3.3/",
            "http://example.com\\@evil.com/",
            "file:///etc/passwd",
            "http://%6c%6f%63%61%6c%68%6f%73%74/",
            "http://ｌｏｃａｌｈｏｓｔ/",
            "http://[0:0:0:0:0:ffff:127.0.0.1]/",
        ] {
            assert!(!ok(u), "{u} must not stay");
        }
    }

    #[test]
    fn range_names_cover_loopback_private_and_link_local_and_nothing_public() {
        for (addr, want) in [
            ("127.0.0.1", Some("loopback")),
            ("127.9.9.9", Some("loopback")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            ("fd00::1", Some("private")),
            ("169.254.169.254", Some("link-local")),
            ("fe80::1", Some("link-local")),
            ("172.32.0.1", None),
            ("8.8.8.8", None),
            ("2606:4700::1", None),
        ] {
            assert_eq!(range_name(addr.parse().unwrap()), want, "{addr}");
        }
    }
}
