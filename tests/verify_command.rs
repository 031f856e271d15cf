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
    // Each probe is there by name, once, and passed: a probe that could
    // not run is a line of its own (INCONCLUSIVE), never absent.
    for (me, other) in [(&a, &b), (&b, &a)] {
        for (user, tried) in [
            (
                me.name(),
                "signal the verifying root process (pid ".to_string(),
            ),
            (
                me.name(),
                "ptrace the verifying root process (pid ".to_string(),
            ),
            (me.name(), format!("signal {} (pid ", other.name())),
            (me.name(), format!("ptrace {} (pid ", other.name())),
            (me.name(), "setuid(0)".to_string()),
            ("root", format!("{} is no sudoer (sudo -l -U", me.name())),
            ("root", format!("{} is in no privileged group (", me.name())),
        ] {
            let named = named(&probes, user, &tried);
            assert_eq!(named.len(), 1, "{tried} as {user}: {named:?}");
            assert_eq!(named[0]["pass"], true, "{}", named[0]);
        }
        assert!(
            named(
                &probes,
                me.name(),
                &format!("signal {} (no pid)", other.name())
            )
            .is_empty(),
            "{:?}",
            failing(&probes)
        );
    }

    // The broker probe, for the first user: its throwaway secret sealed,
    // bound for the probe, and removed again.
    let broker = named(
        &probes,
        a.name(),
        "a call given a secret bound to hosts holds only its placeholder",
    );
    assert_eq!(broker.len(), 1, "{:?}", failing(&probes));
    assert_eq!(broker[0]["pass"], true, "{}", broker[0]);
    let listed = a.sh("ls ~/.tono/secrets");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("k.age") && !listed.contains("tono-verify-broker-probe"),
        "the user's own secret listed, the throwaway gone: {listed:?}"
    );

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

    // A readable identity (the home still closed): the mode probe fails,
    // and the broker probe, whose throwaway secret the store now refuses
    // to seal, says why (inconclusive); nothing else fails.
    a.sh("chmod 0644 .tono/identity");
    let (code, probes) = verify(&users);
    let f = failing(&probes);
    assert_eq!(code, 1);
    assert!(
        f.iter().all(|p| {
            p.contains(".tono/identity has no group/other access")
                || (p.starts_with("a call given a secret bound to hosts")
                    && p.contains("identity_insecure"))
        }) && f
            .iter()
            .any(|p| p.contains(".tono/identity has no group/other access")),
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
    let dir = open_tempdir();
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
        f.iter().any(
            |p| p.starts_with(&format!("every entry of {}", launcher_copy.display()))
                && p.contains("writable by a group not root's")
        ),
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
    // The probe that says why: the uid map's own line, and its verdict.
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("the uid map is the identity"))
        .unwrap_or_else(|| panic!("no uid_map probe line:\n{out}"));
    assert!(line.starts_with("FAIL "), "{line}");
    assert!(line.contains("uids here are cosmetic"), "{line}");
    // Control: outside the user namespace the same probe passes.
    let o = common::tono(&["verify", "--user", a.name(), "--user", b.name()], b"");
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("the uid map is the identity"))
        .unwrap_or_else(|| panic!("no uid_map probe line:\n{out}"));
    assert!(line.starts_with("pass "), "{line}");
}

