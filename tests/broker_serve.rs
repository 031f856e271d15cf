//! The call's broker as a server (issue 34), driven by real clients in
//! this process: `curl` and Python (`urllib`, `http.client`) use it as
//! their proxy; a Python HTTPS server of the test's own
//! (`tests/broker_upstream.py`, its certificate from a test CA made here)
//! stands for the bound host and records the credentials each request
//! carried; a small `CONNECT` forwarder here stands for the worker's end
//! of the call's network and maps every name to 127.0.0.1.
//!
//! Shown: the host saw the value while the client saw only the
//! placeholder, in every echo form (raw, base64, hex, a header, gzip,
//! deflate, chunked in 7-byte pieces, gzip chunked in 5-byte pieces); a
//! placeholder for a host its secret is not bound to is refused `403
//! placeholder_not_bound` and nothing reaches the host; a `CONNECT` to an
//! unbound host is tunnelled untouched (the client verifies the host's
//! own certificate); a host whose certificate fails is answered `502
//! upstream_certificate_refused` and gets nothing; malformed requests get
//! `400`/`501` and nothing is sent; a plain `http://` request with a
//! placeholder is refused `403 placeholder_needs_tls`; ten thousand
//! requests on one kept-alive connection leave the descriptors and memory
//! of this process flat. Each refusal beside the same probe passing where
//! it should. Not root: the broker runs as whoever runs the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::Value;
use tono_seal::broker::ca::CallCa;
use tono_seal::broker::placeholder::shaped_like;
use tono_seal::broker::serve::{start, Broker, BrokerSetup};
use tono_seal::broker::substitute::BoundSecret;
use tono_seal::env::Binding;
use zeroize::Zeroizing;

/// The tests share this process's descriptors and memory, which one of
/// them counts: they run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

const VALUE: &str = "ghp_R3alV4lueS3cretXyZ0123456789abcdEFGH";
const KEY_VALUE: &str = "sk-Another0Secret1Value2For3Other4Host5";
const BODY_VALUE: &str = "xoxb-Body0Bound1Secret2Value3abcdefXYZ";

/// A certificate authority for the test's upstream, and a leaf of it.
struct TestCa {
    pem: String,
    leaf_pem: String,
    key_pem: String,
}

fn test_ca(names: &[&str]) -> TestCa {
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(DnType::CommonName, "broker_serve upstream CA");
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut lp =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    lp.use_authority_key_identifier_extension = true;
    lp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    lp.distinguished_name.push(DnType::CommonName, names[0]);
    let leaf = lp.signed_by(&key, &ca, &ca_key).unwrap();
    TestCa {
        pem: ca.pem(),
        leaf_pem: leaf.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// The worker's end of the call's network, as the test plays it: any
/// `CONNECT name:port` goes to 127.0.0.1:port (`refuse.tono.test` is
/// answered 403), a plain request to its port on 127.0.0.1.
struct Forwarder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

fn read_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    Some(head)
}

fn pipe(a: TcpStream, b: TcpStream) {
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut &a2, &mut &b2);
        let _ = b2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut &b, &mut &a);
    let _ = a.shutdown(std::net::Shutdown::Write);
    let _ = t.join();
}

fn forwarder() -> Forwarder {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let Some(head) = read_head(&mut s) else {
                    return;
                };
                let text = String::from_utf8_lossy(&head).to_string();
                let first = text.lines().next().unwrap_or_default().to_string();
                log.lock().unwrap().push(first.clone());
                let target = first.split(' ').nth(1).unwrap_or_default();
                let authority = target.trim_start_matches("http://");
                let authority = authority.split('/').next().unwrap_or_default();
                let port: u16 = authority.rsplit(':').next().unwrap().parse().unwrap_or(80);
                if authority.starts_with("refuse.tono.test") {
                    let _ = s.write_all(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 14\r\n\r\negress_refused",
                    );
                    return;
                }
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", port)) else {
                    let _ = s.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
                    return;
                };
                if first.starts_with("CONNECT ") {
                    s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .unwrap();
                } else {
                    up.write_all(&head).unwrap();
                }
                pipe(s, up);
            });
        }
    });
    Forwarder { addr, seen }
}

