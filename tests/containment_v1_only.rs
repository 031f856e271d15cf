//! A host with cgroup v1 but no v2 (the worker is told to leave the v2
//! mount alone): what escaped a call is killed through the call's v1
//! cgroup, by pidfd, when the call ends, while a concurrent call of the
//! same user lives on. The calls use the shared view and escapes out of
//! the process group, so the v1 cgroup's kill is all that can end them
//! (the escapes of `common/group_escapes.rs`, each beside its control
//! without a cgroup). One test in its own binary: the mounts are set once
//! per process.

mod common;
#[path = "common/group_escapes.rs"]
mod group_escapes;

use std::time::Duration;

use common::{limits_note, rt, shell_shared, TestUser};
use tono_seal::contain::{self, Mounts};

#[test]
fn without_v2_what_escaped_is_killed_through_the_v1_cgroup() {
    need_root!();
    let detected = Mounts::detect();
    if detected.v1_pids.is_none() {
        // A host with only cgroup v2 (systemd's default since 2021) has no
        // v1 path to test: said loudly, and there the v2 path is tested by
        // tests/containment.rs. A hybrid host without the v1 pids
        // hierarchy is a broken test host: that fails under CI.
        let v2_only = detected.v1_memory.is_none()
            && std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
                m.lines()
                    .any(|l| l.contains(" /sys/fs/cgroup ") && l.contains(" - cgroup2 "))
            });
        eprintln!(
            "\n*** SKIPPED {}: this host has no cgroup v1 pids hierarchy{} ***\n",
            module_path!(),
            if v2_only {
                " (it is a pure cgroup v2 host; the v1 path cannot exist here)"
            } else {
                ""
            }
        );
        assert!(
            v2_only || std::env::var("CI").as_deref() != Ok("true"),
            "CI: a hybrid host must have the v1 pids hierarchy"
        );
        return;
    }
    assert!(contain::use_mounts(Mounts {
        v2: None,
        ..detected
    }));
    let u = TestUser::with_key();
    // The other call runs until the test says it is done (a file), at
    // most 2,400 looks: bounded by events, not by a clock. It says it runs
    // with a file of its own.
    let done = common::marker_path(&format!("tono-v1-done-{}", std::process::id()));
    let ready = common::marker_path(&format!("tono-v1-ready-{}", std::process::id()));
    let _ = std::fs::remove_file(&done);
    let _ = std::fs::remove_file(&ready);
    let wait = format!(
        "touch {ready}; i=0; while [ ! -e {done} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; \
         [ -e {done} ] && echo survived"
    );
    rt().block_on(async {
        let user = u.user.clone();
        let long =
            tokio::spawn(async move { shell_shared(&user, &wait, Duration::from_secs(180)).await });
        let mut looks = 0;
        while !std::path::Path::new(&ready).exists() {
            looks += 1;
            assert!(
                looks < 10_000 && !long.is_finished(),
                "the other call never started"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        group_escapes::the_cgroup_kills_what_left_the_group(
            &u,
            &|| !long.is_finished(),
            &|how, out| {
                let limits = out.limits.as_ref().unwrap();
                assert!(!limits.cgroup_v2, "{how}: {out:?}");
                assert!(limits.pids_max.is_some(), "{how}: {out:?}");
                // The note names the mechanism; the count above is the kill.
                assert!(
                    limits_note(out).contains("pidfd"),
                    "{how}: the outcome says how the call is ended: {limits:?}"
                );
            },
        )
        .await;
        std::fs::write(&done, b"").unwrap();
        let long = long.await.unwrap();
        let _ = std::fs::remove_file(&done);
        let _ = std::fs::remove_file(&ready);
        assert_eq!(long.stdout.trim(), "survived", "{long:?}");
    });
}
