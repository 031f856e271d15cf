//! The call's credential broker end to end (issue 34), with real clients
//! as real users through `tono-seal run`, against a loopback HTTPS
//! upstream of the test's own (`tests/common/echo_upstream.rs`) that
//! records the credentials each request carried and echoes them back.

mod common;
#[path = "common/connect_proxy.rs"]
mod connect_proxy;
#[path = "common/echo_upstream.rs"]
mod echo_upstream;
#[path = "common/python_requests.rs"]
mod python_requests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;
use common::{AuditDir, TestUser};
use connect_proxy::{Proxy, PROXY_PASSWORD, PROXY_USER};
use echo_upstream::{ConfigDir, EchoUpstream, API_HOST, OTHER_HOST, PLAIN_HOST};
use serde_json::json;

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
    // One connection for the control above, one for both requests (a
    // server that closed after each would count three: curl retries).
    assert_eq!(
        up.connections(),
        2,
        "{}",
        String::from_utf8_lossy(&out.stderr)
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

// ---------------------------------------------------------------------------
// Through `tono-seal run`, as real users (issue 34's wiring: the env config
// of `tests/common/echo_upstream.rs`, the broker at 127.0.0.1:3129 in the
// call's namespace, the bundle at /run/tono-broker/ca-bundle.pem).
// ---------------------------------------------------------------------------

/// Where the call's CA bundle is, and every variable that must name it.
const BUNDLE: &str = "/run/tono-broker/ca-bundle.pem";
const CA_VARIABLES: [&str; 9] = [
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
const BROKER_URL: &str = "http://127.0.0.1:3129";
const FORMS: &str = "/echo?forms=raw,base64,hex,percent";

/// A token shaped like GitHub's: `ghp_` and 36 letters and digits.
fn token() -> String {
    use rand::Rng;
    let tail: String = rand::thread_rng()
        .sample_iter(&rand::distributions::Alphanumeric)
        .take(36)
        .map(char::from)
        .collect();
    format!("ghp_{tail}")
}

fn b64(v: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(v)
}

fn hex(v: &str) -> String {
    v.bytes().map(|b| format!("{b:02x}")).collect()
}

fn pct(v: &str) -> String {
    v.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// What in an echo (`credentials: N`, then `FORM: ENCODED` lines, as
/// `/echo?forms=raw,base64,hex,percent` answers) is not `p`'s own form: each
/// of `count` credentials must come back as the placeholder. In base64 the
/// characters that depend on the value alone must be the placeholder's;
/// the last one before the padding also carries the padding's zero bits,
/// and the broker documents (src/broker/scrub.rs) that it leaves such a
/// character as it was (here: the low 2 bits of the value's last byte).
fn echo_mismatches(echo: &str, count: usize, p: &str, value: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let lines: Vec<&str> = echo.lines().collect();
    if lines.first() != Some(&format!("credentials: {count}").as_str()) {
        wrong.push(format!("not an echo of {count}: {echo:?}"));
        return wrong;
    }
    let pure = 8 * p.len() / 6;
    for (i, l) in lines[1..].iter().enumerate() {
        let (form, got) = l.split_once(": ").unwrap_or((l, ""));
        let want = match form {
            "raw" => p.to_owned(),
            "base64" => b64(p),
            "hex" => hex(p),
            "percent" => pct(p),
            _ => {
                wrong.push(format!("line {i}: {l:?}"));
                continue;
            }
        };
        let same = if form == "base64" {
            got.len() == want.len()
                && got[..pure] == want[..pure]
                && got[want.trim_end_matches('=').len()..]
                    == want[want.trim_end_matches('=').len()..]
        } else {
            got == want
        };
        if !same {
            let decoded = decode_form(form, got);
            let stands_for = if decoded == value {
                "THE VALUE".to_owned()
            } else {
                format!("{decoded:?}")
            };
            wrong.push(format!(
                "{form}: got {got}, the placeholder's is {want} (it decodes to {stands_for})"
            ));
        }
    }
    if lines.len() != 1 + 4 * count {
        wrong.push(format!("{} lines: {echo:?}", lines.len()));
    }
    wrong
}

/// `got` decoded from `form`, to show what a wrong echo stood for.
fn decode_form(form: &str, got: &str) -> String {
    let bytes = match form {
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(got)
            .unwrap_or_default(),
        "hex" => (0..got.len() / 2)
            .filter_map(|i| u8::from_str_radix(&got[2 * i..2 * i + 2], 16).ok())
            .collect(),
        "percent" => got
            .split('%')
            .filter(|c| !c.is_empty())
            .filter_map(|c| u8::from_str_radix(c, 16).ok())
            .collect(),
        _ => got.as_bytes().to_vec(),
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `hay` holds `value` in any form the upstream or a scrubber
/// might write: raw, base64, hex (either case), percent (either case).
fn holds_any_form(hay: &[u8], value: &str) -> Vec<&'static str> {
    let forms: [(&str, String); 6] = [
        ("raw", value.to_owned()),
        ("base64", b64(value)),
        ("hex", hex(value)),
        ("HEX", hex(value).to_uppercase()),
        ("percent", pct(value)),
        ("percent-lower", pct(value).to_lowercase()),
    ];
    forms
        .into_iter()
        .filter(|(_, f)| holds(hay, f))
        .map(|(name, _)| name)
        .collect()
}

fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A body as the tool got it, gunzipped when it is gzip.
fn plain_body(bytes: Vec<u8>) -> Vec<u8> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
            .unwrap();
        out
    } else {
        bytes
    }
}

/// The files under `roots` whose bytes hold `needle` (as root).
fn files_holding(roots: &[&Path], needle: &str) -> Vec<String> {
    let out = Command::new("grep")
        .args(["-r", "-l", "-F", "-a", "--devices=skip", "--", needle])
        .args(roots)
        .output()
        .expect("grep");
    let mut found: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    found.sort();
    found
}

/// One user with three secrets, an upstream, and a folder the user's
/// calls write what they saw into (for root to read back unmasked):
/// `github_token` bound to `api.tono.test`, `other_token` to
/// `other.tono.test`, `plain_token` bound to nothing (the control that a
/// search finds a value where the tool holds one).
struct Scene {
    up: EchoUpstream,
    configs: ConfigDir,
    user: TestUser,
    value: String,
    other_value: String,
    unbound: String,
    files: tempfile::TempDir,
    config: PathBuf,
    audit: AuditDir,
}

impl Scene {
    fn new(tag: &str) -> Self {
        echo_upstream::resolve_test_hosts();
        let value = token();
        let up = EchoUpstream::with_git_password(&value);
        let user = TestUser::with_key();
        let (other_value, unbound) = (token(), token());
        user.seal("github_token", value.as_bytes());
        user.seal("other_token", other_value.as_bytes());
        user.seal("plain_token", unbound.as_bytes());
        let files = common::tempdir();
        std::os::unix::fs::chown(files.path(), Some(user.user.uid), Some(user.user.gid)).unwrap();
        // The upstream's CA, for the one request that goes to it
        // untouched (a host no secret is bound to).
        std::fs::copy(up.ca_pem(), files.path().join("upstream-ca.pem")).unwrap();
        std::fs::set_permissions(
            files.path().join("upstream-ca.pem"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let configs = ConfigDir::new();
        let config = configs.broker_config("host.json", &up, bindings(), json!({}));
        Self {
            up,
            configs,
            user,
            value,
            other_value,
            unbound,
            files,
            config,
            audit: AuditDir::new(&format!("broker-{tag}")),
        }
    }

    fn f(&self, name: &str) -> String {
        self.files.path().join(name).display().to_string()
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.files.path().join(name))
            .unwrap_or_else(|e| panic!("{name} (the call did not write it?): {e}"))
    }

    fn text(&self, name: &str) -> String {
        String::from_utf8_lossy(&self.read(name)).into_owned()
    }

    /// `tono-seal run --user U --env-config CONFIG --audit LOG ARGS -s S.. --
    /// /bin/sh -c SCRIPT`, with `F`, `U` (api), `O` (other), `P` (plain)
    /// set at the top of the script.
    fn run(&self, config: &Path, args: &[&str], secrets: &[&str], script: &str) -> Output {
        let audit = self.audit.log();
        let mut all = vec![
            "run",
            "--user",
            self.user.name(),
            "--env-config",
            config.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
            "--timeout",
            "120",
        ];
        all.extend(args);
        for s in secrets {
            all.extend(["-s", s]);
        }
        let script = format!(
            "F={}; U=https://{API_HOST}:{port}; O=https://{OTHER_HOST}:{port}; \
             P=https://{PLAIN_HOST}:{port}\n{script}",
            self.files.path().display(),
            port = self.up.port
        );
        all.extend(["--", "/bin/sh", "-c", &script]);
        common::tono(&all, b"")
    }

    /// The end records of the calls so far.
    fn ends(&self) -> Vec<serde_json::Value> {
        self.audit
            .records()
            .into_iter()
            .filter(|r| r["phase"] == "end")
            .collect()
    }
}

/// `github_token` to api.tono.test, `other_token` to other.tono.test.
fn bindings() -> serde_json::Value {
    json!({
        "github_token": {"hosts": [API_HOST]},
        "other_token": {"hosts": [OTHER_HOST]},
    })
}

fn ran_ok(out: &Output, what: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: stdout {}\nstderr {}",
        common::stdout(out),
        common::stderr(out)
    );
    common::stdout(out)
}

/// What a probe line of the tool said (`NAME ...`).
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("no line {name:?} in {stdout}"))
}