struct Upstream {
    port: u16,
    log: PathBuf,
    child: Child,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn upstream(dir: &Path, name: &str, tls: Option<&TestCa>) -> Upstream {
    let log = dir.join(format!("{name}.log"));
    let mut cmd = Command::new("python3");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/broker_upstream.py"
    ))
    .arg(&log);
    if let Some(ca) = tls {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &ca.leaf_pem).unwrap();
        std::fs::write(&key, &ca.key_pem).unwrap();
        cmd.arg(cert).arg(key);
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Upstream {
        port: line.trim().parse().expect("the upstream's port"),
        log,
        child,
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    broker: Broker,
    forwarder: Forwarder,
    up: Upstream,
    bad: Upstream,
    http: Upstream,
    /// The call's trust bundle (its CA).
    bundle: PathBuf,
    /// The upstream's own CA.
    upstream_ca: PathBuf,
    call_ca_der: rustls::pki_types::CertificateDer<'static>,
    ph: String,
    key_ph: String,
    body_ph: String,
}

fn bound(name: &str, value: &str, hosts: &[&str], body: bool) -> (BoundSecret, String) {
    let ph = shaped_like(value.as_bytes()).unwrap();
    (
        BoundSecret {
            name: name.into(),
            placeholder: ph.clone(),
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
        },
        ph,
    )
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let good = test_ca(&["api.tono.test", "other.tono.test", "plain.tono.test"]);
    let evil = test_ca(&["api.tono.test"]);
    let up = upstream(dir.path(), "up", Some(&good));
    let bad = upstream(dir.path(), "bad", Some(&evil));
    let http = upstream(dir.path(), "http", None);
    let forwarder = forwarder();
    let ca = CallCa::new().unwrap();
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, tono_seal::broker::ca::bundle(b"", &ca)).unwrap();
    let upstream_ca = dir.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca, &good.pem).unwrap();
    let call_ca_der = ca.cert_der();
    let (gh, ph) = bound(
        "github_token",
        VALUE,
        &["api.tono.test", "refuse.tono.test"],
        false,
    );
    let (key, key_ph) = bound("api_key", KEY_VALUE, &["other.tono.test"], false);
    let (body, body_ph) = bound("body_token", BODY_VALUE, &["api.tono.test"], true);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let broker = start(
        listener,
        BrokerSetup {
            secrets: vec![gh, key, body],
            ca,
            roots_pem: good.pem.clone().into_bytes(),
            upstream_proxy: forwarder.addr,
        },
    )
    .unwrap();
    Fixture {
        dir,
        broker,
        forwarder,
        up,
        bad,
        http,
        bundle,
        upstream_ca,
        call_ca_der,
        ph,
        key_ph,
        body_ph,
    }
}

struct Got {
    code: Option<i32>,
    status: u16,
    out: String,
    err: String,
}

impl Fixture {
    fn proxy(&self) -> String {
        format!("http://{}", self.broker.local_addr())
    }

    /// `curl` through the broker with `token` as its bearer, trusting
    /// `cacert`; headers and body on stdout.
    fn curl(&self, cacert: &Path, token: &str, url: &str, extra: &[&str]) -> Got {
        let o = Command::new("curl")
            .args(["-sS", "-D", "-", "-x", &self.proxy(), "--cacert"])
            .arg(cacert)
            .arg("-H")
            .arg(format!("Authorization: Bearer {token}"))
            .args(extra)
            .args(["-w", "\nSTATUS:%{http_code}", url])
            .output()
            .expect("curl");
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let status = out
            .rsplit("STATUS:")
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        Got {
            code: o.status.code(),
            status,
            out,
            err: String::from_utf8_lossy(&o.stderr).to_string(),
        }
    }

    fn url(&self, host: &str, port: u16, path: &str) -> String {
        format!("https://{host}:{port}{path}")
    }