#[test]
fn three_uid_mode_passes_and_an_executor_writable_rulebase_fails_its_probe() {
    need_root!();
    let (agent, executor, gate) = (
        TestUser::with_key(),
        TestUser::with_key(),
        TestUser::with_key(),
    );
    let dir = open_tempdir();
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
    assert_eq!(contained.len(), 4);
    for p in &contained {
        assert!(p.pass, "{} failed: {}", p.tried, p.got);
    }
    // The fork probe passes as pids.max's only with the refusals its
    // cgroup counted.
    use tono_seal::verify::containment::FORK_PIDS_MAX;
    assert_eq!(contained[1].tried, FORK_PIDS_MAX);
    let refused = |got: &str| -> u64 {
        let (_, after) = got
            .split_once(") refused ")
            .unwrap_or_else(|| panic!("{got}"));
        after.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(refused(&contained[1].got) > 0, "{}", contained[1].got);
    // The view probe counts the processes a call sees beside those the
    // user's own view sees, which must be more.
    let counts: Vec<u32> = contained[3]
        .got
        .split(" processes")
        .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && counts[0] < counts[1],
        "{}",
        contained[3].got
    );
    // RLIMIT_NPROC below pids.max: the loop ends in EAGAIN from the
    // rlimit, which the probe must not count as pids.max holding.
    let rlimited = tono_seal::drop::RunOptions {
        limits: tono_seal::launch::plan::Limits {
            nproc: 64,
            ..Default::default()
        },
        ..tono_seal::drop::RunOptions::default()
    };
    let probes = rt.block_on(containment_probes(&common::launcher(), &u.user, &rlimited));
    let fork = &probes[1];
    assert_eq!(fork.tried, FORK_PIDS_MAX);
    assert!(!fork.pass && fork.inconclusive, "{fork:?}");
    assert!(
        fork.got.starts_with("inconclusive: failed after ")
            && fork.got.contains("errno 11; pids.max 256 (")
            && fork.got.contains(") refused 0 fork(s); RLIMIT_NPROC 64"),
        "{fork:?}"
    );
    // The door: calls without a cgroup of their own, so escapes live on.
    // (The shared view: the private one's PID namespace would contain the
    // escapes even without a cgroup.)
    let loose = tono_seal::drop::RunOptions {
        cgroup: false,
        view: tono_seal::launch::view::View::Shared,
        ..tono_seal::drop::RunOptions::default()
    };
    let probes = rt.block_on(containment_probes(&common::launcher(), &u.user, &loose));
    // In the shared view the store is there for the tool: the view probe
    // fails, with its positive control held.
    assert!(
        !probes[3].pass && !probes[3].inconclusive,
        "{}",
        probes[3].got
    );
    assert!(
        probes[3]
            .got
            .starts_with("in a call (shared view): 3 store entries, cat identity exit 0"),
        "{}",
        probes[3].got
    );
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

/// A tmpfs mounted read-only over a folder, unmounted on drop.
struct ReadOnlyMount(std::path::PathBuf);

impl ReadOnlyMount {
    /// Mounts a tmpfs at `at`, lets `fill` write into it, then makes it
    /// read-only for everyone (the superblock, not only the mount).
    fn new(at: &std::path::Path, fill: impl FnOnce(&std::path::Path)) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let mount = |args: &[&str]| {
            let o = std::process::Command::new("mount")
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "mount {args:?}: {}", stderr(&o));
        };
        let path = at.to_str().unwrap();
        mount(&["-t", "tmpfs", "-o", "size=1m,mode=0755", "tonotest", path]);
        let guard = Self(at.to_path_buf());
        fill(at);
        mount(&["-o", "remount,ro", path]);
        guard
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A temporary folder of root's that every user may enter (0755), so a
/// probe fails only by what is planted inside it.
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    dir
}

/// Every probe as `user` whose `tried` starts with `tried`.
fn named<'a>(probes: &'a [Value], user: &str, tried: &str) -> Vec<&'a Value> {
    probes
        .iter()
        .filter(|p| p["user"] == user && p["tried"].as_str().unwrap().starts_with(tried))
        .collect()
}

fn probe_named<'a>(probes: &'a [Value], user: &str, tried: &str) -> &'a Value {
    probes
        .iter()
        .find(|p| p["user"] == user && p["tried"].as_str().unwrap().starts_with(tried))
        .unwrap_or_else(|| panic!("no probe {tried} as {user}"))
}

