//! Interop with the reference Go `age` (and `rage` where installed): what
//! tono-seal seals opens with them, and what they make opens with tono-seal.

mod common;

use std::process::Command;

use common::{stderr, stdout, tono, TestUser};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn need_age() -> bool {
    if have("age") {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the interop tests need the Go `age` (apt-get install -y age); CI installs it");
    }
    eprintln!("\n*** SKIPPED interop: `age` is not installed (apt-get install -y age) ***\n");
    false
}

#[test]
fn tono_sealed_opens_with_reference_age_and_rage() {
    need_root!();
    if !need_age() {
        return;
    }
    let u = TestUser::with_key();
    u.seal("api", b"interop value\n");
    let o = u.sh("age -d -i .tono/identity .tono/secrets/api.age");
    assert!(o.status.success(), "age -d: {}", stderr(&o));
    assert_eq!(o.stdout, b"interop value\n");
    if have("rage") {
        let o = u.sh("rage -d -i .tono/identity .tono/secrets/api.age");
        assert_eq!(o.stdout, b"interop value\n", "rage -d: {}", stderr(&o));
    } else {
        eprintln!("rage is not installed: the rage half of this test did not run");
    }
}

#[test]
fn reference_age_files_import_and_open() {
    need_root!();
    if !need_age() {
        return;
    }
    let u = TestUser::with_key();
    let recipient = stdout(&tono(&["recipient", "--user", u.name()], b""))
        .trim()
        .to_owned();
    for (name, armor) in [("binary", ""), ("armored", "-a")] {
        let made = Command::new("sh")
            .args([
                "-c",
                &format!("printf 'made elsewhere %s' {name} | age {armor} -r {recipient}"),
            ])
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", stderr(&made));
        let o = tono(&["import", "--user", u.name(), name], &made.stdout);
        assert!(o.status.success(), "import {name}: {}", stderr(&o));
        let o = tono(&["reveal", "--user", u.name(), name], b"");
        assert_eq!(stdout(&o), format!("made elsewhere {name}"));
    }
}

#[test]
fn an_identity_made_by_age_keygen_is_used_as_is() {
    need_root!();
    if !need_age() || !have("age-keygen") {
        return;
    }
    let u = TestUser::with_key();
    // Two keys in one file, as the age tools allow; seal to the second.
    let o = u.sh("umask 077; age-keygen 2>/dev/null > .tono/identity; age-keygen 2>/dev/null >> .tono/identity; grep -o 'age1.*' .tono/identity | tail -1");
    let second = stdout(&o).trim().to_owned();
    assert!(second.starts_with("age1"), "{}", stderr(&o));
    let made = Command::new("sh")
        .args(["-c", &format!("printf two-keys | age -r {second}")])
        .output()
        .unwrap();
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
