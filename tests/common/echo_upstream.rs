//! The upstream of the broker's end-to-end tests (issue 34): a loopback
//! HTTPS server (`tests/fixtures/echo_upstream.py`, run as root) with a
//! test CA of its own, which records every request with the credentials it
//! carried and can echo them back; the names it answers to, made to
//! resolve to 127.0.0.1 through `/etc/hosts`; and the env config that binds
//! secrets to those names and trusts the test CA.
//!
//! Included with `#[path = "common/echo_upstream.rs"] mod echo_upstream;`
//! by the tests that need it (beside `mod common;`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{json, Value};

/// The host the tests bind secrets to.
pub const API_HOST: &str = "api.tono.test";
/// A second host of the same server: bound to another secret (so the
/// broker intercepts it) or to none.
pub const OTHER_HOST: &str = "other.tono.test";
/// A third host of the same server that no test binds: never intercepted.
pub const PLAIN_HOST: &str = "plain.tono.test";
/// Every name the server's leaf certificate carries (`.test` is reserved
/// by RFC 2606: no real host has these names).
pub const TEST_HOSTS: [&str; 3] = [API_HOST, OTHER_HOST, PLAIN_HOST];

/// A test CA and a leaf it signed for `hosts`, as PEM.
pub struct TestCerts {
    pub ca_pem: String,
    pub leaf_pem: String,
    pub leaf_key_pem: String,
}

impl TestCerts {
    /// A fresh CA (CA:true, a subject key identifier) and one leaf for all
    /// of `hosts` (each a DNS SAN, serverAuth, the authority key
    /// identifier), valid from an hour ago for a day.
    pub fn new(hosts: &[&str]) -> Self {
        let now = time::OffsetDateTime::now_utc();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, "tono-seal tests' upstream CA");
        ca.not_before = now - time::Duration::hours(1);
        ca.not_after = now + time::Duration::days(1);
        let ca_cert = ca.self_signed(&ca_key).unwrap();

        let leaf_key = KeyPair::generate().unwrap();
        let names: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        let mut leaf = CertificateParams::new(names).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, hosts[0]);
        leaf.is_ca = IsCa::ExplicitNoCa;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = now - time::Duration::hours(1);
        leaf.not_after = now + time::Duration::days(1);
        let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
        Self {
            ca_pem: ca_cert.pem(),
            leaf_pem: leaf_cert.pem(),
            leaf_key_pem: leaf_key.serialize_pem(),
        }
    }
}

/// The running server; killed and reaped when dropped.
pub struct EchoUpstream {
    child: Child,
    /// Its port on 127.0.0.1 (the same for every name).
    pub port: u16,
    dir: tempfile::TempDir,
    /// The git repository's one commit's file content.
    pub git_readme: String,
}

