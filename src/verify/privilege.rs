//! Whether a probed user could become root outside a call: root asks
//! `sudo` itself what the user may run (`sudo -l -U USER`) and reads
//! `/etc/group` for the groups that are root by another name.
//!
//! Guarantees: the `sudo -n true` a call tries only shows that
//! `no_new_privs` holds in a call (under it sudo refuses everyone, a
//! `NOPASSWD: ALL` sudoer too); these probes show what an operator needs
//! to know — the user is no sudoer and in no privileged group — and fail,
//! naming the rule or group, when the user is. An answer of `sudo` that is
//! neither "not allowed" nor a list of commands is inconclusive, with what
//! it said.
#![forbid(unsafe_code)]

use std::process::Command;

use super::probe::{Expect, Probe, Verdict};
use crate::user::TargetUser;

/// Groups whose members are root, or can become it, or read what only
/// root should: `sudo`/`wheel`/`admin` (sudoers by group), `docker`, `lxd`
/// and `lxc` (a root container is a root shell), `libvirt` and `kvm`
/// (a guest with the host's disks), `disk` (raw block devices), `shadow`
/// (password hashes), `kmem` (kernel memory), `adm` and `systemd-journal`
/// (every log), `root` (gid 0's files).
pub const PRIVILEGED_GROUPS: &[&str] = &[
    "root",
    "sudo",
    "wheel",
    "admin",
    "adm",
    "docker",
    "lxd",
    "lxc",
    "libvirt",
    "kvm",
    "disk",
    "shadow",
    "kmem",
    "systemd-journal",
];

/// What `sudo -l -U` printed, judged: `is not allowed to run sudo` passes,
/// `may run the following commands` fails with those commands, anything
/// else proves nothing.
fn judge_sudo_list(user: &str, exit: Option<i32>, out: &str) -> (Verdict, String) {
    if out.contains(&format!("User {user} is not allowed to run sudo")) {
        return (Verdict::Pass, format!("sudo -l -U {user}: not allowed"));
    }
    if let Some((_, rules)) = out.split_once(&format!("User {user} may run the following commands"))
    {
        let rules: Vec<&str> = rules
            .lines()
            .skip(1)
            .map(str::trim)
            // sudo's own diagnostics (`sudo: unable to resolve host …`,
            // on stderr, which is read with stdout) are no rule.
            .filter(|l| !l.is_empty() && !l.starts_with("sudo: "))
            .collect();
        return (
            Verdict::Fail,
            format!("sudo -l -U {user}: a sudoer: {}", rules.join("; ")),
        );
    }
    (
        Verdict::Inconclusive,
        format!(
            "inconclusive: sudo -l -U {user} exit {exit:?}: {}",
            out.trim().replace('\n', " ")
        ),
    )
}

/// Which of [`PRIVILEGED_GROUPS`] (or gid 0) `user` is in, by `/etc/group`:
/// as a listed member, or by primary gid.
fn privileged_memberships(user: &TargetUser, group_file: &str) -> Vec<String> {
    group_file
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            let [name, _, gid, members] = f.as_slice() else {
                return None;
            };
            let gid: u32 = gid.parse().ok()?;
            let privileged = gid == 0 || PRIVILEGED_GROUPS.contains(name);
            let member = gid == user.gid || members.split(',').any(|m| m == user.name);
            (privileged && member).then(|| format!("{name} (gid {gid})"))
        })
        .collect()
}

