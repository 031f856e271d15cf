//! The call's credential broker end to end (issue 34), with real clients
//! as real users through `tono-seal run`, against a loopback HTTPS
//! upstream of the test's own (`tests/common/echo_upstream.rs`) that
//! records the credentials each request carried and echoes them back.

mod common;
#[path = "common/echo_upstream.rs"]
mod echo_upstream;

use std::process::{Command, Output};

use base64::Engine;
use echo_upstream::{EchoUpstream, API_HOST, OTHER_HOST, PLAIN_HOST};

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("curl")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The upstream itself, driven by `curl` and `git` as root with the test
/// CA: it records each credential, echoes it in every form (gzip and
/// chunked included), keeps connections alive, answers for each test name
/// and serves git only with credentials. The control that the CA matters:
/// without it, curl refuses the server (exit 60).
#[test]
fn the_echo_upstream_records_and_echoes_what_curl_and_git_send_it() {
    need_root!();
    echo_upstream::resolve_test_hosts();
    let value = "ghp_EchoUpstreamCheck0123456789abcdefXYZ";
    let up = EchoUpstream::with_git_password(value);
    let ca = up.ca_pem();
    let ca = ca.to_str().unwrap();
    let forms = "/echo?forms=raw,base64,hex,percent";
    let b64 = base64::engine::general_purpose::STANDARD.encode(value);
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    let pct: String = value.bytes().map(|b| format!("%{b:02X}")).collect();
    let expected_body =
        format!("credentials: 1\nraw: {value}\nbase64: {b64}\nhex: {hex}\npercent: {pct}\n");

    // Control: without the test CA the server is not trusted.
    let untrusted = curl(&[&up.url(API_HOST, "/plain")]);
    assert_eq!(untrusted.status.code(), Some(60), "{untrusted:?}");

    // One curl, two requests: the second rides the first's connection.
    let bearer = format!("Authorization: Bearer {value}");
    let out = curl(&[
        "--cacert",
        ca,
        "-v",
        "-H",
        &bearer,
        "-D",
        "-",
        &up.url(API_HOST, forms),
        &up.url(API_HOST, "/plain"),
    ]);
    let text = ok(&out, "bearer echo");
    let verbose = String::from_utf8_lossy(&out.stderr);
    assert!(
        verbose.contains("Re-using existing connection"),
        "{verbose}"
    );
    for header in [
        format!("X-Echo-Raw: {value}"),
        format!("X-Echo-Base64: {b64}"),
        format!("X-Echo-Hex: {hex}"),
        format!("X-Echo-Percent: {pct}"),
    ] {
        assert!(text.contains(&format!("{header}\r\n")), "{header}: {text}");
    }
    assert!(
        text.contains(&format!("\r\n\r\n{expected_body}HTTP/1.1 200 OK\r\n"))
            && text.ends_with("\r\n\r\nhello-upstream"),
        "{text}"
    );

    // gzip: the bytes on the wire are gzip (magic 1f 8b); curl
    // --compressed reads the same body back. Chunked: 5-byte chunks.
    let gz = format!("{forms}&gzip=1");
    let raw = curl(&["--cacert", ca, "-H", &bearer, &up.url(API_HOST, &gz)]);
    ok(&raw, "gzip raw");
    assert_eq!(raw.stdout[..2], [0x1f, 0x8b], "{raw:?}");
    assert!(!raw
        .stdout
        .windows(value.len())
        .any(|w| w == value.as_bytes()));
    let both = format!("{forms}&gzip=1&chunked=1");
    for path in [gz.as_str(), &format!("{forms}&chunked=1"), both.as_str()] {
        let out = curl(&[
            "--cacert",
            ca,
            "--compressed",
            "-D",
            "/dev/stderr",
            "-H",
            &bearer,
            &up.url(API_HOST, path),
        ]);
        assert_eq!(ok(&out, path), expected_body, "{path}");
        let head = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert_eq!(
            head.contains("content-encoding: gzip"),
            path.contains("gzip=1"),
            "{path}: {head}"
        );
        assert_eq!(
            head.contains("transfer-encoding: chunked"),
            path.contains("chunked=1"),
            "{path}: {head}"
        );
    }

    // Basic's password, x-api-key and a `token` query parameter, each
    // echoed, to each name the leaf carries.
    for host in [OTHER_HOST, PLAIN_HOST] {
        let out = curl(&[
            "--cacert",
            ca,
            "-u",
            &format!("someone:{value}"),
            "-H",
            "x-api-key: key-two",
            &up.url(host, "/echo?forms=raw&token=three"),
        ]);
        assert_eq!(
            ok(&out, host),
            format!("credentials: 3\nraw: {value}\nraw: key-two\nraw: three\n")
        );
    }

    // git: refused without the password (401 asked, the wrong one
    // refused), cloned with it.
    let clone = |url: &str, into: &str| {
        Command::new("git")
            .args([
                "-c",
                &format!("http.sslCAInfo={ca}"),
                "clone",
                "-q",
                url,
                into,
            ])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", "/nonexistent")
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .unwrap()
    };
    let dest = tempfile::tempdir().unwrap();
    let into = dest.path().join("clone");
    let wrong = clone(
        &format!(
            "https://x-access-token:wrong@{API_HOST}:{}/git/repo.git",
            up.port
        ),
        into.to_str().unwrap(),
    );
    assert!(!wrong.status.success(), "{wrong:?}");
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("Authentication failed"),
        "{wrong:?}"
    );
    let right = clone(
        &format!(
            "https://x-access-token:{value}@{API_HOST}:{}/git/repo.git",
            up.port
        ),
        into.to_str().unwrap(),
    );
    assert!(right.status.success(), "{right:?}");
    assert_eq!(
        std::fs::read_to_string(into.join("README")).unwrap(),
        up.git_readme
    );

    // What the server recorded: each request with its name and the
    // credentials it carried.
    let requests = up.requests();
    let echo = &requests[0];
    assert_eq!(echo["sni"], API_HOST);
    assert_eq!(echo["host"], format!("{API_HOST}:{}", up.port));
    assert_eq!(echo["path"], "/echo");
    assert_eq!(echo["authorization"], format!("Bearer {value}"));
    assert_eq!(requests[1]["path"], "/plain");
    assert_eq!(up.requests_to(OTHER_HOST).len(), 1);
    let basic = &up.requests_to(PLAIN_HOST)[0];
    assert_eq!(basic["basic_user"], "someone");
    assert_eq!(basic["basic_password"], value);
    assert_eq!(basic["x_api_key"], "key-two");
    assert_eq!(basic["query"], "forms=raw&token=three");
    let git: Vec<_> = requests
        .iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/git/"))
        .collect();
    let statuses: Vec<(String, i64)> = git
        .iter()
        .map(|r| {
            (
                r["basic_password"].as_str().unwrap_or("-").to_owned(),
                r["status"].as_i64().unwrap(),
            )
        })
        .collect();
    // Each clone first asks without credentials (401), then with them.
    assert_eq!(statuses[0], ("-".to_owned(), 401), "{statuses:?}");
    assert_eq!(statuses[1], ("wrong".to_owned(), 401), "{statuses:?}");
    assert!(
        statuses
            .iter()
            .any(|(p, s)| p == value && *s == 200 && git.len() >= 4),
        "{statuses:?}"
    );
    let posts = git
        .iter()
        .filter(|r| r["method"] == "POST" && r["basic_password"] == value)
        .count();
    assert!(posts >= 1, "the pack was fetched with a POST: {git:#?}");
}
