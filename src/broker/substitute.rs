//! Putting a bound secret's value where the tool put its placeholder, in a
//! request on its way to a host: the request line's query (never its path
//! or method, which would name something on the host), each header
//! (a `Basic` credential decoded, substituted inside `user:password` and
//! encoded again) and, where the binding says `body`, the body.
//!
//! Guarantees: a placeholder is replaced only in a request for a host its
//! binding allows; one found (raw, percent-encoded, or inside a `Basic`
//! credential) in a request for any other host refuses the whole request
//! ([`Refusal::NotBound`], answered `403 placeholder_not_bound`) and
//! nothing of it is substituted. A placeholder has its value's length and
//! keeps its value's non-alphanumeric bytes, so each replacement keeps the
//! request's length: no `Content-Length` or chunk size changes, and a
//! head or body is rewritten in place. The rewritten head is held in a
//! buffer wiped when dropped. Every replacement is reported by secret
//! name and where ([`Substitution`]), never by value.
#![forbid(unsafe_code)]

use base64::Engine;
use zeroize::Zeroizing;

use super::stream::{find, replace_all, Pair, Replacer};
use crate::env::Binding;

/// One bound secret of a call, as the broker holds it.
pub struct BoundSecret {
    /// The secret's name.
    pub name: String,
    /// What the tool holds instead.
    pub placeholder: String,
    /// The value (wiped when dropped).
    pub value: Zeroizing<Vec<u8>>,
    /// Where it may go.
    pub binding: Binding,
}

impl BoundSecret {
    /// The placeholder and value as the forms a request may carry them in:
    /// raw, and percent-encoded (hex digits in either case) where the value
    /// has bytes a URL encodes.
    fn forms(&self) -> Vec<(Vec<u8>, Zeroizing<Vec<u8>>)> {
        let (p, v) = (self.placeholder.as_bytes(), &self.value[..]);
        let mut out = vec![(p.to_vec(), Zeroizing::new(v.to_vec()))];
        for upper in [true, false] {
            let form = super::encode::percent(p, upper);
            if !out.iter().any(|(seen, _)| *seen == form) {
                out.push((form, Zeroizing::new(super::encode::percent(v, upper))));
            }
        }
        out
    }
}

/// Where a value was put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Substitution {
    /// The secret's name.
    pub secret: String,
    /// `query`, `header NAME` or `body`.
    pub place: String,
}

/// Why a request is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A placeholder went to a host its secret is not bound to.
    #[error("placeholder_not_bound: {secret}'s placeholder was sent to {host}, which its binding does not name")]
    NotBound {
        /// The secret's name.
        secret: String,
        /// The host the request was for.
        host: String,
    },
}

/// A `Basic` credential in a header line's value, decoded, or `None`.
fn basic(value: &[u8]) -> Option<(usize, Zeroizing<Vec<u8>>)> {
    let text = std::str::from_utf8(value).ok()?;
    let lead = text.len() - text.trim_start().len();
    let rest = text.trim_start();
    // Compared as bytes: a value may hold any UTF-8, and slicing text at a
    // byte that is not a character's first would panic (with the line,
    // and so a value, in the message).
    if !rest
        .as_bytes()
        .get(..6)
        .is_some_and(|b| b.eq_ignore_ascii_case(b"basic "))
    {
        return None;
    }
    let after = &rest[6..];
    let start = lead + 6 + (after.len() - after.trim_start().len());
    let token = text[start..].trim_end();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    Some((start, Zeroizing::new(decoded)))
}