/// A shell fragment: the broker's (PID 1's) memory, environment and
/// descriptors, each beside the same probe of the tool's own process,
/// printed as `NAME ok` or `NAME errno ENAME`; then PID 1's name and uid.
const BROKER_PROBES: &str = r#"python3 - <<'PYEOF'
import errno, os
def probe(name, fn):
    try:
        fn(); print(name, "ok")
    except OSError as e:
        print(name, "errno", errno.errorcode.get(e.errno, e.errno))
def mem(pid):
    with open("/proc/%s/mem" % pid, "rb", 0) as f:
        start = int(open("/proc/self/maps").readline().split("-")[0], 16)
        f.seek(start); f.read(16)
probe("broker_mem", lambda: mem("1"))
probe("self_mem", lambda: mem("self"))
probe("broker_environ", lambda: open("/proc/1/environ", "rb").read())
probe("self_environ", lambda: open("/proc/self/environ", "rb").read())
probe("broker_fd", lambda: os.listdir("/proc/1/fd"))
probe("self_fd", lambda: os.listdir("/proc/self/fd"))
status = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines() if ":" in l)
print("pid1", status["Name"].strip(), status["Uid"].split()[0])
PYEOF"#;

/// curl as the user: the server gets the real value, the tool holds and
/// gets back only the placeholder, in every form and through gzip and
/// chunks; the placeholder toward a host it is not bound to is refused
/// (403 `placeholder_not_bound`, nothing reaches the server), toward a host
/// nothing is bound to it passes untouched; the broker's memory,
/// environment and descriptors are refused to the tool; the receipt lists
/// each use and `audit verify` passes.
#[test]
fn curl_as_the_user_sends_the_value_only_to_its_host_and_gets_back_only_the_placeholder() {
    need_root!();
    let s = Scene::new("curl");
    // A private key the tool can read, for the search below to find.
    let control_key = s.user.home().join("control-key.pem");
    std::fs::write(
        &control_key,
        "-----BEGIN PRIVATE KEY-----\nMIIcontrol\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    std::os::unix::fs::chown(&control_key, Some(s.user.user.uid), None).unwrap();

    let script = format!(
        r#"printf '%s' "$github_token" > $F/placeholder
env | sort > $F/env
for e in /proc/[0-9]*/environ; do cat "$e" 2>/dev/null; echo; done > $F/environ
printf '%s' "$plain_token" > /tmp/control-unbound
cp {BUNDLE} $F/bundle.pem; echo "bundle $?"
H="Authorization: Bearer $github_token"
curl -sS -H "$H" -D $F/h1 -o $F/b1 "$U{FORMS}"; echo "echo $?"
curl -sS -H "$H" -D $F/h2 -o $F/b2 "$U{FORMS}&gzip=1"; echo "gzip $?"
curl -sS --compressed -H "$H" -D $F/h3 -o $F/b3 "$U{FORMS}&gzip=1&chunked=1&chunk=3"; echo "gzip-chunked $?"
curl -sS -H "$H" -D $F/h4 -o $F/b4 "$U{FORMS}&chunked=1&chunk=3"; echo "chunked $?"
curl -sS -H "$H" -D $F/h5 -o $F/b5 -w 'other %{{http_code}}\n' "$O/echo"
curl -sS --cacert $F/upstream-ca.pem -H "$H" -o $F/b6 -w 'plain %{{http_code}}\n' "$P/echo"
grep -rlE -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' /run /tmp /var/tmp /dev/shm "$HOME" 2>/dev/null | sort | sed 's/^/key /'
tar cf $F/view.tar /run /tmp /var/tmp /dev/shm "$HOME" 2>/dev/null; echo "tar listed $(tar tf $F/view.tar | wc -l)"
{BROKER_PROBES}
cat $F/b1 $F/h1
"#
    );
    let out = s.run(
        &s.config,
        &["--network", "host"],
        &["github_token", "other_token", "plain_token"],
        &script,
    );
    let stdout = ran_ok(&out, "the curl call");
    for step in ["bundle", "echo", "gzip", "gzip-chunked", "chunked"] {
        assert_eq!(line(&stdout, step), format!("{step} 0"), "{stdout}");
    }
    let placeholder = s.text("placeholder");
    let p = placeholder.as_str();
    assert_eq!(p.len(), s.value.len(), "{p}");
    assert!(p.starts_with("ghp_") && p != s.value, "{p}");

    // What the tool holds: the placeholder, never the value; the unbound
    // secret's value, found by the same search (the control).
    let env = s.text("env");
    assert!(
        env.lines().any(|l| l == format!("github_token={p}")),
        "{env}"
    );
    assert!(
        env.lines()
            .any(|l| l == format!("plain_token={}", s.unbound)),
        "control: {env}"
    );
    for var in CA_VARIABLES {
        assert!(
            env.lines().any(|l| l == format!("{var}={BUNDLE}")),
            "{var}: {env}"
        );
    }
    for var in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        for name in [var.to_owned(), var.to_lowercase()] {
            assert!(
                env.lines().any(|l| l == format!("{name}={BROKER_URL}")),
                "{name}: {env}"
            );
        }
    }
    for name in ["NO_PROXY", "no_proxy"] {
        assert!(
            env.lines()
                .any(|l| l == format!("{name}=localhost,127.0.0.1,::1")),
            "{name}: {env}"
        );
    }
    for file in ["env", "environ", "view.tar"] {
        let bytes = s.read(file);
        assert_eq!(
            holds_any_form(&bytes, &s.value),
            Vec::<&str>::new(),
            "{file}"
        );
        assert!(
            holds(&bytes, &s.unbound),
            "control: the unbound value in {file}"
        );
    }
    assert!(
        holds(&s.read("environ"), p),
        "the placeholder in /proc/*/environ"
    );
    // On the host, after the call: the home and the call's folder hold the
    // value in no file; the same search finds the unbound value where the
    // call wrote it (the control).
    let roots = [s.user.home(), s.files.path()];
    assert_eq!(files_holding(&roots, &s.value), Vec::<String>::new());
    let found = files_holding(&roots, &s.unbound);
    assert!(found.contains(&s.f("env")), "control: {found:?}");

    // The bundle: the system's roots and one more (the call's CA), not
    // the upstream's CA (the broker trusts that, the tool does not).
    let bundle = s.text("bundle.pem");
    // (The broker takes no system roots where Debian's file is absent.)
    let system = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    let certs = |t: &str| t.matches("-----BEGIN CERTIFICATE-----").count();
    assert_eq!(certs(&bundle), certs(&system) + 1, "{bundle}");
    assert!(!bundle.contains("PRIVATE KEY"));
    let upstream_ca = std::fs::read_to_string(s.up.ca_pem()).unwrap();
    let upstream_body: String = upstream_ca.lines().nth(1).unwrap().to_owned();
    assert!(
        !bundle.contains(&upstream_body),
        "the upstream CA is the broker's alone"
    );
    // The only private key the tool can read is the planted control.
    let keys: Vec<&str> = stdout.lines().filter(|l| l.starts_with("key ")).collect();
    assert_eq!(keys, [format!("key {}", control_key.display())], "{stdout}");

    // The echoes, as the tool got them: never the value, in any form;
    // the placeholder in every form, in headers and body, through gzip and
    // chunks. Collected, then asserted after the rest (one run shows all).
    let mut wrong = Vec::new();
    for n in 1..=4 {
        let (h, b) = (
            s.text(&format!("h{n}")),
            plain_body(s.read(&format!("b{n}"))),
        );
        for (what, bytes) in [
            (format!("headers {n}"), h.as_bytes().to_vec()),
            (format!("body {n}"), b.clone()),
            (format!("body {n} as sent"), s.read(&format!("b{n}"))),
        ] {
            let leaked = holds_any_form(&bytes, &s.value);
            if !leaked.is_empty() {
                wrong.push(format!("{what} holds the value as {leaked:?}"));
            }
        }
        wrong.extend(
            echo_mismatches(&String::from_utf8_lossy(&b), 1, p, &s.value)
                .into_iter()
                .map(|m| format!("body {n}: {m}")),
        );
        let headers: String = h
            .lines()
            .filter_map(|l| {
                let (name, v) = l.split_once(": ")?;
                let form = name
                    .to_ascii_lowercase()
                    .strip_prefix("x-echo-")?
                    .to_owned();
                Some(format!("{form}: {v}\n"))
            })
            .collect();
        wrong.extend(
            echo_mismatches(&format!("credentials: 1\n{headers}"), 1, p, &s.value)
                .into_iter()
                .map(|m| format!("headers {n}: {m}")),
        );
    }
    // The server saw the real value, four times, and only toward api.
    let api = s.up.requests_to(API_HOST);
    assert_eq!(api.len(), 4, "{api:#?}");
    for r in &api {
        assert_eq!(r["authorization"], format!("Bearer {}", s.value), "{r}");
    }
    // Toward other.tono.test (intercepted: other_token is bound there):
    // refused with the reason, nothing reached the server.
    assert_eq!(line(&stdout, "other"), "other 403", "{stdout}");
    let refusal = format!("{}{}", s.text("h5"), s.text("b5"));
    assert!(refusal.contains("placeholder_not_bound"), "{refusal}");
    assert_eq!(s.up.requests_to(OTHER_HOST).len(), 0);
    // Toward plain.tono.test (nothing bound: tunnelled untouched): the
    // server saw the placeholder only.
    assert_eq!(line(&stdout, "plain"), "plain 200", "{stdout}");
    let plain = s.up.requests_to(PLAIN_HOST);
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0]["authorization"], format!("Bearer {p}"));

    // The broker (the launcher, PID 1 of the call, as the user) keeps its
    // memory, environment and descriptors from the tool; the tool reads
    // its own (the control, same user).
    assert_eq!(
        line(&stdout, "pid1"),
        format!("pid1 tono-launch {}", s.user.user.uid)
    );
    for what in ["mem", "environ", "fd"] {
        assert_eq!(
            line(&stdout, &format!("broker_{what}")),
            format!("broker_{what} errno EACCES"),
            "{stdout}"
        );
        assert_eq!(
            line(&stdout, &format!("self_{what}")),
            format!("self_{what} ok"),
            "{stdout}"
        );
    }

    // The receipt: each substitution and the refusal, with no value and
    // no placeholder; the chain verifies.
    let ends = s.ends();
    assert_eq!(ends.len(), 1);
    let end = &ends[0];
    assert_eq!(end["v"], 3, "{end}");
    let uses = end["broker"].as_array().expect("a broker list").clone();
    let to_api: Vec<_> = uses.iter().filter(|u| u["host"] == API_HOST).collect();
    assert_eq!(to_api.len(), 4, "{uses:#?}");
    for u in &to_api {
        assert_eq!(u["secrets"], json!(["github_token"]), "{u}");
        assert_eq!(
            (&u["method"], &u["path"], &u["status"]),
            (&json!("GET"), &json!("/echo"), &json!(200)),
            "{u}"
        );
        assert_eq!(u["refused"], serde_json::Value::Null, "{u}");
        assert!(u["bytes_down"].as_u64().unwrap() > 0, "{u}");
    }
    let refused: Vec<_> = uses.iter().filter(|u| !u["refused"].is_null()).collect();
    assert_eq!(refused.len(), 1, "{uses:#?}");
    assert_eq!(refused[0]["host"], OTHER_HOST);
    assert_eq!(refused[0]["refused"], "placeholder_not_bound");
    assert_eq!(refused[0]["status"], 403);
    let log = std::fs::read(s.audit.log()).unwrap();
    for secret in [s.value.as_str(), p, &s.unbound, &s.other_value] {
        assert_eq!(holds_any_form(&log, secret), Vec::<&str>::new());
    }
    let verify = common::tono(&["audit", "verify", s.audit.log().to_str().unwrap()], b"");
    assert_eq!(verify.status.code(), Some(0), "{}", common::stdout(&verify));
    // What the tool printed of the echo, as the caller (the model) reads
    // it, past the launcher's masking relay.
    let leaked = holds_any_form(stdout.as_bytes(), &s.value);
    if !leaked.is_empty() {
        wrong.push(format!(
            "the call's own output holds the value as {leaked:?}"
        ));
    }
    assert!(
        wrong.is_empty(),
        "what the tool got back:\n{}",
        wrong.join("\n")
    );
}

