//! Interop with the reference Go `age` and with `rage` (the Rust one,
//! which `.ci/run` builds from crates.io: Debian 12 has no package of it):
//! what tono-seal seals opens with each, what each makes opens with
//! tono-seal, and an identity each one's key generator made is used as it
//! is. A tool that is missing is a loud SKIPPED, and a failure under
//! `CI=true`, where `.ci/run` installs them all.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{stderr, stdout, tono, TestUser};

/// Where `tool` is on root's `PATH` (the test users' `PATH` is
/// `/usr/bin:/bin`, and `rage` is installed in `/usr/local/bin`).
fn which(tool: &str) -> Option<PathBuf> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    let path = String::from_utf8(o.stdout).ok()?.trim().to_owned();
    (o.status.success() && path.starts_with('/')).then(|| PathBuf::from(path))
}

/// Every tool of `tools`, by absolute path; `None` (a loud skip, or a
/// failure under `CI=true`) when one is missing.
fn need(test: &str, tools: &[&str]) -> Option<Vec<String>> {
    let found: Vec<Option<PathBuf>> = tools.iter().map(|t| which(t)).collect();
    let missing: Vec<&str> = tools
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(t, _)| *t)
        .collect();
    if missing.is_empty() {
        return Some(
            found
                .into_iter()
                .map(|p| p.unwrap().display().to_string())
                .collect(),
        );
    }
    let how = "`age` and `age-keygen`: apt-get install -y age; `rage` and `rage-keygen`: \
               cargo install --locked --root /usr/local --version 0.12.1 rage";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{test} needs {missing:?}, which .ci/run installs ({how}): refusing to skip under CI"
        );
    }
    eprintln!("\n*** SKIPPED {test}: {missing:?} not installed ({how}) ***\n");
    None
}

/// Seals with tono-seal, opens with `tool -d` as the user.
fn tono_sealed_opens_with(test: &str, tool: &str) {
    let Some(found) = need(test, &[tool]) else {
        return;
    };
    let u = TestUser::with_key();
    u.seal("api", b"interop value\n");
    let o = u.sh(&format!(
        "{} -d -i .tono/identity .tono/secrets/api.age",
        found[0]
    ));
    assert!(o.status.success(), "{tool} -d: {}", stderr(&o));
    assert_eq!(o.stdout, b"interop value\n", "{tool} -d: {}", stderr(&o));
}

#[test]
fn tono_sealed_opens_with_reference_age() {
    need_root!();
    tono_sealed_opens_with("tono_sealed_opens_with_reference_age", "age");
}

#[test]
fn tono_sealed_opens_with_rage() {
    need_root!();
    tono_sealed_opens_with("tono_sealed_opens_with_rage", "rage");
}

/// Files `tool` encrypts to the user's recipient, binary and armored,
/// import and open with tono-seal.
fn files_made_by_import_and_open(test: &str, tool: &str) {
    let Some(found) = need(test, &[tool]) else {
        return;
    };
    let u = TestUser::with_key();
    let recipient = stdout(&tono(&["recipient", "--user", u.name()], b""))
        .trim()
        .to_owned();
    assert!(recipient.starts_with("age1"), "{recipient}");
    for (name, armor) in [("binary", ""), ("armored", "-a")] {
        let made = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "printf 'made elsewhere %s' {name} | {} {armor} -r {recipient}",
                    found[0]
                ),
            ])
            .output()
            .unwrap();
        assert!(made.status.success(), "{tool}: {}", stderr(&made));
        if armor.is_empty() {
            assert!(
                made.stdout.starts_with(b"age-encryption.org/v1\n"),
                "{tool} {name}"
            );
        } else {
            assert!(
                made.stdout
                    .starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"),
                "{tool} {name}"
            );
        }
        let o = tono(&["import", "--user", u.name(), name], &made.stdout);
        assert!(o.status.success(), "{tool}: import {name}: {}", stderr(&o));
        let o = tono(&["reveal", "--user", u.name(), name], b"");
        assert_eq!(stdout(&o), format!("made elsewhere {name}"), "{tool}");
    }
}

#[test]
fn reference_age_files_import_and_open() {
    need_root!();
    files_made_by_import_and_open("reference_age_files_import_and_open", "age");
}

#[test]
fn rage_files_import_and_open() {
    need_root!();
    files_made_by_import_and_open("rage_files_import_and_open", "rage");
}

/// An identity file of two keys made by `keygen` (as the age tools allow)
/// is used as it is: a file sealed by `tool` to the second opens, and the
/// last key is the current recipient.
fn an_identity_made_by(test: &str, keygen: &str, tool: &str) {
    let Some(found) = need(test, &[keygen, tool]) else {
        return;
    };
    let (keygen, tool) = (&found[0], &found[1]);
    let u = TestUser::with_key();
    let o = u.sh(&format!(
        "umask 077; {keygen} 2>/dev/null > .tono/identity; {keygen} 2>/dev/null >> .tono/identity; \
         grep -o 'age1.*' .tono/identity | tail -1"
    ));
    let second = stdout(&o).trim().to_owned();
    assert!(second.starts_with("age1"), "{keygen}: {}", stderr(&o));
    let keys = u.sh("grep -c '^AGE-SECRET-KEY-1' .tono/identity");
    assert_eq!(stdout(&keys).trim(), "2", "{keygen} made two keys");
    let made = Command::new("sh")
        .args(["-c", &format!("printf two-keys | {tool} -r {second}")])
        .output()
        .unwrap();
    assert!(made.status.success(), "{tool}: {}", stderr(&made));
    let o = tono(&["import", "--user", u.name(), "k"], &made.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&tono(&["reveal", "--user", u.name(), "k"], b"")),
        "two-keys"
    );
    assert_eq!(
        stdout(&tono(&["recipient", "--user", u.name()], b"")).trim(),
        second,
        "the last key is current"
    );
}

#[test]
fn an_identity_made_by_age_keygen_is_used_as_is() {
    need_root!();
    an_identity_made_by(
        "an_identity_made_by_age_keygen_is_used_as_is",
        "age-keygen",
        "age",
    );
}

#[test]
fn an_identity_made_by_rage_keygen_is_used_as_is() {
    need_root!();
    an_identity_made_by(
        "an_identity_made_by_rage_keygen_is_used_as_is",
        "rage-keygen",
        "rage",
    );
}