/// Root's probes of whether `user` could become root outside a call.
pub fn privilege_probes(user: &TargetUser, sudo: Option<&std::path::Path>) -> Vec<Probe> {
    let root = |tried: String, got: String, verdict: Verdict| Probe {
        uid: 0,
        user: "root".into(),
        ..Probe::of(user, tried, Expect::Holds, got, verdict)
    };
    let mut out = Vec::new();
    let tried = format!("{} is no sudoer (sudo -l -U, asked by root)", user.name);
    match sudo {
        None => out.push(root(
            tried,
            "sudo is not installed: nobody is a sudoer".into(),
            Verdict::Pass,
        )),
        Some(sudo) => {
            let answer = Command::new(sudo)
                .args(["-n", "-l", "-U", &user.name])
                .env_clear()
                .env("LC_ALL", "C")
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .output();
            let (verdict, got) = match answer {
                Ok(o) => {
                    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
                    text.push_str(&String::from_utf8_lossy(&o.stderr));
                    judge_sudo_list(&user.name, o.status.code(), &text)
                }
                Err(e) => (
                    Verdict::Inconclusive,
                    format!("inconclusive: {} could not run: {e}", sudo.display()),
                ),
            };
            out.push(root(tried, got, verdict));
        }
    }
    let groups = std::fs::read_to_string("/etc/group");
    let tried = format!(
        "{} is in no privileged group ({})",
        user.name,
        PRIVILEGED_GROUPS.join(", ")
    );
    out.push(match groups {
        Ok(groups) => {
            let found = privileged_memberships(user, &groups);
            if found.is_empty() {
                root(
                    tried,
                    "a member of none, by /etc/group".into(),
                    Verdict::Pass,
                )
            } else {
                root(
                    tried,
                    format!("a member of {}", found.join(", ")),
                    Verdict::Fail,
                )
            }
        }
        Err(e) => root(
            tried,
            format!("inconclusive: /etc/group: {e}"),
            Verdict::Inconclusive,
        ),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> TargetUser {
        TargetUser {
            name: "tonotest61001".into(),
            uid: 61001,
            gid: 61001,
            home: "/home/tonotest61001".into(),
            shell: "/bin/sh".into(),
        }
    }

    #[test]
    fn a_sudoer_fails_naming_the_rule_and_an_odd_answer_is_inconclusive() {
        let name = "tonotest61001";
        let (v, got) = judge_sudo_list(
            name,
            Some(0),
            &format!("User {name} is not allowed to run sudo on vm.\n"),
        );
        assert_eq!(
            (v, got.as_str()),
            (Verdict::Pass, "sudo -l -U tonotest61001: not allowed")
        );
        let (v, got) = judge_sudo_list(
            name,
            Some(0),
            &format!(
                "Matching Defaults entries for {name} on vm:\n    env_reset\n\n\
                 User {name} may run the following commands on vm:\n    (ALL) NOPASSWD: ALL\n"
            ),
        );
        assert_eq!(v, Verdict::Fail);
        assert!(got.ends_with("a sudoer: (ALL) NOPASSWD: ALL"), "{got}");
        // sudo's warning on a host that cannot resolve its own name (seen
        // in the Debian 12 guest) is no rule.
        let (v, got) = judge_sudo_list(
            name,
            Some(0),
            &format!(
                "User {name} may run the following commands on vm:\n    (ALL) NOPASSWD: ALL\n                 sudo: unable to resolve host tono-guest: Temporary failure in name resolution\n"
            ),
        );
        assert_eq!(v, Verdict::Fail);
        assert!(got.ends_with("a sudoer: (ALL) NOPASSWD: ALL"), "{got}");
        let (v, got) = judge_sudo_list(name, Some(1), "sudo: unknown user x\n");
        assert_eq!(v, Verdict::Inconclusive);
        assert!(got.starts_with("inconclusive: "), "{got}");
        // Another user's "not allowed" is not this one's.
        let (v, _) = judge_sudo_list(
            name,
            Some(0),
            "User tonotest6100 is not allowed to run sudo",
        );
        assert_eq!(v, Verdict::Inconclusive);
    }

    #[test]
    fn privileged_groups_are_found_by_member_list_and_by_primary_gid() {
        let file = "root:x:0:\nsudo:x:27:alice,tonotest61001\ndocker:x:999:tonotest610011\n\
                    tonotest61001:x:61001:\nstaff:x:50:tonotest61001\n";
        assert_eq!(privileged_memberships(&user(), file), ["sudo (gid 27)"]);
        let rooted = TargetUser { gid: 0, ..user() };
        assert_eq!(
            privileged_memberships(&rooted, file),
            ["root (gid 0)", "sudo (gid 27)"]
        );
        assert!(privileged_memberships(&user(), "tonotest61001:x:61001:\n").is_empty());
    }
}