    fn connects(&self) -> usize {
        self.forwarder.seen.lock().unwrap().len()
    }
}

fn body_of(out: &str) -> &str {
    let after = out.rsplit_once("\r\n\r\n").map_or(out, |(_, b)| b);
    after.rsplit_once("\nSTATUS:").map_or(after, |(b, _)| b)
}

#[test]
fn the_host_gets_the_value_and_curl_only_the_placeholder_in_every_echo_form() {
    let _one = serial();
    let f = fixture();
    let b64 = base64::engine::general_purpose::STANDARD;
    let forms = [
        "raw",
        "chunked",
        "gzip",
        "gzipchunked",
        "deflate",
        "b64",
        "hex",
        "header",
    ];
    for form in forms {
        let extra: &[&str] = if form == "gzip" {
            &["--compressed"]
        } else {
            &[]
        };
        let got = f.curl(
            &f.bundle,
            &f.ph,
            &f.url("api.tono.test", f.up.port, &format!("/echo?form={form}")),
            extra,
        );
        assert_eq!(got.status, 200, "{form}: {} {}", got.out, got.err);
        assert!(
            !got.out.contains(VALUE),
            "{form}: the value reached curl: {}",
            got.out
        );
        let body = body_of(&got.out);
        match form {
            "b64" => {
                let decoded = b64.decode(body.trim()).unwrap();
                let inner = &VALUE.as_bytes()[1..VALUE.len() - 1];
                assert!(
                    !decoded.windows(inner.len()).any(|w| w == inner),
                    "{form}: {body}"
                );
                let ph_inner = &f.ph.as_bytes()[1..f.ph.len() - 1];
                assert!(
                    decoded.windows(ph_inner.len()).any(|w| w == ph_inner),
                    "{form}: {body}"
                );
            }
            "hex" => {
                let hex: String = f.ph.bytes().map(|b| format!("{b:02x}")).collect();
                assert_eq!(body, hex, "{form}");
            }
            "header" => assert!(
                got.out.contains(&format!("X-Echo: {}\r\n", f.ph)),
                "{form}: {}",
                got.out
            ),
            _ => {
                assert_eq!(body, format!("token={0}&again={0}", f.ph), "{form}");
                if form.starts_with("gzip") || form == "deflate" {
                    assert!(
                        !got.out.to_ascii_lowercase().contains("content-encoding"),
                        "{form}: {}",
                        got.out
                    );
                }
            }
        }
        let seen = f.up.seen();
        let last = seen.last().unwrap();
        assert_eq!(last["authorization"], format!("Bearer {VALUE}"), "{form}");
        assert_eq!(last["accept_encoding"], "identity", "{form}");
    }
    let uses = settled_uses(&f.broker);
    assert_eq!(uses.len(), forms.len(), "{uses:?}");
    for u in &uses {
        assert_eq!(u.secrets, ["github_token"]);
        assert_eq!(
            (u.host.as_str(), u.method.as_str(), u.path.as_str()),
            ("api.tono.test", "GET", "/echo")
        );
        assert_eq!((u.status, u.refused.as_deref()), (200, None));
        assert!(u.bytes_down > 0);
    }
    let json = serde_json::to_string(&uses).unwrap();
    assert!(
        !json.contains(VALUE) && !json.contains(&f.ph[4..]),
        "{json}"
    );
    println!(
        "{} echo forms through the broker: the host saw the value {} times, curl never",
        forms.len(),
        f.up.seen().len()
    );
}