/// Python's `urllib` (x-api-key) and `requests` (Basic and a query
/// parameter) in the tests' venv, as the user: the server gets the value
/// in each place, the tool's answers and a dump of its own writable
/// memory hold only the placeholder (the unbound value, in its
/// environment, is found by the same search: the control).
#[test]
fn python_urllib_and_requests_send_the_value_and_hold_only_the_placeholder() {
    need_root!();
    let Some(python) = python_requests::python_with_requests() else {
        return;
    };
    let s = Scene::new("python");
    let script = format!(
        r#"{python} - "$F" "$U" <<'PYEOF'
import os, sys, json, urllib.request, requests
F, U = sys.argv[1], sys.argv[2]
tok = os.environ["github_token"]
open(F + "/placeholder", "w").write(tok)
r = urllib.request.urlopen(urllib.request.Request(U + "{FORMS}", headers={{"x-api-key": tok}}))
open(F + "/urllib", "wb").write(r.read()); print("urllib", r.status)
r = requests.get(U + "/echo", params={{"forms": "raw,base64,hex,percent", "token": tok}}, auth=("someone", tok))
open(F + "/requests", "wb").write(r.content); print("requests", r.status_code)
open(F + "/requests-headers", "w").write(json.dumps(dict(r.headers)))
dumped = 0
with open(F + "/memory", "wb") as out, open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for l in maps.read().splitlines():
        addr, perms = l.split()[:2]
        if not perms.startswith("rw"):
            continue
        a, b = (int(x, 16) for x in addr.split("-"))
        try:
            mem.seek(a); chunk = mem.read(b - a); out.write(chunk); dumped += len(chunk)
        except (OSError, ValueError, OverflowError):
            pass
print("memory", dumped)
PYEOF"#,
        python = python.display()
    );
    let out = s.run(
        &s.config,
        &["--network", "host"],
        &["github_token", "plain_token"],
        &script,
    );
    let stdout = ran_ok(&out, "the python call");
    assert_eq!(line(&stdout, "urllib"), "urllib 200", "{stdout}");
    assert_eq!(line(&stdout, "requests"), "requests 200", "{stdout}");
    let p = s.text("placeholder");
    assert!(p.starts_with("ghp_") && p.len() == s.value.len() && p != s.value);
    let mut wrong = Vec::new();
    for (file, count) in [("urllib", 1), ("requests", 2)] {
        let leaked = holds_any_form(&s.read(file), &s.value);
        if !leaked.is_empty() {
            wrong.push(format!("{file} holds the value as {leaked:?}"));
        }
        wrong.extend(
            echo_mismatches(&s.text(file), count, &p, &s.value)
                .into_iter()
                .map(|m| format!("{file}: {m}")),
        );
    }
    let headers = s.text("requests-headers");
    assert!(
        headers.contains(&format!("\"X-Echo-Raw\": \"{p}, {p}\""))
            || headers.contains(&format!("\"x-echo-raw\": \"{p}, {p}\"")),
        "{headers}"
    );
    let leaked = holds_any_form(&s.read("requests-headers"), &s.value);
    if !leaked.is_empty() {
        wrong.push(format!("requests-headers holds the value as {leaked:?}"));
    }
    // The tool's own memory: the placeholder and the unbound value (the
    // control), never the bound value.
    let memory = s.read("memory");
    assert!(memory.len() > 1 << 20, "dumped {} bytes", memory.len());
    assert!(
        holds(&memory, &s.unbound),
        "control: the unbound value in memory"
    );
    assert!(holds(&memory, &p), "the placeholder in memory");
    let leaked = holds_any_form(&memory, &s.value);
    if !leaked.is_empty() {
        wrong.push(format!("the tool's memory holds the value as {leaked:?}"));
    }

    let api = s.up.requests_to(API_HOST);
    assert_eq!(api.len(), 2, "{api:#?}");
    assert_eq!(api[0]["x_api_key"], s.value.as_str());
    assert_eq!(api[1]["basic_user"], "someone");
    assert_eq!(api[1]["basic_password"], s.value.as_str());
    assert!(
        api[1]["query"]
            .as_str()
            .unwrap()
            .ends_with(&format!("token={}", s.value)),
        "{}",
        api[1]
    );
    for r in &api {
        assert!(
            !r.to_string().contains(&p),
            "the placeholder reached the server: {r}"
        );
    }
    assert!(
        wrong.is_empty(),
        "what the tool got back:\n{}",
        wrong.join("\n")
    );
}

