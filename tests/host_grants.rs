//! What the host grants, and a clear refusal where it does not (issue 36):
//! a worker whose capability bounding set lacks `CAP_SYS_ADMIN` (as in a
//! container with Docker's default capabilities) or `CAP_NET_ADMIN` is
//! made here with `setpriv --bounding-set`, and `run`, `serve` and `demo`
//! are started in it. Each refusal is the typed one (exit 9, the
//! capability and the fix named) and nothing ran — the tool's marker file
//! is absent — beside the positive control in the same reduced process (a
//! mode the host does grant, whose marker is there) and the same call with
//! the full set.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{marker_path, stderr, stdout, tono_bin, TestUser, CLI_STARTS};

/// `tono-seal ARGS` started by `setpriv` with `drop` removed from its
/// bounding set (so the launcher it starts as root lacks them), `stdin`
/// written to it.
fn tono_without(caps: &[&str], args: &[&str], stdin: &[u8]) -> Output {
    let mut setpriv = Vec::new();
    if !caps.is_empty() {
        let set: Vec<String> = caps.iter().map(|c| format!("-{c}")).collect();
        setpriv = vec!["--bounding-set".to_string(), set.join(",")];
    }
    tono_setpriv(&setpriv, args, stdin)
}

/// `tono-seal ARGS` started by `setpriv SETPRIV`, `stdin` written to it.
fn tono_setpriv(setpriv: &[String], args: &[&str], stdin: &[u8]) -> Output {
    let _starting = CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new("setpriv")
        .args(setpriv)
        .arg("--")
        .arg(tono_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)");
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

/// A marker the tool makes (outside any folder a private call has of its
/// own), absent to begin with.
fn fresh_marker(tag: &str) -> String {
    let path = marker_path(&format!("host-grants-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn run_touching(drop: &[&str], user: &str, mode: &[&str], marker: &str) -> Output {
    let mut args = vec!["run", "--user", user];
    args.extend_from_slice(mode);
    args.extend_from_slice(&["--", "/usr/bin/touch", marker]);
    tono_without(drop, &args, b"")
}

fn assert_refused(o: &Output, marker: &str, cap: &str) {
    let said = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(9),
        "exit 9 (not granted); stderr: {said}"
    );
    assert!(said.contains(cap), "names {cap}: {said}");
    assert!(
        said.contains(&format!("--cap-add {}", cap.trim_start_matches("CAP_"))),
        "names the fix: {said}"
    );
    assert!(
        !std::path::Path::new(marker).exists(),
        "the tool ran though the launch was refused: {marker} exists"
    );
}

fn assert_ran(o: &Output, marker: &str) {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    assert!(
        std::path::Path::new(marker).exists(),
        "the tool did not make {marker}: {}",
        stderr(o)
    );
    let _ = std::fs::remove_file(marker);
}

#[test]
fn the_private_view_is_refused_naming_cap_sys_admin_where_the_host_lacks_it() {
    need_root!();
    let u = TestUser::bare();
    let marker = fresh_marker("view");
    // The host lacks CAP_SYS_ADMIN: refused before anything runs.
    let o = run_touching(&["sys_admin"], u.name(), &["--network", "host"], &marker);
    assert_refused(&o, &marker, "CAP_SYS_ADMIN");
    assert!(stderr(&o).contains("--view shared"), "{}", stderr(&o));
    // The same reduced process, a mode it does grant: the shared view runs.
    let o = run_touching(&["sys_admin"], u.name(), &["--view", "shared"], &marker);
    assert_ran(&o, &marker);
    // The full set: the private view runs.
    let o = run_touching(&[], u.name(), &["--network", "host"], &marker);
    assert_ran(&o, &marker);
}

#[test]
fn a_network_of_the_calls_own_is_refused_naming_cap_net_admin_where_the_host_lacks_it() {
    need_root!();
    let u = TestUser::bare();
    let marker = fresh_marker("net");
    // A proxy configured (never reached: the refusal comes first).
    let dir = common::tempdir();
    let config = dir.path().join("env.json");
    std::fs::write(&config, r#"{"proxy": "http://u:p@127.0.0.1:9"}"#).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config = config.to_str().unwrap();
    for network in ["none", "proxy"] {
        let o = run_touching(
            &["net_admin"],
            u.name(),
            &["--env-config", config, "--network", network],
            &marker,
        );
        assert_refused(&o, &marker, "CAP_NET_ADMIN");
    }
    // Without CAP_NET_ADMIN the private view on the host's network runs.
    let o = run_touching(&["net_admin"], u.name(), &["--network", "host"], &marker);
    assert_ran(&o, &marker);
    // With it, network none runs.
    let o = run_touching(&[], u.name(), &["--network", "none"], &marker);
    assert_ran(&o, &marker);
}

#[test]
fn serve_refuses_to_start_where_its_calls_cannot_run_and_serves_in_a_mode_the_host_grants() {
    need_root!();
    let u = TestUser::bare();
    let marker = fresh_marker("serve");
    let request = format!(
        "{}\n",
        serde_json::json!({"id": 1, "user": u.name(),
            "call": {"tool": "spawn", "args": {"argv": ["/usr/bin/touch", marker]}}})
    );
    let audit = common::AuditDir::new("host-grants");
    let log = audit.log();
    let log = log.to_str().unwrap();
    let o = tono_without(
        &["sys_admin"],
        &["serve", "--stdio", "--audit", log, "--network", "host"],
        request.as_bytes(),
    );
    assert_refused(&o, &marker, "CAP_SYS_ADMIN");
    assert!(
        stdout(&o).is_empty(),
        "a refused worker answers nothing: {}",
        stdout(&o)
    );
    // No per-launcher warning: it refused once, before any launcher.
    assert!(!stderr(&o).contains("launcher"), "{}", stderr(&o));
    let o = tono_without(
        &["sys_admin"],
        &["serve", "--stdio", "--audit", log, "--view", "shared"],
        request.as_bytes(),
    );
    assert!(stdout(&o).contains("\"exit_code\":0"), "{}", stdout(&o));
    assert_ran(&o, &marker);
}

#[test]
fn the_demo_refuses_without_the_private_view_and_skips_its_scan_loudly_without_ptrace() {
    need_root!();
    let o = tono_without(&["sys_admin"], &["demo"], b"");
    let said = stderr(&o);
    assert_eq!(o.status.code(), Some(9), "{said}");
    assert!(said.contains("CAP_SYS_ADMIN"), "{said}");
    assert!(
        !stdout(&o).contains("tonodemo"),
        "refused before making users: {}",
        stdout(&o)
    );
    let o = tono_without(&["sys_ptrace"], &["demo"], b"");
    let shown = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a skipped property is no pass: {shown}"
    );
    assert!(
        shown.contains("SKIPPED, so not every property was shown to hold")
            && shown.contains("CAP_SYS_PTRACE"),
        "{shown}"
    );
    assert!(!shown.contains("every property held"), "{shown}");
    assert!(
        !shown.contains("FAILED"),
        "only the scan was left out: {shown}"
    );
    // The users it made are gone.
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(!passwd.contains("tonodemo"), "demo users left behind");
}

/// `setpriv` arguments for a root worker whose bounding set is full but
/// whose effective set is only `caps` (ambient, under `SECBIT_NOROOT`: an
/// exec as root no longer fills it from the bounding set).
fn noroot_with(caps: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--securebits".to_string(),
        "+noroot,+noroot_locked".to_string(),
    ];
    if !caps.is_empty() {
        let set: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
        let set = set.join(",");
        args.extend([
            "--inh-caps".into(),
            set.clone(),
            "--ambient-caps".into(),
            set,
        ]);
    }
    args
}

#[test]
fn a_worker_whose_effective_set_lacks_what_its_bounding_set_has_is_refused_naming_it() {
    need_root!();
    let u = TestUser::bare();
    let marker = fresh_marker("effective");
    let touch = |setpriv: &[String], mode: &[&str]| {
        let mut args = vec!["run", "--user", u.name()];
        args.extend_from_slice(mode);
        args.extend_from_slice(&["--", "/usr/bin/touch", &marker]);
        tono_setpriv(setpriv, &args, b"")
    };
    // The drop's capabilities and CAP_SYS_ADMIN in effect, CAP_NET_ADMIN
    // only in the bounding set: the worker's own clone(CLONE_NEWNET) and the
    // launcher's lo cannot be made (before: exit 1, "bring lo up:
    // Operation not permitted").
    let drop_and_view = [
        "setuid",
        "setgid",
        "setpcap",
        "kill",
        "dac_override",
        "fowner",
        "sys_admin",
    ];
    let o = touch(&noroot_with(&drop_and_view), &["--network", "none"]);
    assert_refused(&o, &marker, "CAP_NET_ADMIN");
    // Nothing in effect, the bounding set full (before: exit 1, "start
    // tono-launch: Operation not permitted").
    let o = touch(&noroot_with(&[]), &["--network", "none"]);
    assert_refused(&o, &marker, "CAP_SETUID");
    // A worker that is not root at all has a full bounding set too.
    let nobody = ["--reuid", "65534", "--regid", "65534", "--clear-groups"].map(String::from);
    let o = touch(&nobody, &["--network", "host"]);
    assert_refused(&o, &marker, "CAP_SETUID");
    // The same call from setpriv with nothing changed runs.
    let o = touch(&[], &["--network", "none"]);
    assert_ran(&o, &marker);
}