#[test]
fn a_denial_counts_only_as_eacces_or_eperm_and_anything_else_is_inconclusive() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let dir = open_tempdir();
    // A root file closed to others, on a file system mounted read-only:
    // the read is refused by its mode (EACCES), the write by the mount
    // (EROFS), which proves nothing about the mode.
    let frozen = dir.path().join("frozen");
    let _mount = ReadOnlyMount::new(&frozen, |at| {
        std::fs::write(at.join("rules"), b"rules").unwrap();
        std::fs::set_permissions(
            at.join("rules"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
    });
    let rules = frozen.join("rules");
    // Positive control: the same file, where it is writable, is written.
    let open = dir.path().join("open");
    std::fs::write(&open, b"").unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let (code, probes) = verify(&[
        "--user",
        a.name(),
        "--user",
        b.name(),
        "--protect",
        rules.to_str().unwrap(),
        "--protect",
        open.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let read = probe_named(
        &probes,
        a.name(),
        &format!("read protected {}", rules.display()),
    );
    assert_eq!(read["pass"], true, "{read}");
    assert!(
        read["got"].as_str().unwrap().starts_with("EACCES"),
        "{read}"
    );
    let write = probe_named(
        &probes,
        a.name(),
        &format!("write protected {}", rules.display()),
    );
    assert_eq!(write["pass"], false, "{write}");
    assert_eq!(write["inconclusive"], true, "{write}");
    assert!(
        write["got"]
            .as_str()
            .unwrap()
            .starts_with("inconclusive: EROFS"),
        "{write}"
    );
    let written = probe_named(
        &probes,
        a.name(),
        &format!("write protected {}", open.display()),
    );
    assert_eq!(
        (written["pass"].clone(), written["inconclusive"].clone()),
        (Value::Bool(false), Value::Bool(false)),
        "{written}"
    );
    assert!(
        written["got"].as_str().unwrap().starts_with("succeeded"),
        "{written}"
    );
    // The text table names it.
    let o = tono(
        &[
            "verify",
            "--user",
            a.name(),
            "--user",
            b.name(),
            "--protect",
            rules.to_str().unwrap(),
        ],
        b"",
    );
    let table = common::stdout(&o);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("INCONCLUSIVE") && l.contains("EROFS")),
        "{table}"
    );
}

#[test]
fn code_and_protected_trees_are_walked_entry_by_entry() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let dir = open_tempdir();
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    // A code tree: root's, a link inside it and one out to root's /usr/bin.
    let code = dir.path().join("code");
    std::fs::create_dir_all(code.join("lib/deep")).unwrap();
    std::fs::write(code.join("lib/deep/tool"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("deep/tool", code.join("lib/inside")).unwrap();
    std::os::unix::fs::symlink("/usr/bin", code.join("lib/out")).unwrap();
    // A protected tree: root's, closed.
    let protect = dir.path().join("protect");
    std::fs::create_dir_all(protect.join("inner")).unwrap();
    std::fs::write(protect.join("inner/secret"), b"s").unwrap();
    mode(&protect, 0o700);
    let args = [
        "--user",
        a.name(),
        "--user",
        b.name(),
        "--code",
        code.to_str().unwrap(),
        "--protect",
        protect.to_str().unwrap(),
    ];
    let (code_ok, probes) = verify(&args);
    assert_eq!(code_ok, 0, "{:?}", failing(&probes));
    let walked = probe_named(
        &probes,
        "root",
        &format!("every entry of {}", code.display()),
    );
    assert_eq!(
        walked["got"], "6 entries, all root's and closed to others",
        "{walked}"
    );
    let read = probe_named(
        &probes,
        a.name(),
        &format!("read protected {}", protect.display()),
    );
    assert_eq!(read["got"], "all 3 entries: EACCES", "{read}");

    // Doors deep inside: a folder of the user's own, a link out to a
    // folder the user owns, a protected entry opened to everyone
    // (its folders only searchable).
    let user_dir = dir.path().join("users-own");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(a.user.uid), Some(a.user.gid)).unwrap();
    std::os::unix::fs::symlink(&user_dir, code.join("lib/deep/plugins")).unwrap();
    std::fs::create_dir(code.join("lib/cache")).unwrap();
    std::os::unix::fs::chown(code.join("lib/cache"), Some(b.user.uid), Some(b.user.gid)).unwrap();
    mode(&protect, 0o711);
    mode(&protect.join("inner"), 0o711);
    mode(&protect.join("inner/secret"), 0o666);
    let (code_bad, probes) = verify(&args);
    assert_eq!(code_bad, 1);
    let f = failing(&probes);
    let walked = probe_named(
        &probes,
        "root",
        &format!("every entry of {}", code.display()),
    );
    let got = walked["got"].as_str().unwrap();
    assert!(
        got.contains(&format!(
            "owned by a probed user: {}",
            code.join("lib/cache").display()
        )),
        "{got}"
    );
    assert!(
        got.contains(&format!(
            "{} leads out to {}: owned by a probed user",
            code.join("lib/deep/plugins").display(),
            user_dir.display()
        )),
        "{got}"
    );
    let secret = protect.join("inner/secret");
    for kind in ["read", "write"] {
        let p = probe_named(
            &probes,
            a.name(),
            &format!("{kind} protected {}", protect.display()),
        );
        assert_eq!(p["pass"], false, "{p}");
        assert!(
            p["got"]
                .as_str()
                .unwrap()
                .starts_with(&format!("1 of 3 entries: {}: succeeded", secret.display())),
            "{p}"
        );
    }
    // Nothing else failed: the doors planted are the ones found.
    assert_eq!(f.len(), 5, "{f:?}");
}

/// A sudoers drop-in this test writes, removed on drop.
struct SudoersDropIn(std::path::PathBuf);

impl SudoersDropIn {
    fn new(rule: &str) -> Self {
        let path = std::path::PathBuf::from(format!(
            "/etc/sudoers.d/tonotest-verify-{}",
            std::process::id()
        ));
        std::fs::write(&path, format!("{rule}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o440))
            .unwrap();
        Self(path)
    }
}

impl Drop for SudoersDropIn {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_sudoer_or_a_member_of_a_privileged_group_fails_verify_by_name() {
    need_root!();
    if !std::path::Path::new("/etc/sudoers.d").is_dir() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "sudo is not installed (no /etc/sudoers.d): the sudoer probe cannot be tested"
        );
        eprintln!("\n*** SKIPPED: sudo is not installed (no /etc/sudoers.d) ***\n");
        return;
    }
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let users = ["--user", a.name(), "--user", b.name()];
    let sudoer = format!("{} is no sudoer", a.name());
    let grouped = format!("{} is in no privileged group", a.name());
    let in_call = "sudo -n true (shows no_new_privs holds";
    // Control: neither a sudoer nor in a privileged group.
    let (code, probes) = verify(&users);
    assert_eq!(code, 0, "{:?}", failing(&probes));
    let p = probe_named(&probes, "root", &sudoer);
    assert_eq!(
        p["got"],
        format!("sudo -l -U {}: not allowed", a.name()),
        "{p}"
    );
    let p = probe_named(&probes, a.name(), in_call);
    assert_eq!(p["pass"], true, "{p}");
    assert!(
        p["got"]
            .as_str()
            .unwrap()
            .contains("\"no new privileges\" flag"),
        "{p}"
    );

    // A NOPASSWD: ALL sudoer: the call's own sudo is still refused (by
    // no_new_privs, all that probe shows), and root's probe fails by name.
    let drop_in = SudoersDropIn::new(&format!("{} ALL=(ALL) NOPASSWD: ALL", a.name()));
    let (code, probes) = verify(&users);
    assert_eq!(code, 1);
    let f = failing(&probes);
    assert_eq!(f.len(), 1, "{f:?}");
    let p = probe_named(&probes, "root", &sudoer);
    assert_eq!(
        (p["pass"].clone(), p["inconclusive"].clone()),
        (Value::Bool(false), Value::Bool(false)),
        "{p}"
    );
    assert_eq!(
        p["got"],
        format!("sudo -l -U {}: a sudoer: (ALL) NOPASSWD: ALL", a.name()),
        "{p}"
    );
    assert_eq!(probe_named(&probes, a.name(), in_call)["pass"], true);
    drop(drop_in);

    // A member of adm (every log): the group probe fails, naming it.
    let usermod = |args: &[&str]| {
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    usermod(&["usermod", "-aG", "adm", a.name()]);
    let (code, probes) = verify(&users);
    usermod(&["gpasswd", "-d", a.name(), "adm"]);
    assert_eq!(code, 1);
    let f = failing(&probes);
    assert_eq!(f.len(), 1, "{f:?}");
    let p = probe_named(&probes, "root", &grouped);
    assert_eq!(p["pass"], false, "{p}");
    assert!(
        p["got"]
            .as_str()
            .unwrap()
            .starts_with("a member of adm (gid "),
        "{p}"
    );
    // And back: passes.
    let (code, probes) = verify(&users);
    assert_eq!(code, 0, "{:?}", failing(&probes));
}