/// `git clone https://x-access-token:$github_token@...` as the user: the
/// server (which takes only the real value) serves the clone; what git
/// wrote holds the placeholder.
#[test]
fn git_clones_over_https_with_the_placeholder_in_its_url() {
    need_root!();
    let s = Scene::new("git");
    let script = format!(
        r#"printf '%s' "$github_token" > $F/placeholder
GIT_TERMINAL_PROMPT=0 git clone -q "https://x-access-token:$github_token@{API_HOST}:{port}/git/repo.git" /tmp/clone; echo "clone $?"
cp /tmp/clone/README $F/readme; cp /tmp/clone/.git/config $F/gitconfig
tar cf $F/clone.tar /tmp/clone 2>/dev/null; echo done"#,
        port = s.up.port
    );
    let out = s.run(
        &s.config,
        &["--network", "host"],
        &["github_token"],
        &script,
    );
    let stdout = ran_ok(&out, "the git call");
    assert_eq!(
        line(&stdout, "clone"),
        "clone 0",
        "{stdout}\n{}",
        common::stderr(&out)
    );
    assert_eq!(s.text("readme"), s.up.git_readme);
    let p = s.text("placeholder");
    assert!(s
        .text("gitconfig")
        .contains(&format!("x-access-token:{p}@")));
    assert_eq!(
        holds_any_form(&s.read("clone.tar"), &s.value),
        Vec::<&str>::new()
    );
    let git: Vec<_> = s.up.requests_to(API_HOST);
    assert!(
        git.iter()
            .any(|r| r["status"] == 200 && r["method"] == "POST"),
        "{git:#?}"
    );
    for r in &git {
        // Asked first without credentials (401), then with the value.
        match r["basic_password"].as_str() {
            None => assert_eq!(r["status"], 401, "{r}"),
            Some(pw) => {
                assert_eq!(pw, s.value, "{r}");
                assert_eq!(r["basic_user"], "x-access-token");
            }
        }
    }
    let uses = s.ends()[0]["broker"].as_array().unwrap().clone();
    assert!(
        uses.iter()
            .any(|u| u["host"] == API_HOST && u["method"] == "POST" && u["status"] == 200),
        "{uses:#?}"
    );
}

