//! The checks a registered read must pass to stay in the worker.
//!
//! `Stay` only when the args are exactly `url` (a string) and optionally
//! `headers` (an object of strings), the URL passes [`super::egress`], and
//! no header changes the target, the method, or carries credentials.
//! Anything else drops (the call may still run, as the user); a header that
//! would inject a line is refused outright.
#![forbid(unsafe_code)]

use serde_json::Value;

use super::egress::check_url;
use super::{Policy, ToolCall, Verdict};

/// Headers that change where or how a request goes, or carry credentials.
pub const HEADERS_REFUSED: &[&str] = &[
    "host",
    "forwarded",
    "via",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
    "authorization",
    "cookie",
    "connection",
    "upgrade",
    "te",
    "transfer-encoding",
    "content-length",
    "expect",
];

/// Header name prefixes refused likewise.
pub const HEADER_PREFIXES_REFUSED: &[&str] = &["x-forwarded-", "proxy-", "x-proxy-", "sec-"];

fn header_refused(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    HEADERS_REFUSED.contains(&lower.as_str())
        || HEADER_PREFIXES_REFUSED.iter().any(|p| lower.starts_with(p))
}

fn token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Judges a call whose tool is a registered read kind.
pub fn judge_read(call: &ToolCall, policy: &Policy) -> Verdict {
    if let Some(extra) = call
        .args
        .keys()
        .find(|k| !matches!(k.as_str(), "url" | "headers"))
    {
        return Verdict::drop(
            if extra == "secrets" {
                "secret_requested"
            } else {
                "args_not_stay_eligible"
            },
            format!(
                "argument {:?} is not one a stay may have; it runs as the user",
                extra.escape_debug().to_string()
            ),
        );
    }
    let Some(Value::String(url)) = call.args.get("url") else {
        return Verdict::drop(
            "url_missing",
            "a read needs a string `url`; it runs as the user",
        );
    };
    match call.args.get("headers") {
        None => {}
        Some(Value::Object(headers)) => {
            for (name, value) in headers {
                let Value::String(value) = value else {
                    return Verdict::drop("header_not_string", "header values must be strings");
                };
                if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) || !token(name) {
                    return Verdict::refuse(
                        "header_injection",
                        format!(
                            "header {:?} would inject a line",
                            name.escape_debug().to_string()
                        ),
                    );
                }
                if !value.is_ascii() {
                    return Verdict::drop(
                        "header_not_ascii",
                        format!("header {name:?} has a non-ASCII value"),
                    );
                }
                if header_refused(name) {
                    return Verdict::drop(
                        "header_changes_target",
                        format!("header {name:?} may not be sent from the worker"),
                    );
                }
            }
        }
        Some(_) => {
            return Verdict::drop(
                "headers_not_object",
                "`headers` must be an object of strings",
            )
        }
    }
    match check_url(url, policy.stay_ports(), policy.denied_suffixes()) {
        Ok(_) => Verdict::stay("public_read", "a registered read of a public address"),
        // A drop: the call may still run, as the user.
        Err(e) => Verdict::drop(e.code, e.reason),
    }
}