/// Rewrites one request's head (request line and header lines, CRLF
/// separated, as read strictly) for `host`.
pub fn rewrite_head(
    head: &[u8],
    host: &str,
    secrets: &[BoundSecret],
) -> Result<(Zeroizing<Vec<u8>>, Vec<Substitution>), Refusal> {
    let mut out = Zeroizing::new(Vec::with_capacity(head.len()));
    let mut done = Vec::new();
    for (i, line) in head.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        let mut line = Zeroizing::new(line.to_vec());
        let place = if i == 0 {
            "query".to_string()
        } else {
            let name = line.split(|b| *b == b':').next().unwrap_or_default();
            format!(
                "header {}",
                String::from_utf8_lossy(name).to_ascii_lowercase()
            )
        };
        for secret in secrets {
            let mut seen = 0;
            let allowed = secret.binding.hosts.allows(host);
            // In the request line only the query is substituted: a
            // value put in a path or method would name a resource on the
            // host (a file, a record) that the tool could read back.
            let range = if i == 0 {
                let end = line.iter().rposition(|b| *b == b' ').unwrap_or(line.len());
                let start = line[..end].iter().position(|b| *b == b'?').unwrap_or(end);
                start..end
            } else {
                0..line.len()
            };
            for (placeholder, value) in secret.forms() {
                seen += if allowed {
                    replace_all(&mut line[range.clone()], &placeholder, &value)
                } else {
                    usize::from(find(&line, &placeholder).is_some())
                };
            }
            if i > 0 {
                if let Some(colon) = line.iter().position(|b| *b == b':') {
                    if let Some((start, mut decoded)) = basic(&line[colon + 1..]) {
                        let hits = if allowed {
                            replace_all(&mut decoded, secret.placeholder.as_bytes(), &secret.value)
                        } else {
                            usize::from(find(&decoded, secret.placeholder.as_bytes()).is_some())
                        };
                        if hits > 0 && allowed {
                            let encoded = Zeroizing::new(
                                base64::engine::general_purpose::STANDARD.encode(&*decoded),
                            );
                            let at = colon + 1 + start;
                            line[at..at + encoded.len()].copy_from_slice(encoded.as_bytes());
                        }
                        seen += hits;
                    }
                }
            }
            if seen > 0 && !allowed {
                return Err(Refusal::NotBound {
                    secret: secret.name.clone(),
                    host: host.to_string(),
                });
            }
            if seen > 0 {
                done.push(Substitution {
                    secret: secret.name.clone(),
                    place: place.clone(),
                });
            }
        }
        out.extend_from_slice(&line);
    }
    Ok((out, done))
}

/// Rewrites a body as it streams ([`Replacer`]), for secrets whose
/// binding says `body` and allows the host.
pub struct BodyRewriter {
    stream: Replacer,
    /// Secrets put in so far (names, once each).
    pub substituted: Vec<String>,
}

impl BodyRewriter {
    /// For a request to `host`: the placeholders of `secrets` its binding
    /// lets into a body there. Placeholders of other secrets are left as
    /// they are (the host gets only a placeholder).
    pub fn new(host: &str, secrets: &[BoundSecret]) -> Self {
        let pairs = secrets
            .iter()
            .filter(|s| s.binding.body && s.binding.hosts.allows(host))
            .flat_map(|s| {
                s.forms().into_iter().map(move |(p, v)| Pair {
                    from: Zeroizing::new(p),
                    to: v,
                    name: s.name.clone(),
                })
            })
            .collect();
        Self {
            stream: Replacer::new(pairs),
            substituted: Vec::new(),
        }
    }

    /// Takes the next piece; returns what may be sent now.
    pub fn push(&mut self, piece: &[u8]) -> Zeroizing<Vec<u8>> {
        let out = self.stream.push(piece);
        self.substituted.clone_from(&self.stream.replaced);
        out
    }