/// Each network mode: `proxy` reaches the upstream through the test's
/// CONNECT proxy (with its password, added by the worker), which saw the
/// broker's tunnel; `none` reaches nothing (the upstream saw no
/// connection), beside `host`, which does.
#[test]
fn the_broker_reaches_upstream_as_the_calls_network_allows() {
    need_root!();
    let s = Scene::new("network");
    let proxy = Proxy::start();
    let via_proxy = s.configs.broker_config(
        "proxy.json",
        &s.up,
        bindings(),
        json!({"proxy": format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{}", proxy.port)}),
    );
    let script = r#"printf '%s' "$github_token" > $F/placeholder-$MODE
echo "proxy $HTTPS_PROXY"
curl -sS -H "Authorization: Bearer $github_token" -o $F/body-$MODE -w 'code %{http_code} connect %{http_connect}' "$U/echo"; echo " exit $?""#;
    let mut connections = vec![s.up.connections()];
    for (mode, config) in [
        ("host", &s.config),
        ("proxy", &via_proxy),
        ("none", &s.config),
    ] {
        let out = s.run(
            config,
            &["--network", mode],
            &["github_token"],
            &format!("MODE={mode}\n{script}"),
        );
        let stdout = ran_ok(&out, mode);
        assert_eq!(
            line(&stdout, "proxy"),
            format!("proxy {BROKER_URL}"),
            "{mode}"
        );
        let p = s.text(&format!("placeholder-{mode}"));
        let code = line(&stdout, "code");
        eprintln!("{mode}: {code}");
        if mode == "none" {
            assert!(code.contains("502"), "{mode}: {stdout}");
        } else {
            assert!(
                code.starts_with("code 200 ") && code.ends_with(" exit 0"),
                "{mode}: {stdout}"
            );
            assert_eq!(
                s.text(&format!("body-{mode}")),
                format!("credentials: 1\nraw: {p}\n")
            );
        }
        connections.push(s.up.connections());
    }
    // host and proxy each reached the upstream; none did not.
    assert!(connections[1] > connections[0], "{connections:?}");
    assert!(connections[2] > connections[1], "{connections:?}");
    assert_eq!(
        connections[3], connections[2],
        "none reached the upstream: {connections:?}"
    );
    let api = s.up.requests_to(API_HOST);
    assert_eq!(api.len(), 2, "{api:#?}");
    for r in &api {
        assert_eq!(r["authorization"], format!("Bearer {}", s.value));
    }
    assert_eq!(
        proxy.seen(),
        [(format!("CONNECT {API_HOST}:{} HTTP/1.1", s.up.port), true)],
        "the proxy saw the broker's tunnel, with the worker's credentials"
    );
}

/// A bound secret in the shared view is refused
/// (`binding_needs_private_view`), nothing run; controls: an unbound
/// secret in the shared view runs, and the refusal exits as another plan
/// refusal does.
#[test]
fn a_bound_secret_in_the_shared_view_is_refused() {
    need_root!();
    let s = Scene::new("shared");
    let marker = s.f("ran");
    let script = format!("touch {marker}");
    let out = s.run(&s.config, &["--view", "shared"], &["github_token"], &script);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!Path::new(&marker).exists(), "nothing ran");
    let control_refusal = s.run(
        &s.config,
        &["--view", "shared"],
        &["plain_token=@f"],
        &script,
    );
    assert_eq!(
        out.status.code(),
        control_refusal.status.code(),
        "{out:?}\n{control_refusal:?}"
    );
    assert!(!Path::new(&marker).exists());
    let codes: Vec<serde_json::Value> = s
        .audit
        .records()
        .iter()
        .map(|r| r["launch_error"].clone())
        .filter(|c| !c.is_null())
        .collect();
    assert_eq!(
        codes,
        [
            json!("binding_needs_private_view"),
            json!("file_needs_private_view")
        ]
    );
    let ok = s.run(&s.config, &["--view", "shared"], &["plain_token"], &script);
    ran_ok(&ok, "control: an unbound secret in the shared view");
    assert!(Path::new(&marker).exists(), "control ran");
}

/// Two calls of one user at once: each its own placeholder and CA; the
/// one's placeholder sent in the other is never substituted (the host gets
/// the placeholder itself, worth nothing to it); each one's own works (the
/// control).
#[test]
fn two_calls_at_once_each_have_their_own_placeholder_and_never_substitute_the_others() {
    need_root!();
    let s = std::sync::Arc::new(Scene::new("two"));
    let request = r#"curl -sS -H "Authorization: Bearer $1" -o /dev/null -w "$2 %{http_code}\n" "$U/echo?forms=raw""#;
    let first = {
        let s = s.clone();
        let script = format!(
            r#"req() {{ {request}; }}
cp {BUNDLE} $F/bundle-a.pem; printf '%s' "$github_token" > $F/placeholder-a.tmp; mv $F/placeholder-a.tmp $F/placeholder-a
n=0; while [ ! -e $F/placeholder-b ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n+1)); done
req "$github_token" own; req "$(cat $F/placeholder-b)" others; touch $F/a-done"#
        );
        std::thread::spawn(move || {
            s.run(
                &s.config,
                &["--network", "host"],
                &["github_token"],
                &script,
            )
        })
    };
    let a_file = s.files.path().join("placeholder-a");
    let mut polls = 0;
    while !a_file.exists() {
        if first.is_finished() {
            let out = first.join().unwrap();
            panic!(
                "the first call ended before it wrote its placeholder: {}\n{}",
                common::stdout(&out),
                common::stderr(&out)
            );
        }
        polls += 1;
        assert!(polls < 60_000, "the first call never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let script = format!(
        r#"req() {{ {request}; }}
cp {BUNDLE} $F/bundle-b.pem
req "$(cat $F/placeholder-a)" others; req "$github_token" own
printf '%s' "$github_token" > $F/placeholder-b.tmp; mv $F/placeholder-b.tmp $F/placeholder-b
n=0; while [ ! -e $F/a-done ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n+1)); done"#
    );
    let second = s.run(
        &s.config,
        &["--network", "host"],
        &["github_token"],
        &script,
    );
    let first = first.join().unwrap();
    let (a, b) = (ran_ok(&first, "first"), ran_ok(&second, "second"));
    let (pa, pb) = (s.text("placeholder-a"), s.text("placeholder-b"));
    assert_ne!(pa, pb);
    assert_ne!(
        s.text("bundle-a.pem"),
        s.text("bundle-b.pem"),
        "each call its own CA"
    );
    // The value reached the server only for each call's own placeholder.
    // The other call's placeholder is, to a broker, a string like any
    // other: it went on as itself, never substituted, so the host got a
    // worthless placeholder (a real host refuses it as a bad token).
    let api = s.up.requests_to(API_HOST);
    let carried: Vec<&serde_json::Value> = api.iter().map(|r| &r["authorization"]).collect();
    let count = |auth: String| api.iter().filter(|r| r["authorization"] == auth).count();
    assert_eq!(count(format!("Bearer {}", s.value)), 2, "{carried:?}");
    assert_eq!(count(format!("Bearer {pa}")), 1, "B sent A's: {carried:?}");
    assert_eq!(count(format!("Bearer {pb}")), 1, "A sent B's: {carried:?}");
    assert_eq!(api.len(), 4, "{carried:?}");
    for out in [&a, &b] {
        assert_eq!(line(out, "own"), "own 200", "{out}");
        assert_eq!(line(out, "others"), "others 200", "{out}");
    }
}

