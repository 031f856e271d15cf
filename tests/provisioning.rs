//! The provisioning CLI against real users: every command, every bad input
//! of the keys issue, and the exit codes.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{stderr, stdout, tono, TestUser};

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

#[test]
fn store_layout_modes_and_owner() {
    need_root!();
    let u = TestUser::with_key();
    let root = u.home().join(".tono");
    u.seal("api", b"v");
    for (path, mode) in [
        (root.clone(), 0o700),
        (root.join("identity"), 0o600),
        (root.join("recipient"), 0o644),
        (root.join("secrets"), 0o700),
        (root.join("secrets/api.age"), 0o600),
    ] {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, mode, "{}", path.display());
        assert_eq!(
            (meta.uid(), meta.gid()),
            (u.user.uid, u.user.gid),
            "{} owned by the user",
            path.display()
        );
    }
    let recipient = std::fs::read_to_string(root.join("recipient")).unwrap();
    let printed = tono(&["recipient", "--user", u.name()], b"");
    assert_eq!(stdout(&printed).trim(), recipient.trim());
    assert!(recipient.starts_with("age1"));
    // Nothing under the home is owned by root.
    let out = u.sh("find . ! -user $(id -u) | head");
    assert_eq!(stdout(&out).trim(), "", "root-owned files in the home");
}

#[test]
fn every_command_round_trip() {
    need_root!();
    let u = TestUser::with_key();
    let n = u.name();
    assert_eq!(
        code(&tono(&["keygen", "--user", n], b"")),
        2,
        "no overwrite without --force"
    );
    let o = tono(&["seal", "--user", n, "db.password"], b"s3cret\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tono(&["reveal", "--user", n, "db.password"], b"");
    assert_eq!(o.stdout, b"s3cret\n");
    let o = tono(&["list", "--user", n, "--json"], b"");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["identity"]["state"], "ok", "{v}");
    assert_eq!(v["secrets"][0]["name"], "db.password");
    assert_eq!(v["secrets"][0]["state"], "ok");
    assert!(v["secrets"][0]["bytes"].as_u64().unwrap() > 100);
    assert!(!stdout(&o).contains("s3cret"), "list never shows values");
    let o = tono(&["list", "--user", n], b"");
    let names: Vec<String> = stdout(&o)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(names, ["identity ok", "db.password ok"], "{}", stdout(&o));
    let o = tono(&["rotate", "--user", n, "--json"], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["resealed"], 1);
    assert_eq!(
        tono(&["reveal", "--user", n, "db.password"], b"").stdout,
        b"s3cret\n"
    );
    let o = tono(&["remove", "--user", n, "db.password"], b"");
    assert!(o.status.success());
    assert_eq!(code(&tono(&["reveal", "--user", n, "db.password"], b"")), 5);
    assert_eq!(code(&tono(&["remove", "--user", n, "db.password"], b"")), 5);
    // --force keeps the old identity beside the new one.
    let o = tono(&["keygen", "--user", n, "--force"], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("kept at"));
}

#[test]
fn bad_users_are_refused_with_distinct_codes() {
    need_root!();
    assert_eq!(
        code(&tono(&["list", "--user", "tonotest-nobody"], b"")),
        3,
        "unknown user"
    );
    for spec in ["root", "#0", "#-1", "#4294967295", "#0x10", " #5"] {
        let o = tono(&["list", "--user", spec], b"");
        assert_eq!(code(&o), 2, "{spec}: {}", stderr(&o));
    }
    let o = tono(&["seal", "--user", "root", "x"], b"value");
    assert_eq!(code(&o), 2);
}

