//! Where a secret may be sent: the operator's bindings of a secret name to
//! hosts (root's env config: `bind`, per user `bind_for_users`), which a
//! call may narrow and never widen.
//!
//! Guarantees: a bound host is a DNS name or `*.` and a suffix of at least
//! two labels, whose `*` stands for exactly one label (as in a TLS
//! certificate); an address literal, a bare `*`, a wildcard over a single
//! label (`*.com`) or anywhere but the front is refused with the reason
//! when the config is read ([`BoundHosts`]). A user's own entry for a name
//! replaces the global one for that user ([`Bindings::for_user`]). A
//! request's hosts narrow a binding only when each is covered by it
//! ([`Binding::narrowed`]); one that is not is an error, never a wider
//! binding. Nothing here reads a value: a binding is names only.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One host pattern of a binding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "String")]
pub enum BoundHost {
    /// This name only.
    Exact(String),
    /// Any one label followed by this suffix (`*.suffix`).
    OneLabelBelow(String),
}

impl From<BoundHost> for String {
    fn from(h: BoundHost) -> Self {
        h.to_string()
    }
}

impl fmt::Display for BoundHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoundHost::Exact(name) => f.write_str(name),
            BoundHost::OneLabelBelow(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// A label of a DNS name: letters, digits and inner hyphens, 1 to 63 bytes.
fn valid_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

impl BoundHost {
    /// Parses one entry of a binding's `hosts`.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let name = entry.trim_end_matches('.').to_ascii_lowercase();
        if name.parse::<std::net::IpAddr>().is_ok()
            || name.starts_with('[')
            || name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return Err(format!(
                "{entry:?} is an address: bind names (a certificate for an address proves \
                 little, and an address is reachable under any name)"
            ));
        }
        let (wild, suffix) = match name.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None => (false, name.as_str()),
        };
        if suffix.contains('*') || name == "*" {
            return Err(format!(
                "{entry:?}: a wildcard may only be the whole first label (*.example.com)"
            ));
        }
        let labels: Vec<&str> = suffix.split('.').collect();
        if !labels.iter().all(|l| valid_label(l)) || suffix.len() > 253 {
            return Err(format!("{entry:?} is not a host name"));
        }
        if wild && labels.len() < 2 {
            return Err(format!(
                "{entry:?} is wider than one label below a registered name: it covers a \
                 whole top-level domain"
            ));
        }
        if labels.len() < 2 {
            return Err(format!(
                "{entry:?} is a single-label name: bind a fully qualified name"
            ));
        }
        Ok(if wild {
            BoundHost::OneLabelBelow(suffix.to_string())
        } else {
            BoundHost::Exact(suffix.to_string())
        })
    }

    /// Whether `host` (as a request names it, any case, a trailing dot
    /// allowed) is this pattern.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self {
            BoundHost::Exact(name) => host == *name,
            BoundHost::OneLabelBelow(suffix) => host
                .strip_suffix(suffix.as_str())
                .and_then(|rest| rest.strip_suffix('.'))
                .is_some_and(valid_label),
        }
    }

    /// Whether every host this pattern matches, `wider` matches too.
    fn within(&self, wider: &BoundHost) -> bool {
        match (self, wider) {
            (BoundHost::Exact(name), _) => wider.matches(name),
            (BoundHost::OneLabelBelow(a), BoundHost::OneLabelBelow(b)) => a == b,
            (BoundHost::OneLabelBelow(_), BoundHost::Exact(_)) => false,
        }
    }
}

/// The hosts of a binding: at least one, each checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct BoundHosts(Vec<BoundHost>);

impl TryFrom<Vec<String>> for BoundHosts {
    type Error = String;

    fn try_from(list: Vec<String>) -> Result<Self, String> {
        if list.is_empty() {
            return Err("a binding names at least one host".into());
        }
        let mut hosts = list
            .iter()
            .map(|h| BoundHost::parse(h))
            .collect::<Result<Vec<_>, _>>()?;
        hosts.sort();
        hosts.dedup();
        Ok(Self(hosts))
    }
}

impl From<BoundHosts> for Vec<String> {
    fn from(h: BoundHosts) -> Self {
        h.0.iter().map(ToString::to_string).collect()
    }
}

impl BoundHosts {
    /// Whether `host` is one of them.
    pub fn allows(&self, host: &str) -> bool {
        self.0.iter().any(|h| h.matches(host))
    }

    /// The patterns.
    pub fn patterns(&self) -> &[BoundHost] {
        &self.0
    }
}

/// Where one secret may go, and where in a request it may be put.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The hosts.
    pub hosts: BoundHosts,
    /// Whether the value may also be put in a request's body (headers and
    /// the query string always may).
    #[serde(default)]
    pub body: bool,
}

/// Why a request could not narrow a binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NarrowError {
    /// A host the request named is not a host of the binding.
    #[error("{secret} is bound to {bound}; {asked} is not among them (a call may narrow a binding, never widen it)")]
    Wider {
        /// The secret's name.
        secret: String,
        /// The host asked for.
        asked: String,
        /// The binding's hosts.
        bound: String,
    },
    /// The request named a host that is not a host pattern.
    #[error("{secret}: {why}")]
    Invalid {
        /// The secret's name.
        secret: String,
        /// Why.
        why: String,
    },
    /// The request asked for the body where the binding does not allow it.
    #[error("{secret} may not be put in a request body: its binding does not say body")]
    Body {
        /// The secret's name.
        secret: String,
    },
}