/// A value goes into a request's body only where its binding says `body`:
/// with `"body": true` the server gets the value in a `Content-Length`
/// body, a chunked body and a JSON body; with the binding as by default
/// it gets the placeholder there (the header beside it still carries the
/// value); a body with the placeholder toward a host the secret is not
/// bound to is refused like a header.
#[test]
fn a_value_goes_into_a_body_only_where_its_binding_says_so() {
    need_root!();
    let Some(python) = python_requests::python_with_requests() else {
        return;
    };
    let s = Scene::new("body");
    let with_body = s.configs.broker_config(
        "body.json",
        &s.up,
        json!({
            "github_token": {"hosts": [API_HOST], "body": true},
            "other_token": {"hosts": [OTHER_HOST]},
        }),
        json!({}),
    );
    let script = format!(
        r#"printf '%s' "$github_token" > $F/placeholder-$MODE
H="Authorization: Bearer $github_token"
curl -sS -H "$H" --data-binary "token=$github_token&n=1" -o /dev/null -w 'length %{{http_code}}\n' "$U/echo?kind=length"
curl -sS -H "$H" -H 'Transfer-Encoding: chunked' --data-binary "token=$github_token&n=2" -o /dev/null -w 'chunked %{{http_code}}\n' "$U/echo?kind=chunked"
{python} -c 'import os, requests; r = requests.post(os.environ["U"] + "/echo?kind=json", json={{"token": os.environ["github_token"]}}); print("json", r.status_code)'
curl -sS --data-binary "token=$github_token" -o $F/other-$MODE -w 'other %{{http_code}}\n' "$O/echo?kind=other""#,
        python = python.display()
    );
    for (mode, config) in [("default", &s.config), ("body", &with_body)] {
        let out = s.run(
            config,
            &["--network", "host"],
            &["github_token", "other_token"],
            &format!("MODE={mode}; export U\n{script}"),
        );
        let stdout = ran_ok(&out, mode);
        for kind in ["length", "chunked", "json"] {
            assert_eq!(
                line(&stdout, kind),
                format!("{kind} 200"),
                "{mode}: {stdout}"
            );
        }
        // Toward other.tono.test (intercepted, the secret not bound
        // there): the body's placeholder is passed on as it is (a 200 from
        // the upstream; the headers' rule, 403 placeholder_not_bound, is
        // not applied to bodies), never the value.
        eprintln!("{mode}: {}", line(&stdout, "other"));
        let p = s.text(&format!("placeholder-{mode}"));
        let requests: Vec<_> =
            s.up.requests_to(API_HOST)
                .into_iter()
                .filter(|r| {
                    r["body"]
                        .as_str()
                        .unwrap()
                        .contains(if mode == "body" { &s.value } else { &p })
                        || r["body"].as_str().unwrap().contains(&p)
                })
                .collect();
        assert_eq!(requests.len(), 3, "{mode}: {requests:#?}");
        let want = if mode == "body" { &s.value } else { &p };
        for r in &requests {
            let body = r["body"].as_str().unwrap();
            assert!(body.contains(want.as_str()), "{mode}: {r}");
            assert_eq!(
                r["body_len"].as_u64().unwrap() as usize,
                body.len(),
                "{mode}: {r}"
            );
        }
        // The header beside it carried the value either way (curl's two).
        let headed = requests
            .iter()
            .filter(|r| r["authorization"] == format!("Bearer {}", s.value))
            .count();
        assert_eq!(headed, 2, "{mode}: {requests:#?}");
    }
    for r in s.up.requests_to(OTHER_HOST) {
        let body = r["body"].as_str().unwrap();
        assert!(!body.contains(&s.value), "the value reached other: {r}");
        assert!(body.starts_with("token=ghp_"), "{r}");
    }
    // Control for the search: the value was found in the bodies of the
    // `body` run, and the placeholder in those of the default run.
    let bodies: Vec<String> =
        s.up.requests_to(API_HOST)
            .iter()
            .map(|r| r["body"].as_str().unwrap().to_owned())
            .collect();
    assert_eq!(
        bodies.iter().filter(|b| b.contains(&s.value)).count(),
        3,
        "{bodies:#?}"
    );
}

