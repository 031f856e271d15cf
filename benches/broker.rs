//! What the call's broker costs (issue 34's figures), every case beside
//! its peer in the same run: the same `curl`, in the same kind of call,
//! with the real value and no broker (the secret unbound, network `host`,
//! curl straight to the host).
//!
//! - **a call with one request**: `tono-seal run` of one `curl` through
//!   the broker (the call's CA, a leaf, two handshakes and the broker's
//!   start included) against the same call with the value directly;
//! - **a request on a kept-alive connection**: one `curl` of `KEEP`
//!   requests to the same host (one connection) minus one of 1 request,
//!   per request, broker against direct;
//! - **1,000 requests through one broker**: the launcher's (the broker's)
//!   RSS and open descriptors after the first request and after 1,000
//!   more, read by root from `/proc`.
//!
//! The host is a rustls HTTPS server of the bench's own on loopback
//! (`bench.tono.test`, named in `/etc/hosts`), which accepts only the real
//! value. As root: `cargo bench --bench broker` (ROUNDS=N, 30 by default;
//! KEEP=N, 200 by default). The table is printed and written to
//! `target/bench/broker.json`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use common::{bin, tono, write_result};
use tono_seal::drop::Launcher;
use tono_seal::turn::account;

const HOST: &str = "bench.tono.test";
const UID: u32 = 61960;
const VALUE: &str = "ghp_BenchValue0123456789abcdefghijKL";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A loopback HTTPS server answering every request `200` when it carries
/// the real value and `401` when not; its CA's PEM and port.
fn serve() -> (String, u16) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tono-seal bench CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec![HOST.to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, stream);
                answer_all(&mut tls);
            });
        }
    });
    (ca.pem(), port)
}

/// Answers each request (a head, no body) of one connection until it
/// closes.
fn answer_all<S: Read + Write>(tls: &mut S) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let ok = head
            .lines()
            .any(|l| l.starts_with("authorization:") && l.contains(&VALUE.to_ascii_lowercase()));
        buf.drain(..end);
        let (status, body) = if ok {
            ("200 OK", "ok\n")
        } else {
            ("401 Unauthorized", "no\n")
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if tls
            .write_all(reply.as_bytes())
            .and_then(|()| tls.flush())
            .is_err()
        {
            return;
        }
    }
}

/// The env config of the bench: with `bound`, the secret bound to the
/// bench's host; the host's CA trusted, loopback allowed.
fn env_config(dir: &Path, ca: &Path, bound: bool) -> String {
    let path = dir.join(if bound { "bound.json" } else { "unbound.json" });
    let mut config = serde_json::json!({
        "upstream_ca": ca,
        "egress_allow_ranges": ["loopback"],
        "network": "host",
    });
    if bound {
        config["bind"] = serde_json::json!({"github_token": {"hosts": [HOST]}});
    }
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    path.to_string_lossy().into_owned()
}

/// The tool's curl of `n` requests on one connection: through the broker
/// (the call's own variables) or directly with the host's CA.
fn curl(port: u16, n: usize, ca: &Path, bound: bool) -> String {
    let url = format!("https://{HOST}:{port}/user");
    let urls = vec![url; n].join(" ");
    let direct = if bound {
        String::new()
    } else {
        format!("--noproxy '*' --cacert {}", ca.display())
    };
    // Every answer's body to /dev/null (`-o` would name the first URL's only).
    format!("curl -sS -f {direct} -H \"Authorization: Bearer $github_token\" {urls} > /dev/null")
}

/// One `tono-seal run` of `script` as the bench user; its seconds.
fn run(config: &str, script: &str) -> f64 {
    let name = format!("tonotest{UID}");
    let start = Instant::now();
    let out = Command::new(bin("tono-seal"))
        .args([
            "run",
            "--user",
            &name,
            "--env-config",
            config,
            "--secret",
            "github_token",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// VmRSS (kB) and open descriptors of `pid`.
fn rss_and_fds(pid: u32) -> (u64, usize) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, fds)
}

/// The call's launcher (the broker): the `tono-launch` of the bench user.
fn launcher_pid() -> u32 {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u32>().ok());
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if uid == Some(UID) && comm.trim() == "tono-launch" {
            return pid;
        }
    }
    panic!("no launcher of uid {UID}");
}

