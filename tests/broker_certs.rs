//! The call CA's leaves are accepted by real clients at their strictest
//! (issue 34): a TLS server on loopback presents a leaf of a fresh
//! `CallCa` for `bound.test`, and Python's `ssl` with `VERIFY_X509_STRICT`
//! (what Python 3.13+ sets by default: it refuses a leaf without an
//! authority key identifier) and `curl` with the CA as their only root
//! complete the handshake for that name — and refuse it, with the
//! verifier's reason, for another name, and under another call's CA.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;

use tono_seal::broker::ca::CallCa;

/// Serves `leaf` for `host` on a loopback port until `count` handshakes
/// were tried; each answers one HTTP request with `ok`.
fn serve(ca: &CallCa, host: &str, count: usize) -> (u16, std::thread::JoinHandle<()>) {
    let leaf = ca.leaf_for(host).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(leaf.chain, leaf.key)
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, stream.unwrap());
            let mut buf = [0u8; 1024];
            if tls.read(&mut buf).is_ok() {
                let _ = tls.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        }
    });
    (port, handle)
}

fn python(ca_file: &str, name: &str, port: u16) -> (bool, String) {
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.create_default_context(cafile={ca_file:?})\n\
         ctx.verify_flags |= ssl.VERIFY_X509_STRICT\n\
         try:\n\
         \x20   s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname={name:?})\n\
         \x20   s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); print('OK', s.recv(100)[-2:])\n\
         except ssl.SSLCertVerificationError as e:\n\
         \x20   print('REFUSED', e.verify_message)\n"
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (
        out.starts_with("OK b'ok'"),
        format!("{out} {}", String::from_utf8_lossy(&o.stderr)),
    )
}

fn curl(ca_file: &str, name: &str, port: u16) -> (Option<i32>, String) {
    let o = Command::new("curl")
        .args(["-sS", "--cacert", ca_file, "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("curl");
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn python_strict_and_curl_accept_a_leaf_for_its_host_and_refuse_it_elsewhere() {
    let ca = CallCa::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let ca_file = ca_file.to_str().unwrap();
    let other = CallCa::new().unwrap();
    let other_file = dir.path().join("other.pem");
    std::fs::write(&other_file, other.cert_pem()).unwrap();
    let other_file = other_file.to_str().unwrap();

    let (port, server) = serve(&ca, "bound.test", 6);
    // The positive controls: the bound name under the call's CA.
    let (ok, said) = python(ca_file, "bound.test", port);
    assert!(ok, "python strict: {said}");
    let (code, said) = curl(ca_file, "bound.test", port);
    assert_eq!(code, Some(0), "curl: {said}");
    assert_eq!(said, "ok");
    // Another name: refused by each, with its reason.
    let (ok, said) = python(ca_file, "other.test", port);
    assert!(
        !ok && said.contains("REFUSED") && said.contains("mismatch"),
        "{said}"
    );
    let (code, said) = curl(ca_file, "other.test", port);
    assert_eq!(code, Some(60), "curl's peer-certificate failure: {said}");
    // Another call's CA: refused.
    let (ok, said) = python(other_file, "bound.test", port);
    assert!(!ok && said.contains("REFUSED"), "{said}");
    let (code, said) = curl(other_file, "bound.test", port);
    assert_eq!(code, Some(60), "{said}");
    server.join().unwrap();
}