/// Kept-alive connections: every request on a connection the tool keeps
/// open is substituted and every answer scrubbed, not only the first
/// (curl: three URLs on one connection; a `requests.Session`: twenty).
#[test]
fn every_request_on_a_kept_alive_connection_is_substituted_and_scrubbed() {
    need_root!();
    let Some(python) = python_requests::python_with_requests() else {
        return;
    };
    let s = Scene::new("keepalive");
    let script = format!(
        r#"printf '%s' "$github_token" > $F/placeholder
curl -v -sS -H "Authorization: Bearer $github_token" -o $F/k1 -o $F/k2 -o $F/k3 "$U/echo?forms=raw" "$U/echo?forms=hex&gzip=1" "$U/echo?forms=raw&chunked=1&chunk=4" 2>$F/verbose; echo "curl $?"
echo "tunnels $(grep -c '^> CONNECT ' $F/verbose)"
{python} - <<'PYEOF'
import os, requests
s = requests.Session()
bodies = [s.get(os.environ["U"] + "/echo?forms=raw", headers={{"x-api-key": os.environ["github_token"]}}).text for _ in range(20)]
open(os.environ["F"] + "/session", "w").write("".join(bodies))
print("session", len(bodies))
PYEOF"#,
        python = python.display()
    );
    let out = s.run(
        &s.config,
        &["--network", "host"],
        &["github_token"],
        &format!("export U F\n{script}"),
    );
    let stdout = ran_ok(&out, "keep-alive");
    assert_eq!(line(&stdout, "curl"), "curl 0", "{stdout}");
    // One tunnel for curl's three requests (a connection the broker
    // closed after one would show as a CONNECT for each).
    assert_eq!(line(&stdout, "tunnels"), "tunnels 1", "{stdout}");
    assert_eq!(line(&stdout, "session"), "session 20", "{stdout}");
    let p = s.text("placeholder");
    assert_eq!(s.text("k1"), format!("credentials: 1\nraw: {p}\n"));
    assert_eq!(
        String::from_utf8_lossy(&plain_body(s.read("k2"))),
        format!("credentials: 1\nhex: {}\n", hex(&p))
    );
    assert_eq!(s.text("k3"), format!("credentials: 1\nraw: {p}\n"));
    assert_eq!(
        s.text("session"),
        format!("credentials: 1\nraw: {p}\n").repeat(20)
    );
    let api = s.up.requests_to(API_HOST);
    assert_eq!(api.len(), 23);
    // And the broker kept its own connection upstream: one for curl's
    // tunnel, one for the session's.
    assert_eq!(s.up.connections(), 2, "connections upstream");
    let with_value = api
        .iter()
        .filter(|r| {
            r["authorization"] == format!("Bearer {}", s.value)
                || r["x_api_key"] == s.value.as_str()
        })
        .count();
    assert_eq!(with_value, 23, "{api:#?}");
    let uses = s.ends()[0]["broker"].as_array().unwrap().len();
    assert_eq!(uses, 23, "one use on the record per request");
}