#[test]
fn missing_home_and_missing_store() {
    need_root!();
    let u = TestUser::bare();
    let o = tono(&["list", "--user", u.name()], b"");
    assert_eq!(code(&o), 8, "no identity yet: {}", stderr(&o));
    std::fs::remove_dir(u.home()).unwrap();
    let o = tono(&["keygen", "--user", u.name()], b"");
    assert_eq!(
        code(&o),
        7,
        "a missing home is a refused launch: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("chdir"), "{}", stderr(&o));
}

#[test]
fn insecure_identities_are_refused() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("k", b"v");
    let reveal = || tono(&["reveal", "--user", u.name(), "k"], b"");
    // group-readable
    u.sh("chmod 0640 .tono/identity");
    let o = reveal();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("0640"));
    u.sh("chmod 0600 .tono/identity");
    assert_eq!(reveal().stdout, b"v");
    // a symlink to the real file
    u.sh("mv .tono/identity .tono/id.real && ln -s id.real .tono/identity");
    let o = reveal();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("symlink"));
    u.sh("rm .tono/identity && mv .tono/id.real .tono/identity");
    // not a regular file
    u.sh("mv .tono/identity .tono/id.real && mkfifo -m 600 .tono/identity");
    assert_eq!(code(&reveal()), 4);
    u.sh("rm .tono/identity && mv .tono/id.real .tono/identity");
    // owned by someone else: root puts a file there (test set-up only)
    let other = TestUser::with_key();
    std::fs::copy(
        other.home().join(".tono/identity"),
        u.home().join(".tono/identity.foreign"),
    )
    .unwrap();
    std::os::unix::fs::chown(
        u.home().join(".tono/identity.foreign"),
        Some(other.user.uid),
        Some(other.user.gid),
    )
    .unwrap();
    u.sh("mv .tono/identity .tono/id.real && mv .tono/identity.foreign .tono/identity");
    let o = reveal();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("owned by uid"));
    u.sh("rm -f .tono/identity && mv .tono/id.real .tono/identity");
    // too large
    u.sh("cp .tono/identity .tono/id.real && head -c 70000 /dev/zero | tr '\\0' '#' >> .tono/identity");
    assert_eq!(code(&reveal()), 4);
    u.sh("mv .tono/id.real .tono/identity");
    assert_eq!(reveal().stdout, b"v", "restored identity works again");
}

#[test]
fn malformed_identities_are_refused() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("k", b"v");
    for (what, script) in [
        ("empty", ": > .tono/identity"),
        ("garbage", "echo 'not a key at all' > .tono/identity"),
        (
            "truncated",
            "grep AGE-SECRET .tono/id.real | cut -c1-40 > .tono/identity",
        ),
    ] {
        u.sh("cp -p .tono/identity .tono/id.real");
        u.sh(script);
        let o = tono(&["reveal", "--user", u.name(), "k"], b"");
        assert_eq!(code(&o), 8, "{what}: {}", stderr(&o));
        assert!(!stdout(&o).contains('v'), "{what}: nothing revealed");
        u.sh("mv .tono/id.real .tono/identity");
    }
    assert_eq!(tono(&["reveal", "--user", u.name(), "k"], b"").stdout, b"v");
}

#[test]
fn corrupt_secrets_are_refused() {
    need_root!();
    let u = TestUser::with_key();
    let other = TestUser::with_key();
    u.seal("good", b"value");
    other.seal("theirs", b"x");
    let reveal = |name: &str| tono(&["reveal", "--user", u.name(), name], b"");
    u.sh("echo garbage > .tono/secrets/garbage.age; head -c 100 .tono/secrets/good.age > .tono/secrets/trunc.age");
    for name in ["garbage", "trunc"] {
        let o = reveal(name);
        assert_eq!(code(&o), 6, "{name}: {}", stderr(&o));
    }
    // Sealed to another key.
    let foreign = std::fs::read(other.home().join(".tono/secrets/theirs.age")).unwrap();
    let o = tono(&["import", "--user", u.name(), "foreign"], &foreign);
    assert_eq!(
        code(&o),
        6,
        "import of a file for another key: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("another key"), "{}", stderr(&o));
    assert_eq!(
        reveal("foreign").status.code(),
        Some(5),
        "nothing installed"
    );
    assert_eq!(reveal("good").stdout, b"value");
}

#[test]
fn a_symlink_to_a_root_only_file_is_never_followed() {
    need_root!();
    let u = TestUser::with_key();
    // A valid age file for this very user, readable only by root: if
    // anything followed the link as root, reveal would print its value.
    u.seal("bait", b"root-only-value");
    let bait = std::fs::read(u.home().join(".tono/secrets/bait.age")).unwrap();
    let dir = tempfile::tempdir_in("/root").unwrap();
    let target = dir.path().join("sealed.age");
    std::fs::write(&target, &bait).unwrap();
    u.sh("rm .tono/secrets/bait.age");
    u.sh(&format!(
        "ln -s {} .tono/secrets/link.age; ln -s /etc/shadow .tono/secrets/shadow.age",
        target.display()
    ));
    for name in ["link", "shadow"] {
        let o = tono(&["reveal", "--user", u.name(), name], b"");
        assert_eq!(code(&o), 6, "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
        assert!(!stdout(&o).contains("root-only-value"));
    }
}

#[test]
fn empty_and_oversize_values() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("k", b"old");
    let o = tono(&["seal", "--user", u.name(), "k"], b"");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--allow-empty"));
    let big = vec![b'x'; 100 * 1024 * 1024];
    let o = tono(&["seal", "--user", u.name(), "k"], &big);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("cap"));
    assert_eq!(
        tono(&["reveal", "--user", u.name(), "k"], b"").stdout,
        b"old"
    );
    let o = tono(&["seal", "--user", u.name(), "e", "--allow-empty"], b"");
    assert!(o.status.success());
    assert_eq!(tono(&["reveal", "--user", u.name(), "e"], b"").stdout, b"");
    for bad in ["..", "a/b", ".hidden", "", &"n".repeat(129)] {
        assert_eq!(
            code(&tono(&["seal", "--user", u.name(), bad], b"v")),
            2,
            "{bad:?}"
        );
    }
    let leftovers = u.sh("ls -A .tono/secrets | grep tmp || true");
    assert_eq!(stdout(&leftovers).trim(), "", "no temp files left");
}

