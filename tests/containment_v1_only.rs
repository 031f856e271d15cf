//! A host with cgroup v1 but no v2 (the worker is told to leave the v2
//! mount alone): what escaped a call is killed through the call's v1
//! cgroup, by pidfd, when the call ends, while a concurrent call of the
//! same user lives on. One test in its own binary: the mounts are set once
//! per process.

mod common;

use std::time::{Duration, Instant};

use common::{limits_note, live_processes, rt, shell, TestUser, ESCAPES};
use tono_seal::contain::{self, Mounts};

#[test]
fn without_v2_what_escaped_is_killed_through_the_v1_cgroup() {
    need_root!();
    let detected = Mounts::detect();
    if detected.v1_pids.is_none() {
        eprintln!("SKIP: no cgroup v1 pids hierarchy on this host");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI runs on a hybrid host"
        );
        return;
    }
    assert!(contain::use_mounts(Mounts {
        v2: None,
        ..detected
    }));
    let u = TestUser::with_key();
    rt().block_on(async {
        let user = u.user.clone();
        let long = tokio::spawn(async move {
            shell(&user, "sleep 2; echo survived", Duration::from_secs(20)).await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for escape in ESCAPES {
            let started = Instant::now();
            let out = shell(&u.user, escape, Duration::from_secs(10)).await;
            assert_eq!(out.stdout.trim(), "started", "{escape}: {out:?}");
            assert!(started.elapsed() < Duration::from_secs(3), "{escape}");
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
        let long = long.await.unwrap();
        assert_eq!(long.stdout.trim(), "survived", "{long:?}");
    });
}