/// Only the broker reaches a bound host: the tool asking the worker's end
/// at 127.0.0.1:3128 itself for a bound host (to read back what the
/// broker put there, past the scrubbing) is refused `403
/// bound_host_only_through_broker`, in network host and proxy; the same
/// request for a host no binding names passes (the control), and so does
/// the broker's own request for the bound host.
#[test]
fn a_bound_host_is_reached_only_through_the_broker() {
    need_root!();
    let s = Scene::new("only");
    let proxy = Proxy::start();
    let via_proxy = s.configs.broker_config(
        "proxy.json",
        &s.up,
        bindings(),
        json!({"proxy": format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{}", proxy.port)}),
    );
    let script = r#"curl -sS -k --proxy http://127.0.0.1:3128 -o /dev/null -w 'bound %{http_connect} %{http_code}' "$U/echo"; echo " exit $?"
curl -sS -k --proxy http://127.0.0.1:3128 -o /dev/null -w 'other %{http_connect} %{http_code}' "$O/echo"; echo " exit $?"
curl -sS -H "Authorization: Bearer $github_token" -o /dev/null -w 'broker %{http_code}' "$U/echo"; echo " exit $?""#;
    for (mode, config) in [("host", &s.config), ("proxy", &via_proxy)] {
        let before = s.up.requests_to(API_HOST).len();
        let out = s.run(config, &["--network", mode], &["github_token"], script);
        let stdout = ran_ok(&out, mode);
        let bound = line(&stdout, "bound");
        assert!(bound.starts_with("bound 403 "), "{mode}: {stdout}");
        assert!(
            common::stderr(&out).contains("403") || !bound.ends_with(" exit 0"),
            "{mode}: {stdout}"
        );
        assert_eq!(
            line(&stdout, "other"),
            "other 200 200 exit 0",
            "{mode}: the control, a host no binding names: {stdout}"
        );
        assert_eq!(
            line(&stdout, "broker"),
            "broker 200 exit 0",
            "{mode}: {stdout}"
        );
        // The bound host saw the broker's request only.
        assert_eq!(
            s.up.requests_to(API_HOST).len(),
            before + 1,
            "{mode}: {stdout}"
        );
    }
}
