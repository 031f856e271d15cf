//! `tono-seal verify` on real users: a correct set-up passes every probe,
//! and each breakage fails exactly the probes it should.

mod common;

use common::{stderr, tono, TestUser};
use serde_json::Value;

fn verify(args: &[&str]) -> (i32, Vec<Value>) {
    let mut all = vec!["verify", "--json"];
    all.extend_from_slice(args);
    let o = tono(&all, b"");
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (
        o.status.code().unwrap_or(-1),
        v["probes"].as_array().unwrap().clone(),
    )
}

fn failing(probes: &[Value]) -> Vec<String> {
    probes
        .iter()
        .filter(|p| p["pass"] == false)
        .map(|p| {
            format!(
                "{} [{}]: {}",
                p["tried"].as_str().unwrap(),
                p["user"],
                p["got"]
            )
        })
        .collect()
}

#[test]
fn a_correct_set_up_passes_and_each_breakage_fails_its_probe() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    a.seal("k", b"v");
    b.seal("k", b"v");
    let users = ["--user", a.name(), "--user", b.name()];
    let (code, probes) = verify(&users);
    assert_eq!(code, 0, "{:?}", failing(&probes));
    assert!(probes.len() > 40, "{} probes", probes.len());

    // With --audit, every probe call as a user leaves a receipt.
    let dir = common::AuditDir::new("verify");
    let log = dir.log().display().to_string();
    let mut audited = users.to_vec();
    audited.extend(["--audit", log.as_str()]);
    let (code, _) = verify(&audited);
    assert_eq!(code, 0);
    let receipts = dir.records();
    let users_seen: std::collections::BTreeSet<&str> =
        receipts.iter().filter_map(|r| r["user"].as_str()).collect();
    assert_eq!(users_seen, [a.name(), b.name()].into_iter().collect());
    assert!(receipts
        .iter()
        .all(|r| r["kind"] == "call" && r["tool"] == "shell"));
    let checked = common::tono(&["audit", "verify", &log], b"");
    assert!(checked.status.success(), "{}", common::stdout(&checked));
    drop(dir);

    // A home opened to others.
    a.sh("chmod 0755 $HOME");
    let (code, probes) = verify(&users);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert!(
        f.iter()
            .any(|p| p.contains(&format!("{} has no group/other access", a.home().display()))),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|p| p.starts_with(&format!("read {}'s home", a.name()))),
        "{f:?}"
    );
    a.sh("chmod 0700 $HOME");

    // A readable identity (the home still closed: only the mode probe fails).
    a.sh("chmod 0644 .tono/identity");
    let (code, probes) = verify(&users);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert!(
        f.iter()
            .all(|p| p.contains(".tono/identity has no group/other access")),
        "{f:?}"
    );
    a.sh("chmod 0600 .tono/identity");

    // A in B's group.
    assert!(std::process::Command::new("usermod")
        .args(["-aG", b.name(), a.name()])
        .status()
        .unwrap()
        .success());
    let (code, probes) = verify(&users);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert!(
        f.iter()
            .any(|p| p.contains(&format!("{} is not in {}'s group", a.name(), b.name()))),
        "{f:?}"
    );
    assert!(std::process::Command::new("gpasswd")
        .args(["-d", a.name(), b.name()])
        .output()
        .unwrap()
        .status
        .success());

    // A protected file everyone may write, and code the users may write.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let rulebase = dir.path().join("rulebase");
    std::fs::write(&rulebase, b"rules").unwrap();
    std::fs::set_permissions(
        &rulebase,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let launcher_copy = dir.path().join("tono-launch");
    std::fs::copy(common::launch_bin(), &launcher_copy).unwrap();
    let with_extra = [
        "--user",
        a.name(),
        "--user",
        b.name(),
        "--protect",
        rulebase.to_str().unwrap(),
        "--code",
        launcher_copy.to_str().unwrap(),
    ];
    let (code, probes) = verify(&with_extra);
    assert_eq!(code, 0, "{:?}", failing(&probes));
    std::fs::set_permissions(
        &rulebase,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    std::os::unix::fs::chown(&launcher_copy, None, Some(a.user.gid)).unwrap();
    std::fs::set_permissions(
        &launcher_copy,
        std::os::unix::fs::PermissionsExt::from_mode(0o775),
    )
    .unwrap();
    let (code, probes) = verify(&with_extra);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert!(
        f.iter()
            .any(|p| p.starts_with("read protected") || p.starts_with("write protected")),
        "{f:?}"
    );
    assert!(
        f.iter().any(
            |p| p.contains(&format!("write code {}", launcher_copy.display()))
                && p.contains(a.name())
        ),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|p| p.contains("is root-owned and not group/other writable")),
        "{f:?}"
    );
}