impl Binding {
    /// This binding narrowed to `hosts` (and `body`), each of which must be
    /// within it.
    pub fn narrowed(
        &self,
        secret: &str,
        hosts: &[String],
        body: bool,
    ) -> Result<Self, NarrowError> {
        let asked = BoundHosts::try_from(hosts.to_vec()).map_err(|why| NarrowError::Invalid {
            secret: secret.to_string(),
            why,
        })?;
        for host in asked.patterns() {
            if !self.hosts.patterns().iter().any(|wider| host.within(wider)) {
                return Err(NarrowError::Wider {
                    secret: secret.to_string(),
                    asked: host.to_string(),
                    bound: Vec::<String>::from(self.hosts.clone()).join(", "),
                });
            }
        }
        if body && !self.body {
            return Err(NarrowError::Body {
                secret: secret.to_string(),
            });
        }
        Ok(Self { hosts: asked, body })
    }
}

/// The operator's bindings, as the env config holds them (`bind` and
/// `bind_for_users`), looked up in place: for every user, and per user (by
/// login name) replacing the global entry of the same secret name.
#[derive(Debug, Clone, Copy)]
pub struct Bindings<'a> {
    /// Secret name → binding, for every user.
    pub all: &'a BTreeMap<String, Binding>,
    /// Login name → secret name → binding.
    pub for_users: &'a BTreeMap<String, BTreeMap<String, Binding>>,
}

impl<'a> Bindings<'a> {
    /// The binding of `secret` for `user`, if it is bound.
    pub fn for_user(&self, user: &str, secret: &str) -> Option<&'a Binding> {
        self.for_users
            .get(user)
            .and_then(|own| own.get(secret))
            .or_else(|| self.all.get(secret))
    }

    /// Whether any secret is bound for anyone.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.for_users.values().all(BTreeMap::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(json: &str) -> Result<Binding, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn names_and_one_label_wildcards_are_bound_and_nothing_wider() {
        let b = binding(
            r#"{"hosts": ["api.github.com", "*.githubusercontent.com", "API.Example.COM."]}"#,
        )
        .unwrap();
        for yes in [
            "api.github.com",
            "API.GITHUB.COM.",
            "raw.githubusercontent.com",
            "api.example.com",
        ] {
            assert!(b.hosts.allows(yes), "{yes}");
        }
        for no in [
            "github.com",
            "evil-api.github.com",
            "api.github.com.evil.net",
            "githubusercontent.com",
            "a.b.githubusercontent.com",
            "xgithubusercontent.com",
            "",
        ] {
            assert!(!b.hosts.allows(no), "{no}");
        }
    }

    #[test]
    fn addresses_bare_and_wide_wildcards_and_bad_names_are_refused_with_the_reason() {
        for (bad, why) in [
            ("10.0.0.1", "is an address"),
            ("127.0.0.1", "is an address"),
            ("[::1]", "is an address"),
            ("::1", "is an address"),
            ("1.2.3", "is an address"),
            ("*", "whole first label"),
            ("*.com", "whole top-level domain"),
            ("api.*.com", "whole first label"),
            ("*api.github.com", "whole first label"),
            ("localhost", "single-label"),
            ("bad_host.com", "not a host name"),
            ("-a.com", "not a host name"),
        ] {
            let err = binding(&format!(r#"{{"hosts": ["{bad}"]}}"#)).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(binding(r#"{"hosts": []}"#)
            .unwrap_err()
            .contains("at least one"));
        assert!(binding(r#"{"hosts": ["a.com"], "extra": 1}"#).is_err());
    }

    #[test]
    fn a_request_narrows_a_binding_and_never_widens_it() {
        let b = binding(r#"{"hosts": ["api.github.com", "*.githubusercontent.com"]}"#).unwrap();
        let n = b
            .narrowed("t", &["raw.githubusercontent.com".into()], false)
            .unwrap();
        assert!(n.hosts.allows("raw.githubusercontent.com"));
        assert!(!n.hosts.allows("api.github.com"));
        assert!(b
            .narrowed("t", &["*.githubusercontent.com".into()], false)
            .is_ok());
        for wider in ["github.com", "*.github.com", "evil.example.com"] {
            let e = b.narrowed("t", &[wider.into()], false).unwrap_err();
            assert!(matches!(e, NarrowError::Wider { .. }), "{wider}: {e}");
        }
        assert!(matches!(
            b.narrowed("t", &["api.github.com".into()], true),
            Err(NarrowError::Body { .. })
        ));
        assert!(matches!(
            b.narrowed("t", &["10.0.0.1".into()], false),
            Err(NarrowError::Invalid { .. })
        ));
    }

    #[test]
    fn a_users_own_entry_replaces_the_global_one_for_that_user_only() {
        let global: BTreeMap<String, Binding> =
            serde_json::from_str(r#"{"tok": {"hosts": ["api.github.com"]}}"#).unwrap();
        let own: BTreeMap<String, BTreeMap<String, Binding>> =
            serde_json::from_str(r#"{"alice": {"tok": {"hosts": ["git.example.com"]}}}"#).unwrap();
        let all = Bindings {
            all: &global,
            for_users: &own,
        };
        assert!(all
            .for_user("alice", "tok")
            .unwrap()
            .hosts
            .allows("git.example.com"));
        assert!(!all
            .for_user("alice", "tok")
            .unwrap()
            .hosts
            .allows("api.github.com"));
        assert!(all
            .for_user("bob", "tok")
            .unwrap()
            .hosts
            .allows("api.github.com"));
        assert!(all.for_user("bob", "other").is_none());
        assert!(!all.is_empty());
        let none = BTreeMap::new();
        let no_users = BTreeMap::new();
        assert!(Bindings {
            all: &none,
            for_users: &no_users
        }
        .is_empty());
    }
}