    /// The end of the body: what is still held.
    pub fn finish(&mut self) -> Zeroizing<Vec<u8>> {
        let out = self.stream.finish();
        self.substituted.clone_from(&self.stream.replaced);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(
        name: &str,
        placeholder: &str,
        value: &str,
        hosts: &[&str],
        body: bool,
    ) -> BoundSecret {
        BoundSecret {
            name: name.into(),
            placeholder: placeholder.into(),
            value: Zeroizing::new(value.as_bytes().to_vec()),
            binding: Binding {
                hosts: hosts
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .try_into()
                    .unwrap(),
                body,
            },
        }
    }

    fn gh() -> BoundSecret {
        secret(
            "github_token",
            "ghp_PLACEHOLDERplaceholder0123456789ab",
            "ghp_REALVALUEsecretvalue9876543210xyzw",
            &["api.github.com", "*.githubusercontent.com"],
            false,
        )
    }

    #[test]
    fn every_header_form_and_the_query_get_the_value_for_a_bound_host() {
        let s = [gh()];
        let basic = base64::engine::general_purpose::STANDARD
            .encode("x-access-token:ghp_PLACEHOLDERplaceholder0123456789ab");
        let head = format!(
            "GET /repos?access_token=ghp_PLACEHOLDERplaceholder0123456789ab HTTP/1.1\r\n\
             Host: api.github.com\r\n\
             Authorization: Bearer ghp_PLACEHOLDERplaceholder0123456789ab\r\n\
             X-Api-Key: token ghp_PLACEHOLDERplaceholder0123456789ab\r\n\
             Proxy-Thing: Basic {basic}\r\n\r\n"
        );
        let (out, done) = rewrite_head(head.as_bytes(), "api.github.com", &s).unwrap();
        let out = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(out.len(), head.len(), "the length is kept");
        assert!(!out.contains("PLACEHOLDER"), "{out}");
        assert_eq!(
            out.matches("ghp_REALVALUEsecretvalue9876543210xyzw")
                .count(),
            3
        );
        let want = base64::engine::general_purpose::STANDARD
            .encode("x-access-token:ghp_REALVALUEsecretvalue9876543210xyzw");
        assert!(out.contains(&format!("Basic {want}")), "{out}");
        let places: Vec<&str> = done.iter().map(|d| d.place.as_str()).collect();
        assert_eq!(
            places,
            [
                "query",
                "header authorization",
                "header x-api-key",
                "header proxy-thing"
            ]
        );
    }

    #[test]
    fn a_placeholder_for_another_host_refuses_the_request_in_every_form() {
        let s = [gh()];
        let basic = base64::engine::general_purpose::STANDARD
            .encode("u:ghp_PLACEHOLDERplaceholder0123456789ab");
        for head in [
            "GET /?t=ghp_PLACEHOLDERplaceholder0123456789ab HTTP/1.1\r\nHost: evil.example\r\n\r\n".to_string(),
            "GET / HTTP/1.1\r\nAuthorization: Bearer ghp_PLACEHOLDERplaceholder0123456789ab\r\n\r\n".to_string(),
            format!("GET / HTTP/1.1\r\nAuthorization: Basic {basic}\r\n\r\n"),
        ] {
            let e = rewrite_head(head.as_bytes(), "evil.example", &s).unwrap_err();
            assert_eq!(
                e,
                Refusal::NotBound {
                    secret: "github_token".into(),
                    host: "evil.example".into()
                }
            );
            assert!(e.to_string().starts_with("placeholder_not_bound"));
        }
        // The positive control: a request without a placeholder passes
        // untouched to any host.
        let plain = b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        let (out, done) = rewrite_head(plain, "evil.example", &s).unwrap();
        assert_eq!(&out[..], plain);
        assert!(done.is_empty());
    }

    #[test]
    fn a_percent_encoded_placeholder_gets_the_percent_encoded_value() {
        let s = [secret(
            "k",
            "AbCdEfGhIjKlMnOp/QrStUv+WxYz==",
            "ZyXwVuTsRqPoNmLk/JiHgFe+DcBa==",
            &["api.example.com"],
            false,
        )];
        let head = b"GET /?k=AbCdEfGhIjKlMnOp%2FQrStUv%2BWxYz%3D%3D HTTP/1.1\r\n\r\n";
        let (out, _) = rewrite_head(head, "api.example.com", &s).unwrap();
        assert_eq!(
            &out[..],
            b"GET /?k=ZyXwVuTsRqPoNmLk%2FJiHgFe%2BDcBa%3D%3D HTTP/1.1\r\n\r\n"
        );
        // The same, as a client that writes its hex digits in lower case.
        let head = b"GET /?k=AbCdEfGhIjKlMnOp%2fQrStUv%2bWxYz%3d%3d HTTP/1.1\r\n\r\n";
        let (out, _) = rewrite_head(head, "api.example.com", &s).unwrap();
        assert_eq!(
            &out[..],
            b"GET /?k=ZyXwVuTsRqPoNmLk%2fJiHgFe%2bDcBa%3d%3d HTTP/1.1\r\n\r\n"
        );
    }

    #[test]
    fn a_body_is_rewritten_across_piece_boundaries_only_where_the_binding_says_body() {
        let mut with_body = gh();
        with_body.binding.body = true;
        let s = [with_body];
        let body = br#"{"token": "ghp_PLACEHOLDERplaceholder0123456789ab", "again": "ghp_PLACEHOLDERplaceholder0123456789ab"}"#;
        for split in [1, 7, 20, 33, body.len() - 1] {
            let mut r = BodyRewriter::new("api.github.com", &s);
            let mut out = r.push(&body[..split]).to_vec();
            out.extend_from_slice(&r.push(&body[split..]));
            out.extend_from_slice(&r.finish());
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out.len(), body.len());
            assert_eq!(
                out.matches("ghp_REALVALUE").count(),
                2,
                "split at {split}: {out}"
            );
            assert_eq!(r.substituted, ["github_token"]);
        }
        // Without `body`, the body keeps the placeholder.
        let s = [gh()];
        let mut r = BodyRewriter::new("api.github.com", &s);
        let mut out = r.push(body).to_vec();
        out.extend_from_slice(&r.finish());
        assert_eq!(&out[..], &body[..]);
        assert!(r.substituted.is_empty());
    }

