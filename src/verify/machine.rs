//! Facts about the machine, read by root from root-owned files only (user
//! namespaces, `/proc` mount options, shared groups or uids, writable
//! code): never from a path inside a home.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;

use super::probe::{fact, Probe, VerifyPlan};

/// Facts read by root from root-owned files.
pub fn machine_facts(plan: &VerifyPlan) -> Vec<Probe> {
    let mut out = Vec::new();
    let userns = &crate::host::HostFacts::current().user_namespaces;
    out.push(fact(
        "the uid map is the identity (not a user namespace)",
        if userns.uids_are_the_hosts {
            "0 0 4294967295".to_string()
        } else {
            format!("uid_map is {:?}: uids here are cosmetic", userns.uid_map)
        },
        userns.uids_are_the_hosts,
    ));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let hidepid = mountinfo
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some("/proc"))
        .any(|l| l.contains("hidepid=") && !l.contains("hidepid=0") && !l.contains("hidepid=off"));
    out.push(fact(
        "/proc is mounted without hidepid (the evidence is visible)",
        if hidepid {
            "hidepid is set"
        } else {
            "no hidepid"
        },
        !hidepid,
    ));
    let uids: Vec<u32> = plan.users.iter().map(|u| u.uid).collect();
    let unique: BTreeSet<u32> = uids.iter().copied().collect();
    out.push(fact(
        "no two probed users share a uid",
        format!("uids {uids:?}"),
        unique.len() == uids.len(),
    ));
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    for a in &plan.users {
        for b in &plan.users {
            if a.uid == b.uid {
                continue;
            }
            let shares = a.gid == b.gid
                || groups.lines().any(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    f.len() == 4
                        && f[2].parse() == Ok(b.gid)
                        && f[3].split(',').any(|m| m == a.name)
                });
            out.push(fact(
                format!("{} is not in {}'s group", a.name, b.name),
                if shares {
                    format!("{} is a member of gid {}", a.name, b.gid)
                } else {
                    "no shared group".into()
                },
                !shares,
            ));
        }
    }
    // What a call's containment does is probed as a user
    // (`super::containment`), never stated here.
    out.extend(super::tree_walk::code_tree_facts(&plan.code, &plan.users));
    // Each probed user is one a worker may act as: in the allotted range,
    // not a system account or nobody, its primary group its own alone.
    let range = crate::user::AllottedRange::default();
    for user in &plan.users {
        let verdict = crate::user::check_worker_target(user, &range);
        out.push(fact(
            format!(
                "a worker may act as {} (ids in {range}, own unshared primary group)",
                user.name
            ),
            match &verdict {
                Ok(()) => format!(
                    "uid {} gid {}, group {} alone",
                    user.uid, user.gid, user.name
                ),
                Err(e) => e.to_string(),
            },
            verdict.is_ok(),
        ));
    }
    out
}