fn write_private(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn git(args: &[&str], dir: &Path) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl EchoUpstream {
    /// Starts a server whose git repository takes any `Basic` password.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts a server whose git repository takes only `password`.
    pub fn with_git_password(password: &str) -> Self {
        Self::start_with(Some(password))
    }

    fn start_with(git_password: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let certs = TestCerts::new(&TEST_HOSTS);
        write_private(&dir.path().join("ca.pem"), &certs.ca_pem);
        write_private(&dir.path().join("leaf.pem"), &certs.leaf_pem);
        write_private(&dir.path().join("leaf.key"), &certs.leaf_key_pem);
        std::fs::write(dir.path().join("requests.jsonl"), b"").unwrap();

        // A bare repository with one commit, under the root git serves.
        let root = dir.path().join("git");
        let work = dir.path().join("work");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&work).unwrap();
        let git_readme = format!("served-by-tono-echo-upstream-{}\n", std::process::id());
        git(&["init", "-q", "--bare", "-b", "main", "repo.git"], &root);
        git(&["init", "-q", "-b", "main"], &work);
        std::fs::write(work.join("README"), &git_readme).unwrap();
        git(&["add", "README"], &work);
        git(
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "-m",
                "one",
            ],
            &work,
        );
        let bare = root.join("repo.git");
        git(
            &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
            &work,
        );

        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/echo_upstream.py"
        );
        let mut command = Command::new("/usr/bin/python3");
        command
            .arg(script)
            .arg("--cert")
            .arg(dir.path().join("leaf.pem"))
            .arg("--key")
            .arg(dir.path().join("leaf.key"))
            .arg("--log")
            .arg(dir.path().join("requests.jsonl"))
            .arg("--git-root")
            .arg(&root);
        if let Some(password) = git_password {
            let file = dir.path().join("git-password");
            write_private(&file, password);
            command.arg("--git-password-file").arg(file);
        }
        let mut child = command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the echo upstream");
        // Ready when it printed its port (an event, not a time).
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the echo upstream printed no port: {line:?}"));
        Self {
            child,
            port,
            dir,
            git_readme,
        }
    }

    /// The test CA's certificate (PEM), root's `0600`: what the env config
    /// gives as `upstream_ca`.
    pub fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `https://HOST:PORT` + `path` (with its query, if any).
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port)
    }

    /// Every event recorded so far, in order.
    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The requests recorded so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["kind"] == "request")
            .collect()
    }

    /// The requests whose TLS name (SNI) was `host`.
    pub fn requests_to(&self, host: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["sni"] == host)
            .collect()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| e["kind"] == "connection")
            .count()
    }
}

impl Drop for EchoUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line this harness adds to `/etc/hosts`.
pub const HOSTS_LINE: &str =
    "127.0.0.1 api.tono.test other.tono.test plain.tono.test # tono-seal tests (RFC 2606 names)";

/// Makes [`TEST_HOSTS`] resolve to 127.0.0.1 through the system resolver
/// (the worker's end of a call resolves a `CONNECT`'s name so): appends
/// [`HOSTS_LINE`] to `/etc/hosts` once, under an exclusive lock that test
/// binaries running at once share, then checks each name resolves there.
pub fn resolve_test_hosts() {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open("/run/lock/tono-test-hosts.lock")
        .unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock /etc/hosts for the test names");
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    if !hosts.lines().any(|l| l.trim() == HOSTS_LINE) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open("/etc/hosts")
            .unwrap();
        let newline = if hosts.is_empty() || hosts.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        writeln!(f, "{newline}{HOSTS_LINE}").unwrap();
    }
    for host in TEST_HOSTS {
        let addrs: Vec<std::net::SocketAddr> =
            std::net::ToSocketAddrs::to_socket_addrs(&(host, 443))
                .unwrap_or_else(|e| panic!("{host} does not resolve: {e}"))
                .collect();
        assert!(
            addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty(),
            "{host} resolves to {addrs:?}"
        );
    }
}

/// A root-only folder (`0700`) for env configs, removed when dropped.
pub struct ConfigDir(tempfile::TempDir);

impl ConfigDir {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        Self(dir)
    }

    /// Writes the env config of issue 34 as `name` (root's `0600`): `bind`
    /// as given, `upstream_ca` the server's test CA, `egress_allow_ranges`
    /// `["loopback"]` (the server is on 127.0.0.1), and every field of
    /// `extra` (an object: `bind_for_users`, `proxy`, ...) beside them.
    pub fn broker_config(
        &self,
        name: &str,
        upstream: &EchoUpstream,
        bind: Value,
        extra: Value,
    ) -> PathBuf {
        let mut config = json!({
            "bind": bind,
            "upstream_ca": upstream.ca_pem(),
            "egress_allow_ranges": ["loopback"],
        });
        for (k, v) in extra.as_object().expect("extra is an object") {
            config[k] = v.clone();
        }
        self.write(name, &config)
    }

    /// Writes `config` as `name` (root's `0600`).
    pub fn write(&self, name: &str, config: &Value) -> PathBuf {
        let path = self.0.path().join(name);
        let _ = std::fs::remove_file(&path);
        write_private(&path, &serde_json::to_string_pretty(config).unwrap());
        path
    }
}
