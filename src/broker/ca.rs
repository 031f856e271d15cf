//! The call's own certificate authority: made in memory when a call holds
//! a bound secret, it signs a leaf for each bound host the broker
//! intercepts, and dies with the call.
//!
//! Guarantees: the CA's key is generated here (ECDSA P-256, the operating
//! system's randomness) and never serialized by this module but into the
//! leaf signatures; the CA certificate says `basicConstraints` CA:true with
//! a path length of 0, key usage `keyCertSign`, and a subject key
//! identifier; each leaf names exactly its host as its one DNS subject
//! alternative name and carries the authority and subject key identifiers,
//! `basicConstraints` CA:false and `extendedKeyUsage` serverAuth — what
//! current verifiers demand (Python 3.13+ refuses a leaf without an
//! authority key identifier); both are valid from five minutes ago (clock
//! skew between the call and the tool's checks) for [`VALIDITY`], so a
//! certificate copied out of a call is worthless within hours.
#![forbid(unsafe_code)]

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// How long the CA and its leaves are valid.
pub const VALIDITY: Duration = Duration::from_secs(12 * 3600);

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("making the call's certificate: {0}")]
pub struct CaError(String);

impl From<rcgen::Error> for CaError {
    fn from(e: rcgen::Error) -> Self {
        Self(e.to_string())
    }
}

/// A leaf for one host: its chain (the leaf, then the call's CA) and key.
pub struct Leaf {
    /// The leaf's certificate, then the CA's.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
}

/// The call's CA.
pub struct CallCa {
    key: KeyPair,
    cert: rcgen::Certificate,
}

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::seconds(VALIDITY.as_secs() as i64);
}

impl CallCa {
    /// A fresh CA for one call.
    pub fn new() -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "tono-seal call broker CA");
        validity(&mut params);
        let cert = params.self_signed(&key)?;
        Ok(Self { key, cert })
    }

    /// The CA's certificate (DER).
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The CA's certificate (PEM), for the call's trust bundle.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf for `host`, signed by this CA.
    pub fn leaf_for(&self, host: &str) -> Result<Leaf, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.distinguished_name.push(DnType::CommonName, host);
        validity(&mut params);
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.cert_der()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }
}

/// The trust bundle a call's clients read: the system's roots (PEM, as
/// `/etc/ssl/certs/ca-certificates.crt` holds them) and then the call's CA.
pub fn bundle(system_roots_pem: &[u8], ca: &CallCa) -> Vec<u8> {
    let mut out = system_roots_pem.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(ca.cert_pem().as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    use super::*;

    fn verifier(ca: &CallCa) -> Arc<rustls::client::WebPkiServerVerifier> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der()).unwrap();
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    }

    fn check(
        v: &rustls::client::WebPkiServerVerifier,
        leaf: &Leaf,
        host: &str,
    ) -> Result<(), String> {
        v.verify_server_cert(
            &leaf.chain[0],
            &leaf.chain[1..],
            &ServerName::try_from(host.to_string()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_leaf_verifies_for_its_host_under_its_calls_ca_only() {
        let ca = CallCa::new().unwrap();
        let leaf = ca.leaf_for("api.github.com").unwrap();
        let v = verifier(&ca);
        check(&v, &leaf, "api.github.com").expect("the positive control");
        let other_host = check(&v, &leaf, "evil.example.com").unwrap_err();
        assert!(other_host.contains("not valid for name"), "{other_host}");
        // Another call's CA (the same name, another key) does not vouch
        // for this call's leaf: its signature does not verify.
        let other = CallCa::new().unwrap();
        let stranger = check(&verifier(&other), &leaf, "api.github.com").unwrap_err();
        assert!(stranger.contains("BadSignature"), "{stranger}");
    }

    fn has(der: &[u8], needle: &[u8]) -> bool {
        der.windows(needle.len()).any(|w| w == needle)
    }

    // OIDs as DER bytes: 06 len value.
    const SKI: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0e];
    const AKI: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x23];
    const BASIC: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x13];
    const EKU: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x25];
    const SERVER_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
    // BasicConstraints value SEQUENCE { BOOLEAN TRUE, INTEGER 0 }.
    const CA_TRUE_PATHLEN_0: &[u8] = &[0x30, 0x06, 0x01, 0x01, 0xff, 0x02, 0x01, 0x00];

    #[test]
    fn the_certificates_carry_the_extensions_current_verifiers_demand() {
        let ca = CallCa::new().unwrap();
        let ca_der = ca.cert_der();
        assert!(has(&ca_der, SKI) && has(&ca_der, BASIC) && has(&ca_der, CA_TRUE_PATHLEN_0));
        let leaf = ca.leaf_for("raw.githubusercontent.com").unwrap();
        let der = &leaf.chain[0];
        for (what, oid) in [
            ("subject key identifier", SKI),
            ("authority key identifier", AKI),
            ("basic constraints", BASIC),
            ("extended key usage", EKU),
            ("serverAuth", SERVER_AUTH),
        ] {
            assert!(has(der, oid), "the leaf lacks its {what}");
        }
        assert!(!has(der, CA_TRUE_PATHLEN_0), "a leaf is no CA");
        assert!(has(der, b"raw.githubusercontent.com"));
    }

    #[test]
    fn the_bundle_is_the_systems_roots_then_the_calls_ca() {
        let ca = CallCa::new().unwrap();
        let b = bundle(
            b"-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----",
            &ca,
        );
        let text = String::from_utf8(b).unwrap();
        assert!(text
            .starts_with("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n-----BEGIN"));
        assert!(text.ends_with(&ca.cert_pem()));
    }
}
