//! What network a call has ([`Network`]), and the proxy the worker speaks
//! to on its behalf ([`ProxyUpstream`]).
//!
//! Guarantees: a mode is chosen per call, else per the operator's config,
//! else `proxy` when a proxy is configured and `host` when none is
//! ([`super::EnvConfig::network_for`]); `proxy` without a configured
//! `http://` proxy is refused, never quietly widened. The proxy's user name and password are
//! parsed once, into [`ProxyUpstream`], which holds them only as the
//! ready `Proxy-Authorization` value, wiped when dropped and never shown by
//! `Debug`; nothing here puts them in a call's environment.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The loopback address inside a call's own network namespace where the
/// worker's end of the proxy listens in mode `proxy`.
pub const CALL_PROXY_ADDR: &str = "127.0.0.1:3128";

/// The variables that send a client to a proxy, in the cases clients read
/// them: a call's own end, or its broker.
pub const PROXY_VARIABLES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Where a call holding a bound secret finds its broker, inside the
/// call's own network namespace: the address its `HTTPS_PROXY` names.
pub const BROKER_ADDR: &str = "127.0.0.1:3129";

/// The address ranges an operator may let the worker's end of a broker's
/// call connect to although the egress rules refuse them
/// (`egress_allow_ranges`), by name; see
/// [`crate::classify::egress::range_name`].
pub const ALLOWABLE_RANGES: &[&str] = &["loopback", "private", "link-local"];

/// A call's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// A network namespace of the call's own with only `lo` up: nothing
    /// outside the call can be reached, the host's loopback included.
    None,
    /// The same empty namespace, plus the configured HTTP proxy reachable
    /// at [`CALL_PROXY_ADDR`] inside it, through the worker, which adds the
    /// proxy's credentials itself.
    Proxy,
    /// The host's network, as any process of the user has (the weakest).
    Host,
}

impl Network {
    /// Whether the call gets a network namespace of its own.
    pub fn own_namespace(self) -> bool {
        self != Network::Host
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Network::None => "none",
            Network::Proxy => "proxy",
            Network::Host => "host",
        })
    }
}

impl FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Network::None),
            "proxy" => Ok(Network::Proxy),
            "host" => Ok(Network::Host),
            other => Err(format!(
                "unknown network mode {other:?} (none, proxy or host)"
            )),
        }
    }
}

/// The destination hosts a call of network `proxy` may ask the proxy for
/// (the worker's end checks the `CONNECT` target, and the target and every
/// `Host` of a plain request): exact names and `*.suffix` (any name below
/// the suffix, not the suffix itself). Names compare without case and
/// without a trailing dot; an IP address matches only itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct AllowHosts(Vec<String>);

fn normal_host(host: &str) -> String {
    let host = host.trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

impl TryFrom<Vec<String>> for AllowHosts {
    type Error = String;

    fn try_from(list: Vec<String>) -> Result<Self, String> {
        let mut out = Vec::with_capacity(list.len());
        for entry in list {
            let name = entry.strip_prefix("*.").unwrap_or(&entry);
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
                && !name.contains('*');
            if !ok {
                return Err(format!(
                    "allow_hosts entry {entry:?} is not a host name, an address or *.suffix"
                ));
            }
            let prefix = if entry.starts_with("*.") { "*." } else { "" };
            out.push(format!("{prefix}{}", normal_host(name)));
        }
        Ok(Self(out))
    }
}

impl AllowHosts {
    /// Whether `host` (a name or address, as a request names it) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let host = normal_host(host);
        self.0.iter().any(|entry| match entry.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => *entry == host,
        })
    }
}

/// The configured proxy as the worker reaches it: where, the
/// `Proxy-Authorization` value it adds when the URL carries a user, and the
/// destinations it lets a call ask for.
#[derive(Clone)]
pub struct ProxyUpstream {
    /// `host:port` of the proxy (port 80 when the URL names none).
    pub address: String,
    /// If set, the only destination hosts a call may ask for.
    pub allow_hosts: Option<AllowHosts>,
    /// `Basic base64(user:password)`, percent-decoded first, if any.
    authorization: Option<Zeroizing<String>>,
}