#[test]
fn verify_inside_a_user_namespace_does_not_pass() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let o = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--"])
        .arg(common::tono_bin())
        .args(["verify", "--user", a.name(), "--user", b.name()])
        .output()
        .unwrap();
    assert_ne!(
        o.status.code(),
        Some(0),
        "verify passed inside a user namespace:\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("FAIL") || !o.stderr.is_empty(), "{out}");
}

#[test]
fn three_uid_mode_passes_and_an_executor_writable_rulebase_fails_its_probe() {
    need_root!();
    let (agent, executor, gate) = (
        TestUser::with_key(),
        TestUser::with_key(),
        TestUser::with_key(),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let rulebase = dir.path().join("rulebase");
    std::fs::write(&rulebase, b"allow nothing").unwrap();
    std::os::unix::fs::chown(&rulebase, Some(gate.user.uid), Some(gate.user.gid)).unwrap();
    std::fs::set_permissions(
        &rulebase,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let args = [
        "--agent",
        agent.name(),
        "--executor",
        executor.name(),
        "--gate",
        gate.name(),
        "--protect",
        rulebase.to_str().unwrap(),
    ];
    let (code, probes) = verify(&args);
    assert_eq!(code, 0, "{:?}", failing(&probes));
    assert!(probes.iter().any(
        |p| p["tried"].as_str().unwrap().starts_with("read protected") && p["user"] == agent.name()
    ));
    // The rulebase made writable by the executor's group.
    std::os::unix::fs::chown(&rulebase, None, Some(executor.user.gid)).unwrap();
    std::fs::set_permissions(
        &rulebase,
        std::os::unix::fs::PermissionsExt::from_mode(0o660),
    )
    .unwrap();
    let (code, probes) = verify(&args);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("write protected") && f[0].contains(executor.name()),
        "{f:?}"
    );
}

#[test]
fn the_containment_probe_fails_when_a_call_is_not_contained() {
    need_root!();
    use tono_seal::verify::containment::containment_probes;
    let u = TestUser::with_key();
    let rt = common::rt();
    // Positive control: contained calls pass all three.
    let contained = rt.block_on(containment_probes(
        &common::launcher(),
        &u.user,
        &tono_seal::drop::RunOptions::default(),
    ));
    assert_eq!(contained.len(), 3);
    for p in &contained {
        assert!(p.pass, "{} failed: {}", p.tried, p.got);
    }
    // The door: calls without a cgroup of their own, so escapes live on.
    let loose = tono_seal::drop::RunOptions {
        cgroup: false,
        ..tono_seal::drop::RunOptions::default()
    };
    let probes = rt.block_on(containment_probes(&common::launcher(), &u.user, &loose));
    assert!(!probes[0].pass, "{}: {}", probes[0].tried, probes[0].got);
    // The process group kill takes the two that stayed in the group; the
    // setsid one lives on, and the probe says so.
    assert!(
        probes[0]
            .got
            .starts_with("3 of 3 escapes alive inside the call")
            && !probes[0].got.ends_with(" 0 after it"),
        "{}",
        probes[0].got
    );
    let _ = std::process::Command::new("pkill")
        .args(["-KILL", "-U", &u.user.uid.to_string()])
        .status();
}