#[test]
fn python_urllib_through_the_broker_sees_only_the_placeholder() {
    let _one = serial();
    let f = fixture();
    let script = format!(
        "import ssl, urllib.request\n\
         ctx = ssl.create_default_context(cafile={bundle:?})\n\
         op = urllib.request.build_opener(urllib.request.ProxyHandler({{'https': {proxy:?}}}), urllib.request.HTTPSHandler(context=ctx))\n\
         for form in ['gzipchunked', 'raw']:\n\
         \x20   r = op.open(urllib.request.Request('https://api.tono.test:{port}/echo?form=' + form, headers={{'Authorization': 'Bearer {ph}'}}))\n\
         \x20   print(r.status, r.read().decode())\n",
        bundle = f.bundle.display().to_string(),
        proxy = f.proxy(),
        port = f.up.port,
        ph = f.ph,
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = format!("200 token={0}&again={0}\n", f.ph);
    assert_eq!(out, want.repeat(2));
    assert!(f
        .up
        .seen()
        .iter()
        .all(|s| s["authorization"] == format!("Bearer {VALUE}")));
}

#[test]
fn a_placeholder_for_a_host_its_secret_is_not_bound_to_is_refused_and_nothing_is_sent() {
    let _one = serial();
    let f = fixture();
    let url = f.url("other.tono.test", f.up.port, "/echo");
    let got = f.curl(&f.bundle, &f.ph, &url, &[]);
    assert_eq!(got.status, 403, "{}", got.out);
    assert!(
        body_of(&got.out).starts_with("placeholder_not_bound: github_token's placeholder"),
        "{}",
        got.out
    );
    assert!(f.up.seen().is_empty(), "the host saw {:?}", f.up.seen());
    assert_eq!(
        f.connects(),
        0,
        "the network end saw {:?}",
        f.forwarder.seen
    );
    let uses = settled_uses(&f.broker);
    assert_eq!(uses.len(), 1);
    assert_eq!(
        (uses[0].status, uses[0].refused.as_deref()),
        (403, Some("placeholder_not_bound"))
    );
    assert!(uses[0].secrets.is_empty());
    // The positive control: the secret bound there goes through.
    let got = f.curl(&f.bundle, &f.key_ph, &url, &[]);
    assert_eq!(got.status, 200, "{}", got.out);
    assert_eq!(
        f.up.seen()[0]["authorization"],
        format!("Bearer {KEY_VALUE}")
    );
    assert_eq!(body_of(&got.out), format!("token={0}&again={0}", f.key_ph));
}

#[test]
fn a_connect_to_an_unbound_host_is_tunnelled_untouched() {
    let _one = serial();
    let f = fixture();
    // Trusting only the host's own CA: the handshake passes only if the
    // broker did not intercept.
    let got = f.curl(
        &f.upstream_ca,
        &f.ph,
        &f.url("plain.tono.test", f.up.port, "/echo"),
        &[],
    );
    assert_eq!(
        (got.code, got.status),
        (Some(0), 200),
        "{} {}",
        got.out,
        got.err
    );
    assert_eq!(
        f.up.seen()[0]["authorization"],
        format!("Bearer {}", f.ph),
        "the host saw the placeholder, never the value"
    );
    assert!(settled_uses(&f.broker).is_empty());
    assert_eq!(
        *f.forwarder.seen.lock().unwrap(),
        [format!("CONNECT plain.tono.test:{} HTTP/1.1", f.up.port)]
    );
    // The control: a bound host is intercepted, and its leaf is the call
    // CA's, which the host's CA does not vouch for (curl's exit 60).
    let got = f.curl(
        &f.upstream_ca,
        &f.ph,
        &f.url("api.tono.test", f.up.port, "/echo"),
        &[],
    );
    assert_eq!(got.code, Some(60), "{} {}", got.out, got.err);
    assert_eq!(f.up.seen().len(), 1);
}

#[test]
fn a_host_whose_certificate_fails_gets_nothing_and_curl_a_502() {
    let _one = serial();
    let f = fixture();
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("api.tono.test", f.bad.port, "/echo"),
        &[],
    );
    assert_eq!(got.status, 502, "{}", got.out);
    assert!(
        body_of(&got.out).starts_with("upstream_certificate_refused: api.tono.test"),
        "{}",
        got.out
    );
    assert!(
        f.bad.seen().is_empty(),
        "the false host saw {:?}",
        f.bad.seen()
    );
    let uses = settled_uses(&f.broker);
    assert_eq!(
        (uses[0].status, uses[0].refused.as_deref()),
        (502, Some("upstream_certificate_refused"))
    );
    assert!(uses[0].secrets.is_empty(), "nothing was put in: {uses:?}");
    // The network end refusing a destination: 502 with its reason.
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("refuse.tono.test", 443, "/echo"),
        &[],
    );
    assert_eq!(got.status, 502, "{}", got.out);
    assert!(
        body_of(&got.out).contains("upstream_refused") && got.out.contains("egress_refused"),
        "{}",
        got.out
    );
    // The control: the true host, same request.
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("api.tono.test", f.up.port, "/echo"),
        &[],
    );
    assert_eq!(got.status, 200, "{}", got.out);
}