    #[test]
    fn a_header_with_multibyte_text_where_basic_would_be_is_rewritten_not_a_panic() {
        let secrets = [secret(
            "github_token",
            "ghp_PLACEHOLDERplaceholder0123456789ab",
            "ghp_REALVALUErealvalue98765432100xyzAB",
            &["api.github.com"],
            false,
        )];
        for value in [
            "abcde\u{e9} ",
            "\u{e9}\u{e9}\u{e9} ",
            "basi\u{e9}",
            "Basic \u{e9}",
        ] {
            let head = format!(
                "GET /x HTTP/1.1\r\nX-A: {value}{}\r\nHost: api.github.com",
                secrets[0].placeholder
            );
            let (out, done) = rewrite_head(head.as_bytes(), "api.github.com", &secrets).unwrap();
            let out = String::from_utf8(out.to_vec()).unwrap();
            assert!(out.contains(&format!("X-A: {value}")), "{out}");
            assert_eq!(done.len(), 1, "{value:?}: {done:?}");
        }
    }

    #[test]
    fn only_the_query_of_the_request_line_is_substituted() {
        let secrets = [secret(
            "github_token",
            "ghp_PLACEHOLDERplaceholder0123456789ab",
            "ghp_REALVALUErealvalue98765432100xyzAB",
            &["api.github.com"],
            false,
        )];
        let p = &secrets[0].placeholder;
        let head = format!("PUT /files/{p}?token={p} HTTP/1.1\r\nHost: api.github.com");
        let (out, done) = rewrite_head(head.as_bytes(), "api.github.com", &secrets).unwrap();
        let out = String::from_utf8(out.to_vec()).unwrap();
        assert!(
            out.starts_with(&format!("PUT /files/{p}?token=ghp_REALVALUE")),
            "{out}"
        );
        assert_eq!(done.len(), 1);
        // The path alone: nothing substituted, nothing refused.
        let head = format!("GET /files/{p} HTTP/1.1\r\nHost: api.github.com");
        let (out, done) = rewrite_head(head.as_bytes(), "api.github.com", &secrets).unwrap();
        assert!(!String::from_utf8_lossy(&out).contains("REALVALUE"));
        assert!(done.is_empty());
        // Toward another host a placeholder anywhere in the line refuses.
        assert!(rewrite_head(head.as_bytes(), "evil.example.com", &secrets).is_err());
    }
}