/// 1,000 requests through one broker: RSS and descriptors after the
/// first request and after the rest, as `[(rss, fds), (rss, fds)]`.
fn flat(config: &str, port: u16) -> [(u64, usize); 2] {
    let name = format!("tonotest{UID}");
    let one = curl(port, 1, Path::new("/"), true);
    let many = (0..10)
        .map(|_| curl(port, 100, Path::new("/"), true))
        .collect::<Vec<_>>()
        .join(" && ");
    // The relay holds back the tail of what a tool writes while it could
    // be part of a masked form (a newline may be whitespace inside one):
    // dots, which no form holds, after the word and its newline push it out.
    let say = |word: &str| format!("echo {word}; head -c 4096 /dev/zero | tr '\\0' .");
    let script = format!(
        "{one} && {} && read go && {many} && {} && read go",
        say("first"),
        say("rest")
    );
    let mut child = Command::new(bin("tono-seal"))
        .args([
            "run",
            "--user",
            &name,
            "--env-config",
            config,
            "--secret",
            "github_token",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut samples = [(0, 0); 2];
    for (i, want) in ["first", "rest"].iter().enumerate() {
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains(want), "{line}");
        samples[i] = rss_and_fds(launcher_pid());
        stdin.write_all(b"go\n").unwrap();
    }
    assert!(child.wait().unwrap().success());
    samples
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the broker bench runs as root (it makes a user)");
        return;
    }
    let rounds = env_usize("ROUNDS", 30);
    let keep = env_usize("KEEP", 200);
    let name = format!("tonotest{UID}");
    let launcher = Launcher::at(bin("tono-launch"));
    let _ = account::remove_user(&name, &launcher);
    account::ensure_user(&name, UID, UID, Path::new("/home")).expect("bench user");
    tono(&bin("tono-seal"), &["keygen", "--user", &name], b"");
    tono(
        &bin("tono-seal"),
        &["seal", "--user", &name, "github_token"],
        VALUE.as_bytes(),
    );
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !hosts
        .lines()
        .any(|l| l.split_whitespace().skip(1).any(|h| h == HOST))
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open("/etc/hosts")
            .unwrap();
        writeln!(f, "127.0.0.1 {HOST}").unwrap();
    }
    let (ca_pem, port) = serve();
    // Outside /tmp (a call has its own) and readable by the user: the
    // direct curl trusts the host's CA from there.
    let dir = tempfile::Builder::new()
        .prefix("tono-bench-")
        .tempdir_in("/var/lib")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &ca_pem).unwrap();
    // The direct curl trusts what a client trusts for a real host, the
    // system's roots, plus the bench host's CA: as the broker's bundle
    // holds the system's roots plus the call's CA, both load as much.
    let mut roots = std::fs::read(tono_seal::broker::trust::SYSTEM_ROOTS).unwrap_or_default();
    roots.extend_from_slice(ca_pem.as_bytes());
    let direct_ca = dir.path().join("direct-bundle.pem");
    std::fs::write(&direct_ca, roots).unwrap();
    std::fs::set_permissions(
        &direct_ca,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&ca, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let bound = env_config(dir.path(), &ca, true);
    let unbound = env_config(dir.path(), &ca, false);

    // Warm up both paths (and check each works).
    run(&bound, &curl(port, 1, &ca, true));
    run(&unbound, &curl(port, 1, &direct_ca, false));
    let (mut b1, mut d1, mut bk, mut dk) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        // Alternated, so that a slow moment falls on both.
        b1.push(run(&bound, &curl(port, 1, &ca, true)));
        d1.push(run(&unbound, &curl(port, 1, &direct_ca, false)));
        bk.push(run(&bound, &curl(port, keep, &ca, true)));
        dk.push(run(&unbound, &curl(port, keep, &direct_ca, false)));
    }
    let (b1, d1, bk, dk) = (median(b1), median(d1), median(bk), median(dk));
    let per_b = (bk - b1) / (keep - 1) as f64;
    let per_d = (dk - d1) / (keep - 1) as f64;
    let [first, rest] = flat(&bound, port);
    let ms = |s: f64| s * 1e3;
    println!("broker bench: {rounds} rounds, medians; the host accepts only the real value");
    println!(
        "{:<52} {:>10} {:>10} {:>8}",
        "case", "broker", "direct", "ratio"
    );
    println!(
        "{:<52} {:>8.2}ms {:>8.2}ms {:>7.2}x",
        "a call of one request (tono-seal run, whole)",
        ms(b1),
        ms(d1),
        b1 / d1
    );
    println!(
        "{:<52} {:>8.2}ms {:>8.2}ms {:>7.2}x",
        format!("a call of {keep} requests on one connection"),
        ms(bk),
        ms(dk),
        bk / dk
    );
    println!(
        "{:<52} {:>8.0}us {:>8.0}us {:>7.2}x",
        "per request, kept alive",
        per_b * 1e6,
        per_d * 1e6,
        per_b / per_d
    );
    println!(
        "{:<52} {:>8.2}ms",
        "added to the first request of a call",
        ms(b1 - d1)
    );
    println!(
        "1,000 requests through one broker: RSS {} kB -> {} kB, descriptors {} -> {}",
        first.0, rest.0, first.1, rest.1
    );
    write_result(
        "broker.json",
        &serde_json::json!({
            "rounds": rounds, "keep": keep,
            "call_one_request_ms": {"broker": ms(b1), "direct": ms(d1)},
            "call_keep_ms": {"broker": ms(bk), "direct": ms(dk)},
            "per_request_us": {"broker": per_b * 1e6, "direct": per_d * 1e6},
            "thousand_requests": {"rss_kb": [first.0, rest.0], "fds": [first.1, rest.1]},
        }),
    );
    let _ = account::remove_user(&name, &launcher);
}