fn mount_tmpfs(path: &std::path::Path, size: &str, uid: u32) -> bool {
    let ok = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700,uid={uid},gid={uid}"),
            "tonotest",
            &path.display().to_string(),
        ])
        .status()
        .is_ok_and(|s| s.success());
    ok
}

fn umount(path: &std::path::Path) {
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(path)
        .status();
}

#[test]
fn disk_full_and_read_only_home_keep_the_old_secret() {
    need_root!();
    let u = TestUser::bare();
    assert!(
        mount_tmpfs(u.home(), "256k", u.user.uid),
        "mounting a small tmpfs home"
    );
    let result = std::panic::catch_unwind(|| {
        assert!(tono(&["keygen", "--user", u.name()], b"").status.success());
        u.seal("k", b"old");
        // Fill the disk as the user, then try to replace the secret.
        u.sh("head -c 10000000 /dev/zero > fill 2>/dev/null; true");
        let o = tono(&["seal", "--user", u.name(), "k"], &vec![b'n'; 200_000]);
        assert_ne!(o.status.code(), Some(0), "disk full must fail");
        assert!(stderr(&o).contains("No space"), "{}", stderr(&o));
        assert_eq!(
            tono(&["reveal", "--user", u.name(), "k"], b"").stdout,
            b"old"
        );
        let leftovers = u.sh("ls -A .tono/secrets");
        assert_eq!(stdout(&leftovers).trim(), "k.age", "temp file removed");
        u.sh("rm fill");
        // Read-only home.
        assert!(std::process::Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(u.home())
            .status()
            .unwrap()
            .success());
        let o = tono(&["seal", "--user", u.name(), "k"], b"new");
        assert_ne!(o.status.code(), Some(0));
        assert!(stderr(&o).contains("Read-only"), "{}", stderr(&o));
        assert_eq!(
            tono(&["reveal", "--user", u.name(), "k"], b"").stdout,
            b"old"
        );
    });
    umount(u.home());
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn rotate_killed_at_many_points_never_loses_a_secret() {
    need_root!();
    let u = TestUser::with_key();
    let values: Vec<(String, String)> = (0..12)
        .map(|i| (format!("s{i}"), format!("value-{i}-{}", "z".repeat(i * 50))))
        .collect();
    for (n, v) in &values {
        u.seal(n, v.as_bytes());
    }
    let identity = u.home().join(".tono/identity");
    let sealed = |n: &str| std::fs::read(u.home().join(format!(".tono/secrets/{n}.age"))).unwrap();
    // How many keys the identity holds: a rotation's first write adds one,
    // its last drops all but the newest.
    let keys = || {
        std::fs::read_to_string(&identity)
            .unwrap_or_default()
            .matches("AGE-SECRET-KEY-")
            .count()
    };
    let start_rotate = || {
        std::process::Command::new(common::tono_bin())
            .args(["rotate", "--user", u.name()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // The launcher doing the rotation: the rotate's child running as the
    // user (a child of any of its threads).
    let uid = u.user.uid.to_string();
    let launcher_of = |child: &std::process::Child| -> Option<i32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).ok()?;
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|v| v.split_whitespace().next())
                        == Some(uid.as_str())
                })
            })
    };
    // Waits, polling, until the identity holds more than `than` keys (the
    // rotation's first write is on disk) or the rotate has ended; the
    // launcher doing it if the first. (Killed by its pid, by this process:
    // starting `pkill` took longer than a whole rotation in the guest.)
    let first_write_seen = |child: &mut std::process::Child, than: usize| {
        let mut launcher = None;
        loop {
            if launcher.is_none() {
                launcher = launcher_of(child);
            }
            if keys() > than {
                return launcher.or_else(|| launcher_of(child));
            }
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    };
    // Every secret opens, in one call as the user.
    let all_open = |round: u32| {
        let mut args = vec!["run", "--user", u.name(), "--view", "shared"];
        for (n, _) in &values {
            args.extend(["--secret", n]);
        }
        args.extend(["--", "/usr/bin/env"]);
        let o = tono(&args, b"");
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        let env = stdout(&o);
        for (n, v) in &values {
            assert!(
                env.lines().any(|l| l == format!("{n}={v}")),
                "round {round}: secret {n} did not open after a kill: {}",
                stderr(&o)
            );
        }
    };
    // The window this host gives a kill: from the first write seen to the
    // last, in one rotation left alone. The kills are spread across it, each
    // timed from its own rotation's first write (an event, not a guess at
    // how long the process takes to start); what is asserted is a count of
    // kills that landed inside.
    let mut child = start_rotate();
    assert!(
        first_write_seen(&mut child, 1).is_some(),
        "rotate wrote nothing, or its launcher was not found"
    );
    let seen = std::time::Instant::now();
    while keys() > 1 && child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let window = seen.elapsed();
    assert!(child.wait().unwrap().success());
    assert_eq!(keys(), 1);
    let rounds = 40u32;
    let (mut killed, mut inside) = (0, 0);
    // How far each kill inside got: how many secrets it had re-sealed.
    let mut points = std::collections::BTreeSet::new();
    for round in 0..rounds {
        let before = keys();
        let sealed_before: Vec<Vec<u8>> = values.iter().map(|(n, _)| sealed(n)).collect();
        let mut child = start_rotate();
        if let Some(launcher) = first_write_seen(&mut child, before) {
            std::thread::sleep(window * round / rounds);
            // Kill the launcher doing the work (the user's process), hard.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(launcher),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let status = child.wait().unwrap();
        if !status.success() {
            killed += 1;
            // Inside the rotation: after its first write (seen above) and
            // before its last (the old keys not yet dropped).
            if keys() > 1 {
                inside += 1;
                let resealed = values
                    .iter()
                    .zip(&sealed_before)
                    .filter(|((n, _), b)| sealed(n) != **b)
                    .count();
                points.insert(resealed);
            }
        }
        all_open(round);
    }
    assert!(
        inside >= rounds / 2,
        "only {inside} of {rounds} kills ({killed} rotations failed) landed inside a rotation; the test proves too little"
    );
    assert!(
        points.len() >= 3,
        "the kills inside landed at only {points:?} secrets re-sealed; not many points"
    );
    let o = tono(&["rotate", "--user", u.name()], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(keys(), 1, "a finished rotate leaves one key");
    all_open(rounds);
    eprintln!(
        "rotate (first to last write {window:?}): {killed}/{rounds} runs killed, {inside} of them between the first and the last write, with {points:?} of {} secrets re-sealed; every secret opened after each",
        values.len()
    );
}

#[test]
fn list_marks_each_entry_ok_weak_or_unreadable_for_one_user_or_all() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("fine", b"value-fine");
    u.seal("open", b"value-open");
    u.seal("other", b"value-other");
    // As the user (as an operator or a tool might): one file readable by
    // all, and one replaced by a seal to another key (age -r).
    let other = TestUser::with_key();
    let recipient = stdout(&tono(&["recipient", "--user", other.name()], b""));
    let o = u.sh(&format!(
        "chmod 0644 .tono/secrets/open.age && printf foreign | age -r {} > .tono/secrets/other.age",
        recipient.trim()
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tono(&["list", "--user", u.name(), "--json"], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let state = |name: &str| {
        let e = v["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap();
        (
            e["state"].as_str().unwrap().to_owned(),
            e["reasons"].clone(),
        )
    };
    assert_eq!(state("fine").0, "ok", "{v}");
    assert_eq!(state("open").0, "weak", "{v}");
    assert_eq!(state("open").1[0], "mode 0644: group or others have access");
    assert_eq!(state("other").0, "unreadable", "{v}");
    for value in ["value-fine", "value-open", "foreign"] {
        assert!(!stdout(&o).contains(value), "no value is shown");
    }
    // --all: every store of a user a worker may run as, each read as its
    // user; both test users are there with what `list --user` said.
    let o = tono(&["list", "--all", "--json"], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let of = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|e| e["user"] == name)
            .cloned()
    };
    assert_eq!(of(u.name()).unwrap()["store"], v, "{all}");
    assert_eq!(
        of(other.name()).unwrap()["store"]["identity"]["state"],
        "ok"
    );
    // A user without a store is left out.
    let bare = TestUser::bare();
    let o = tono(&["list", "--all", "--json"], b"");
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|e| e["user"] != bare.name()),
        "{all}"
    );
    assert_eq!(code(&tono(&["list", "--all", "--user", u.name()], b"")), 2);
}
