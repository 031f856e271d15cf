//! What a call holding a bound secret trusts: the bundle of the system's
//! roots and the call's own CA, at [`CA_BUNDLE`] in the call's private
//! view, and the variables common clients read it from.
//!
//! Guarantees: every variable of [`CA_VARIABLES`] names the bundle, so each
//! client the tests drove (curl, Python's `ssl`/`urllib`/`requests`, git)
//! verifies the broker's leaves and, through the system's roots in the
//! same bundle, every host the broker does not intercept; the bundle holds
//! certificates only, never a key.
#![forbid(unsafe_code)]

/// The folder of the call's broker files, a `ramfs` of the call's own.
pub const BROKER_DIR: &str = "/run/tono-broker";

/// The bundle's path inside the call's view.
pub const CA_BUNDLE: &str = "/run/tono-broker/ca-bundle.pem";

/// The system's roots, as Debian's `ca-certificates` writes them.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The variables that name a CA bundle, and the clients that read each:
/// OpenSSL and Python's `ssl` (`SSL_CERT_FILE`), curl (`CURL_CA_BUNDLE`),
/// Python `requests` (`REQUESTS_CA_BUNDLE`), Node (`NODE_EXTRA_CA_CERTS`,
/// added to its own roots), git (`GIT_SSL_CAINFO`), pip (`PIP_CERT`),
/// cargo (`CARGO_HTTP_CAINFO`), the AWS SDKs and CLI (`AWS_CA_BUNDLE`),
/// Deno (`DENO_CERT`).
pub const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "DENO_CERT",
];

/// The variables of a call holding a bound secret, each with its value:
/// the proxy variables naming the broker at `broker` (`127.0.0.1:3129`),
/// loopback itself direct, and the CA variables naming the bundle.
pub fn variables(broker: &str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = crate::env::PROXY_VARIABLES
        .iter()
        .map(|name| (*name, format!("http://{broker}")))
        .collect();
    for name in ["NO_PROXY", "no_proxy"] {
        out.push((name, "localhost,127.0.0.1,::1".to_string()));
    }
    out.extend(
        CA_VARIABLES
            .iter()
            .map(|name| (*name, CA_BUNDLE.to_string())),
    );
    out
}
