//! A host with cgroup v1 but no v2 (the worker is told to leave the v2
//! mount alone): what escaped a call is killed through the call's v1
//! cgroup, by pidfd, when the call ends, while a concurrent call of the
//! same user lives on. One test in its own binary: the mounts are set once
//! per process.

mod common;

use std::time::Duration;

use common::{limits_note, live_processes, rt, shell, TestUser, ESCAPES};
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
    // most 600 looks: bounded by events, not by a clock.
    // (Where a private call sees the host's files: its /tmp is its own.)
    let done = std::path::PathBuf::from(common::marker_path(&format!(
        "tono-v1-done-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_file(&done);
    let wait = format!(
        "i=0; while [ ! -e {0} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
         [ -e {0} ] && echo survived",
        done.display()
    );
    rt().block_on(async {
        let user = u.user.clone();
        let long = tokio::spawn(async move { shell(&user, &wait, Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for escape in ESCAPES {
            let out = shell(&u.user, escape, Duration::from_secs(10)).await;
            assert_eq!(out.stdout.trim(), "started", "{escape}: {out:?}");
            // It ended without waiting for the user's other call (an event,
            // not a clock: that call is still running).
            assert!(!long.is_finished(), "{escape}: waited for the other call");
            let left: Vec<String> = live_processes(u.user.uid)
                .into_iter()
                .filter(|p| p.contains("1000"))
                .collect();
            assert!(left.is_empty(), "{escape}: outlived the call: {left:?}");
            let limits = out.limits.as_ref().unwrap();
            assert!(!limits.cgroup_v2, "{out:?}");
            assert!(limits.pids_max.is_some(), "{out:?}");
            assert_eq!(limits.cleanup_error, None, "{out:?}");
            assert!(
                limits_note(&out).contains("pidfd"),
                "the outcome says how the call ended: {limits:?}"
            );
        }
        std::fs::write(&done, b"").unwrap();
        let long = long.await.unwrap();
        let _ = std::fs::remove_file(&done);
        assert_eq!(long.stdout.trim(), "survived", "{long:?}");
    });
}