/// One request written raw, through the broker, inside TLS to `host`.
fn raw(f: &Fixture, host: &str, port: u16, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(f.broker.local_addr()).unwrap();
    write!(
        tcp,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut tcp).unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(f.call_ca_der.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), host.to_string().try_into().unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

#[test]
fn malformed_requests_are_refused_and_nothing_reaches_the_host() {
    let _one = serial();
    let f = fixture();
    let a = format!("Authorization: Bearer {}", f.ph);
    let cases = [
        (format!("GET /echo HTTP/1.1\nHost: api.tono.test\r\n{a}\r\n\r\n"), "400 Bad Request", "malformed_request: malformed: a line ends in a bare LF"),
        (format!("POST /echo HTTP/1.1\r\n{a}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), "400 Bad Request", "malformed_request: malformed: both Content-Length"),
        (format!("POST /echo HTTP/1.1\r\n{a}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"), "400 Bad Request", "malformed_request: malformed: more than one Content-Length"),
        (format!("GET /echo HTTP/1.1\r\n{a}\r\n folded\r\n\r\n"), "400 Bad Request", "malformed_request: malformed: a folded header line"),
        (format!("GET /echo HTTP/1.1\r\n{a}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"), "501 Not Implemented", "upgrade_not_supported"),
        (format!("GET /echo HTTP/1.1\r\nHost: other.tono.test\r\n{a}\r\n\r\n"), "400 Bad Request", "host_mismatch"),
        (format!("GET /echo HTTP/1.1\r\n{a}\r\n\r\n"), "400 Bad Request", "host_mismatch"),
    ];
    for (request, status, code) in &cases {
        let got = raw(&f, "api.tono.test", f.up.port, request.as_bytes());
        assert!(
            got.starts_with(&format!("HTTP/1.1 {status}\r\n")),
            "{request:?}: {got}"
        );
        assert!(got.contains(code), "{request:?}: {got}");
    }
    assert!(f.up.seen().is_empty(), "the host saw {:?}", f.up.seen());
    assert_eq!(
        f.connects(),
        0,
        "the network end saw {:?}",
        f.forwarder.seen
    );
    // The control: the same client, a well-formed request.
    let got = raw(
        &f,
        "api.tono.test",
        f.up.port,
        format!("GET /echo HTTP/1.1\r\nHost: api.tono.test\r\n{a}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert_eq!(f.up.seen().len(), 1);
    assert_eq!(settled_uses(&f.broker).len(), cases.len() + 1);
}

#[test]
fn plain_http_with_a_placeholder_is_refused_and_without_passes_closed() {
    let _one = serial();
    let f = fixture();
    let url = format!("http://api.tono.test:{}/echo", f.http.port);
    let pct: String =
        f.ph.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
    for (token, url) in [
        (f.ph.clone(), url.clone()),
        ("nothing".to_string(), format!("{url}?t={pct}")),
    ] {
        let got = f.curl(&f.bundle, &token, &url, &[]);
        assert_eq!(got.status, 403, "{}", got.out);
        assert!(
            body_of(&got.out).starts_with("placeholder_needs_tls: github_token's placeholder"),
            "{}",
            got.out
        );
    }
    assert!(f.http.seen().is_empty(), "the host saw {:?}", f.http.seen());
    assert_eq!(f.connects(), 0);
    let uses = settled_uses(&f.broker);
    assert_eq!(uses.len(), 2);
    assert!(
        uses.iter()
            .all(|u| u.refused.as_deref() == Some("placeholder_needs_tls") && u.path == "/echo"),
        "{uses:?}"
    );
    // The control: no placeholder, passed on through the network end.
    let got = f.curl(&f.bundle, "nothing", &url, &[]);
    assert_eq!(got.status, 200, "{}", got.out);
    assert_eq!(f.http.seen().len(), 1);
    assert_eq!(f.connects(), 1);
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `count` requests on one kept-alive connection (Python's http.client
/// through the broker); how many did not come back as expected.
fn python_loop(f: &Fixture, count: usize) -> String {
    let script = format!(
        "import http.client, ssl\n\
         ctx = ssl.create_default_context(cafile={bundle:?})\n\
         c = http.client.HTTPSConnection('127.0.0.1', {bport}, context=ctx)\n\
         c.set_tunnel('api.tono.test', {port})\n\
         want = b'token={ph}&again={ph}'\n\
         bad = 0\n\
         for i in range({count}):\n\
         \x20   c.request('GET', '/echo?form=raw', headers={{'Authorization': 'Bearer {ph}'}})\n\
         \x20   r = c.getresponse()\n\
         \x20   if r.status != 200 or r.read() != want: bad += 1\n\
         c.close()\n\
         print({count}, bad)\n",
        bundle = f.bundle.display().to_string(),
        bport = f.broker.local_addr().port(),
        port = f.up.port,
        ph = f.ph,
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Waits, by count of looks, until the broker serves no connection.
fn settle(f: &Fixture) {
    for _ in 0..1000 {
        if f.broker.open_connections() == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "the broker still serves {} connections",
        f.broker.open_connections()
    );
}

#[test]
fn ten_thousand_requests_leave_descriptors_and_memory_flat() {
    let _one = serial();
    let f = fixture();
    // Warm-up: the record fills to its bound, the allocator to its level.
    assert_eq!(python_loop(&f, 2000), "2000 0");
    settle(&f);
    let (fd0, rss0) = (fds(), rss_kb());
    assert_eq!(python_loop(&f, 10_000), "10000 0");
    settle(&f);
    let (fd1, rss1) = (fds(), rss_kb());
    println!("10000 requests on one connection: fds {fd0} -> {fd1}, VmRSS {rss0} kB -> {rss1} kB, records {}", settled_uses(&f.broker).len());
    assert_eq!(fd1, fd0, "descriptors");
    assert!(rss1 < rss0 + 1024, "VmRSS grew from {rss0} kB to {rss1} kB");
    assert_eq!(f.up.seen().len(), 12_000);
    let _ = &f.dir;
}

#[test]
fn a_body_gets_the_value_only_of_a_secret_bound_for_bodies_chunked_and_after_100_continue() {
    let _one = serial();
    let f = fixture();
    let body = format!(
        "{{\"bound_for_body\": \"{}\", \"not_for_body\": \"{}\", \"pad\": \"{}\"}}",
        f.body_ph,
        f.ph,
        "x".repeat(3000)
    );
    let file = f.dir.path().join("body.json");
    std::fs::write(&file, &body).unwrap();
    let data = format!("@{}", file.display());
    let url = f.url("api.tono.test", f.up.port, "/echo");
    for extra in [
        vec!["--data-binary", &data, "-H", "Expect: 100-continue"],
        vec!["--data-binary", &data, "-H", "Transfer-Encoding: chunked"],
    ] {
        let got = f.curl(&f.bundle, &f.ph, &url, &extra);
        assert_eq!(got.status, 200, "{extra:?}: {}", got.out);
        if extra.contains(&"Expect: 100-continue") {
            assert!(
                got.out.starts_with(
                    "HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
                ),
                "{}",
                got.out
            );
        }
        assert!(!got.out.contains(VALUE) && !got.out.contains(BODY_VALUE));
        let seen = f.up.seen();
        let sent = seen.last().unwrap()["body"].as_str().unwrap().to_string();
        assert_eq!(sent.len(), body.len(), "{extra:?}: the length is kept");
        assert!(sent.contains(BODY_VALUE), "{extra:?}: {sent:.120}");
        assert!(!sent.contains(&f.body_ph), "{extra:?}");
        assert!(
            sent.contains(&f.ph) && !sent.contains(VALUE),
            "{extra:?}: a secret not bound for bodies stays a placeholder there"
        );
    }
    let uses = settled_uses(&f.broker);
    assert_eq!(uses.len(), 2);
    for u in &uses {
        assert_eq!(u.secrets, ["github_token", "body_token"], "{uses:?}");
        assert_eq!((u.method.as_str(), u.bytes_up), ("POST", body.len() as u64));
    }
}

#[test]
fn the_sixty_fifth_connection_at_once_is_answered_busy() {
    let _one = serial();
    let f = fixture();
    let held: Vec<TcpStream> = (0..tono_seal::broker::serve::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(f.broker.local_addr()).unwrap())
        .collect();
    for _ in 0..1000 {
        if f.broker.open_connections() == held.len() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(f.broker.open_connections(), held.len());
    let mut extra = TcpStream::connect(f.broker.local_addr()).unwrap();
    let mut answer = String::new();
    extra.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer}"
    );
    assert!(answer.contains("broker_busy"), "{answer}");
    drop(held);
    settle(&f);
    // The control: with the places free again, a request passes.
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("api.tono.test", f.up.port, "/echo"),
        &[],
    );
    assert_eq!(got.status, 200, "{}", got.out);
}

#[test]
fn a_head_request_gets_the_hosts_length_and_no_body() {
    let _one = serial();
    let f = fixture();
    let url = f.url("api.tono.test", f.up.port, "/echo");
    // Twice on one connection: the first answer, without a body, must not
    // swallow the second.
    let got = f.curl(&f.bundle, &f.ph, &url, &["-I", &url]);
    assert_eq!(got.status, 200, "{}", got.out);
    // One connection: its CONNECT answer printed twice (-I and -D -).
    assert_eq!(
        got.out.matches("Connection established").count(),
        2,
        "{}",
        got.out
    );
    let len = "token=".len() + "&again=".len() + 2 * f.ph.len();
    // Each head twice: curl's -I prints it, and -D - again.
    assert_eq!(
        got.out
            .matches(&format!("Content-Length: {len}\r\n"))
            .count(),
        4,
        "{}",
        got.out
    );
    assert_eq!(f.up.seen().len(), 2);
    assert!(f.up.seen().iter().all(|s| s["method"] == "HEAD"));
}

#[test]
fn an_answer_in_a_coding_the_broker_cannot_scrub_is_refused_never_passed() {
    let _one = serial();
    let f = fixture();
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("api.tono.test", f.up.port, "/echo?form=br"),
        &[],
    );
    assert_eq!(got.status, 502, "{}", got.out);
    assert!(
        body_of(&got.out)
            .starts_with("answer_not_scrubbable: the host answered in Content-Encoding \"br\""),
        "{}",
        got.out
    );
    assert!(!got.out.contains(VALUE) && !got.out.contains("not really brotli"));
    assert_eq!(f.up.seen()[0]["authorization"], format!("Bearer {VALUE}"));
    let uses = settled_uses(&f.broker);
    assert_eq!(
        (uses[0].status, uses[0].refused.as_deref()),
        (502, Some("answer_not_scrubbable"))
    );
    // The control: gzip, which the broker reads, passes scrubbed.
    let got = f.curl(
        &f.bundle,
        &f.ph,
        &f.url("api.tono.test", f.up.port, "/echo?form=gzip"),
        &[],
    );
    assert_eq!(got.status, 200, "{}", got.out);
    assert_eq!(body_of(&got.out), format!("token={0}&again={0}", f.ph));
}

/// The broker's record once the clients' connections closed: a connection
/// records its last request after the client has its answer.
fn settled_uses(
    broker: &tono_seal::broker::serve::Broker,
) -> Vec<tono_seal::broker::uses::BrokerUse> {
    assert!(broker.settle(), "a connection is left open");
    broker.uses()
}