impl ProxyUpstream {
    /// Parses the config's proxy URL: `http://[user[:password]@]host[:port]`.
    /// An `https://` proxy (TLS to the proxy) is refused: the worker's end
    /// speaks plain HTTP to it.
    pub fn parse(proxy: &str) -> Result<Self, String> {
        use base64::Engine;
        let url = url::Url::parse(proxy).map_err(|e| e.to_string())?;
        if url.scheme() != "http" {
            return Err(format!(
                "network mode proxy speaks plain HTTP to the proxy; {:?} is not http://",
                url.scheme()
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            None => return Err("it names no host".into()),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let decode = |s: &str| -> Result<Zeroizing<String>, String> {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|v| Zeroizing::new(v.into_owned()))
                .map_err(|_| "the user or password is not UTF-8".to_owned())
        };
        let authorization = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            let user = decode(url.username())?;
            let password = decode(url.password().unwrap_or(""))?;
            let pair = Zeroizing::new(format!("{}:{}", *user, *password));
            let encoded =
                Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(pair.as_bytes()));
            Some(Zeroizing::new(format!("Basic {}", *encoded)))
        };
        Ok(Self {
            address: format!("{host}:{port}"),
            allow_hosts: None,
            authorization,
        })
    }

    /// The `Proxy-Authorization` header value, if the proxy has a user.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref().map(String::as_str)
    }
}

impl fmt::Debug for ProxyUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyUpstream")
            .field("address", &self.address)
            .field("allow_hosts", &self.allow_hosts)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_holds_the_credentials_only_as_a_header_value_never_shown() {
        let up = ProxyUpstream::parse("http://agent%40corp:p%3Ass@proxy.corp:8080/").unwrap();
        assert_eq!(up.address, "proxy.corp:8080");
        // base64("agent@corp:p:ss")
        assert_eq!(up.authorization(), Some("Basic YWdlbnRAY29ycDpwOnNz"));
        let shown = format!("{up:?}");
        assert!(!shown.contains("YWdlbnRAY29ycDpwOnNz"), "{shown}");
        let bare = ProxyUpstream::parse("http://10.0.0.1").unwrap();
        assert_eq!(
            (bare.address.as_str(), bare.authorization()),
            ("10.0.0.1:80", Option::None)
        );
        assert_eq!(
            ProxyUpstream::parse("http://[::1]:3128").unwrap().address,
            "[::1]:3128"
        );
        for bad in [
            "https://proxy:3128",
            "socks5://proxy:1080",
            "proxy:3128",
            "http://u:%ff@p",
        ] {
            assert!(ProxyUpstream::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allowed_hosts_are_exact_names_or_names_below_a_suffix() {
        let allow: AllowHosts = serde_json::from_str(
            r#"["api.github.com", "*.pypi.org", "10.0.0.7", "[::1]", "Example.COM."]"#,
        )
        .unwrap();
        for host in [
            "api.github.com",
            "API.GitHub.com.",
            "files.pypi.org",
            "a.b.pypi.org",
            "10.0.0.7",
            "[::1]",
            "::1",
            "example.com",
        ] {
            assert!(allow.allows(host), "{host}");
        }
        for host in [
            "github.com",
            "xapi.github.com",
            "pypi.org",
            "evilpypi.org",
            "pypi.org.evil",
            "10.0.0.70",
            "169.254.169.254",
            "",
        ] {
            assert!(!allow.allows(host), "{host}");
        }
        for bad in [
            r#"["*"]"#,
            r#"["*.*.org"]"#,
            r#"["a b"]"#,
            r#"[""]"#,
            r#"["x/y"]"#,
        ] {
            assert!(serde_json::from_str::<AllowHosts>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn modes_read_and_print_the_same_words() {
        for mode in [Network::None, Network::Proxy, Network::Host] {
            assert_eq!(mode.to_string().parse::<Network>().unwrap(), mode);
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{mode}\""));
        }
        assert!("off".parse::<Network>().is_err());
    }
}
